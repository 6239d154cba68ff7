"""Sentence-transformers / Hugging Face encoders with the pooled embedding of every layer."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from transformers import BatchEncoding

from demitasse.data import check_texts
from demitasse.encoders.backends import INT8_VERSION, check_backend, check_installed, graph_path
from demitasse.encoders.base import check_batch_size
from demitasse.encoders.cache import encode_through, fingerprint_directory, open_cache
from demitasse.encoders.exit_heads import load_exit_heads
from demitasse.encoders.onnx_graph import OnnxSession
from demitasse.encoders.packing import PackedBatch, pack_rows, packed_batch, unpack
from demitasse.encoders.resolve import DEFAULT_MODEL, resolve_model
from demitasse.errors import DemitasseError
from demitasse.io import signals_held
from demitasse.progress import tracked

POOLINGS = ("mean", "cls", "max", "lasttoken")
PROGRESS_MIN_TEXTS = 2048
#: Tokens per row of a packed pass: attention grows with the square of a row's width, so
#: wider rows would cost more in attention than they save in rows (a few % at 128).
PACKED_ROW_TOKENS = 128
#: Rows per packed pass, which bounds its memory (attention scores grow with rows × width²)
#: when long texts fill one row each.
PACKED_ROWS_PER_PASS = 32
#: Texts of varied length that :meth:`TransformerEncoder.packing_matches` packs side by side.
PACKING_PROBE = (
    "A man is playing a guitar.",
    "Packed texts must not see each other.",
    "Dogs",
    "The quick brown fox jumps over the lazy dog, twice, before the sun sets on the hill.",
    "Position ids restart at zero for every text in a row.",
)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Pool token states ``[batch, tokens, dim]`` into sentence vectors ``[batch, dim]``."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    if pooling == "mean":
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "max":
        return hidden.masked_fill(mask == 0, torch.finfo(hidden.dtype).min).max(1).values
    if pooling == "lasttoken":
        last = attention_mask.sum(1) - 1
        return hidden[torch.arange(hidden.shape[0]), last]
    raise DemitasseError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")


def _pooling_of(module: Any) -> str:
    """The pooling mode of a sentence-transformers Pooling module, across library versions."""
    mode = getattr(module, "pooling_mode", None)
    if mode is None and hasattr(module, "get_pooling_mode_str"):
        mode = module.get_pooling_mode_str()
    mode = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max"}.get(str(mode), mode)
    if mode not in POOLINGS:
        raise DemitasseError(f"unsupported pooling mode {mode!r} in the model's Pooling module")
    return str(mode)


def layer_stack(model: torch.nn.Module) -> tuple[torch.nn.Module, str] | None:
    """The module holding the transformer blocks as a ModuleList, for cutting the model."""
    for owner_name in ("encoder", "transformer", "model"):
        owner: Any = getattr(model, owner_name, None)
        for attr in ("layer", "layers", "h"):
            if isinstance(getattr(owner, attr, None), torch.nn.ModuleList):
                return owner, attr
    return None


class TransformerEncoder:
    """A transformer sentence encoder that exposes every layer's pooled embedding.

    One forward pass yields all layers; a request for layers up to ``k`` runs only the first
    ``k`` blocks, so a layer cut costs what it would cost deployed. ``backend`` runs that
    forward pass in torch, or in ONNX Runtime in float32 (``"onnx"``) or with int8 weights
    (``"onnx-int8"``); see :mod:`demitasse.encoders.backends`.

    With ``cache``, vectors are read through the embedding cache every command shares
    (:mod:`demitasse.encoders.cache`), or through ``cache_dir`` when given;
    ``work_cache_dir`` is a folder read first that keeps a copy of all of them (a tune's).
    """

    def __init__(
        self,
        name_or_path: str | Path = DEFAULT_MODEL,
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        max_seq_length: int | None = None,
        device: str | None = None,
        cache: bool = True,
        cache_dir: str | Path | None = None,
        show_progress: bool | None = None,
        backend: str = "torch",
        work_cache_dir: str | Path | None = None,
    ) -> None:
        SentenceTransformer = _sentence_transformer_class()  # noqa: N806
        device = _device_of(backend, device)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one bar per weight file is noise, not progress
        resolved = resolve_model(name_or_path)
        self.name = resolved.name
        self.path = resolved.path
        self.source = resolved.source
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            model = SentenceTransformer(str(resolved.path), device=self.device)
        except Exception as exc:
            raise DemitasseError(f"cannot load model from {resolved.path}: {exc}") from None
        self.sentence_transformer = model
        modules = _checked_modules(model, resolved.path)
        # sentence-transformers' and transformers' classes: attributes torch cannot type.
        transformer: Any = modules[0]
        self._transformer = transformer
        self.tokenizer: Any = transformer.tokenizer
        self.model: Any = transformer.auto_model.eval()
        pooling_modules = [m for m in modules[1:] if type(m).__name__ == "Pooling"]
        self.pooling = pooling or (_pooling_of(pooling_modules[0]) if pooling_modules else "mean")
        if self.pooling not in POOLINGS:
            raise DemitasseError(f"unknown pooling {self.pooling!r}; choose one of {POOLINGS}")
        has_normalize = any(type(m).__name__ == "Normalize" for m in modules)
        self.normalize = has_normalize if normalize is None else normalize
        configured: Any = self._transformer.max_seq_length
        self.max_seq_length = int(max_seq_length or configured or 512)
        self.do_lower_case = bool(getattr(self._transformer, "do_lower_case", False))
        config: Any = self.model.config
        self.num_layers = int(config.num_hidden_layers)
        self.dim = int(config.hidden_size)
        self.show_progress = show_progress
        self.heads = self._load_heads(modules, resolved.path)
        # transformers >= 5 collects hidden states through hooks it attaches to the blocks
        # present at the first forward call; a layer cut hides blocks, so run the whole model
        # once now or a cut-first caller would lose the deeper layers for good.
        with torch.inference_mode():
            self.model(**self.tokenize(["warm up"]), output_hidden_states=True)
        self._cache_settings = (cache, cache_dir, work_cache_dir)
        self._sessions: dict[tuple[str, tuple[int, ...]], OnnxSession] = {}
        self.backend = backend

    @property
    def backend(self) -> str:
        """``"torch"``, ``"onnx"`` or ``"onnx-int8"``; settable (graphs export on first use)."""
        return self._backend

    @backend.setter
    def backend(self, backend: str) -> None:
        check_backend(backend)
        check_installed(backend)
        if backend != "torch" and self.device != "cpu":
            raise DemitasseError(f"the {backend} backend runs on the CPU, not on {self.device}")
        self._backend = backend
        cache, cache_dir, work_dir = self._cache_settings
        self._cache = None
        if cache:
            self._cache = open_cache(self._cache_key(self.path), self.dim, cache_dir, work_dir)

    def _load_heads(self, modules: list[Any], path: Path) -> dict[int, torch.nn.Module]:
        """What maps a layer's pooled embedding before normalisation: the pipeline's Dense
        modules act on the last layer (an exported cut writes its exit head as one), a trained
        model's exit heads on the layers they belong to."""
        heads: dict[int, torch.nn.Module] = {}
        dense = [m for m in modules[1:] if type(m).__name__ == "Dense"]
        if dense:
            out = getattr(dense[-1], "out_features", self.dim)
            if out != self.dim:
                raise DemitasseError(
                    f"{path}: its Dense module maps to {out} dims; demitasse encodes "
                    f"every layer at the hidden size {self.dim}"
                )
            heads[self.num_layers] = _SentenceEmbeddingModules(dense)
        for layer, (weight, bias) in load_exit_heads(path, self.dim).items():
            linear = torch.nn.Linear(self.dim, self.dim)
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(weight))
                linear.bias.copy_(torch.from_numpy(bias))
            heads[layer] = linear.to(self.device).eval()
        return heads

    def _cache_key(self, path: Path) -> str:
        """The embedding cache's name of exactly this model (its files' content), pooling,
        normalisation, sequence length, heads and backend (the layer and the text key the
        vectors inside)."""
        return "-".join(
            [
                self.name,
                fingerprint_directory(path),
                self.pooling,
                "norm" if self.normalize else "raw",
                str(self.max_seq_length),
                # Embeddings cached before heads were applied must not be read back.
                *(["heads" + "".join(map(str, sorted(self.heads)))] if self.heads else []),
                # int8 weights give other vectors, and each int8 graph its own; torch's keys
                # stay as they were.
                *([self.backend] if self.backend != "torch" else []),
                *([f"v{INT8_VERSION}"] if self.backend == "onnx-int8" else []),
            ]
        )

    def __repr__(self) -> str:
        return (
            f"TransformerEncoder({self.name!r}, layers={self.num_layers}, dim={self.dim}, "
            f"pooling={self.pooling!r}, normalize={self.normalize}, backend={self.backend!r})"
        )

    def _check_layers(self, layers: Sequence[int] | None) -> list[int]:
        if layers is None:
            return list(range(1, self.num_layers + 1))
        bad = [layer for layer in layers if not 1 <= int(layer) <= self.num_layers]
        if bad:
            raise DemitasseError(
                f"layer {bad[0]} does not exist: {self.name} has layers 1..{self.num_layers}"
            )
        return sorted({int(layer) for layer in layers})

    def encode(
        self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32
    ) -> np.ndarray:
        layer = self.num_layers if layer is None else layer
        return self.encode_layers(texts, [layer], batch_size=batch_size)[layer]

    def encode_layers(
        self, texts: Sequence[str], layers: Sequence[int] | None = None, batch_size: int = 32
    ) -> dict[int, np.ndarray]:
        texts = check_texts(texts)
        check_batch_size(batch_size)
        wanted = self._check_layers(layers)
        return encode_through(
            self._cache, texts, wanted, self.dim,
            lambda unique: self._forward_all(unique, wanted, batch_size),
        )  # fmt: skip

    @contextlib.contextmanager
    def cut_to(self, depth: int) -> Iterator[None]:
        """Within the block, the torch model runs its first ``depth`` blocks only."""
        stack = layer_stack(self.model)
        if stack is None or depth >= self.num_layers:
            yield
            return
        owner, attr = stack
        full = getattr(owner, attr)
        setattr(owner, attr, torch.nn.ModuleList(list(full)[:depth]))
        try:
            yield
        finally:
            setattr(owner, attr, full)

    def tokenize(self, batch: list[str]) -> dict[str, torch.Tensor]:
        """Model inputs for ``batch`` on the encoder's device, as sentence-transformers builds."""
        return dict(self.features(batch))

    def _prepared(self, texts: Sequence[str]) -> list[str]:
        """Texts as sentence-transformers hands them to the tokenizer."""
        return [t.strip().lower() if self.do_lower_case else t.strip() for t in texts]

    def features(self, batch: list[str]) -> BatchEncoding:
        """:meth:`tokenize`'s inputs with the fast tokenizer's encodings (word ids, tokens)."""
        features = self.tokenizer(
            self._prepared(batch),
            padding=True,
            truncation="longest_first",
            max_length=self.max_seq_length,
            return_tensors="pt",
        )
        return features.to(self.device)

    def cache_embeddings(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store last-layer sentence embeddings computed elsewhere (e.g. while extracting word
        vectors from the same forward passes), so a later :meth:`encode` reads them."""
        if self._cache is not None:
            self._cache.store(list(texts), {self.num_layers: vectors})

    def _forward_all(
        self, texts: list[str], layers: list[int], batch_size: int
    ) -> dict[int, np.ndarray]:
        """Encode ``texts`` (longest first, so batches pad little) and pool each layer."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = {layer: np.empty((len(texts), self.dim), dtype=np.float32) for layer in layers}
        show = self.show_progress
        if show is None:
            show = len(texts) >= PROGRESS_MIN_TEXTS and not os.environ.get("DEMITASSE_QUIET")
        starts = range(0, len(texts), batch_size)
        run = self._onnx_batch(layers) if self.backend != "torch" else self._torch_batch
        with torch.inference_mode(), self.cut_to(max(layers)):
            for start in tracked(
                starts, f"encoding with {self.name}", unit="batches", enabled=show
            ):
                idx = order[start : start + batch_size]
                # A signal waits for the batch: inside torch's C++ code, a KeyboardInterrupt
                # raised in a callback into Python would abort the process.
                with signals_held():
                    batch_layers = list(run([texts[i] for i in idx], layers))
                for layer, vectors in zip(layers, batch_layers, strict=True):
                    if self.normalize:
                        vectors = F.normalize(torch.from_numpy(vectors), p=2, dim=1).numpy()
                    out[layer][idx] = vectors
        return out

    def _torch_batch(self, batch: list[str], layers: list[int]) -> list[np.ndarray]:
        """Each layer's pooled (and exit-headed) vectors of one batch, by torch."""
        features = self.tokenize(batch)
        hidden = self.model(**features, output_hidden_states=True).hidden_states
        pooled = []
        for layer in layers:
            vectors = pool(hidden[layer], features["attention_mask"], self.pooling)
            if layer in self.heads:
                vectors = self.heads[layer](vectors)
            pooled.append(vectors.float().cpu().numpy())
        return pooled

    def _onnx_batch(self, layers: list[int]) -> Any:
        """The ONNX Runtime counterpart of :meth:`_torch_batch`, its graph exported (and
        cached) on first use."""
        key = (self.backend, tuple(layers))
        if key not in self._sessions:
            self._sessions[key] = OnnxSession(graph_path(self, self.backend, layers))
        session = self._sessions[key]
        return lambda batch, _layers: session.run(
            {name: value.cpu().numpy() for name, value in self.tokenize(batch).items()}
        )

    def _finish(self, vectors: torch.Tensor, layer: int) -> np.ndarray:
        """Pooled vectors of ``layer`` through its head, normalised when the model is."""
        if layer in self.heads:
            vectors = self.heads[layer](vectors)
        if self.normalize:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        return vectors.float().cpu().numpy()

    def encode_packed(
        self, texts: Sequence[str], layer: int | None = None, max_tokens: int = PACKED_ROW_TOKENS
    ) -> np.ndarray:
        """:meth:`encode`'s vectors from forward passes of the texts packed end to end in rows
        of about ``max_tokens`` tokens, without padding (:mod:`demitasse.encoders.packing`):
        many short texts of varied length cost what their tokens cost. One pass for up to
        ``PACKED_ROWS_PER_PASS`` rows. Reads no cache; valid where :meth:`packing_matches`."""
        texts = check_texts(texts)
        layer = self._check_layers([self.num_layers if layer is None else layer])[0]
        ids: list[list[int]] = []
        if texts:
            prepared = self._prepared(texts)
            tokens = self.tokenizer(prepared, truncation=True, max_length=self.max_seq_length)
            ids = tokens["input_ids"]
        rows = pack_rows([len(tokens) for tokens in ids], max_tokens)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(rows), PACKED_ROWS_PER_PASS):
            chunk = rows[start : start + PACKED_ROWS_PER_PASS]
            members = [text for row in chunk for text in row]
            local = {text: k for k, text in enumerate(members)}
            batch = packed_batch(
                [ids[text] for text in members],
                [[local[text] for text in row] for row in chunk],
                int(self.tokenizer.pad_token_id or 0),
            )
            out[members] = self._packed_pass(batch, layer)
        return out

    def _packed_pass(self, batch: PackedBatch, layer: int) -> np.ndarray:
        inputs = {
            "input_ids": batch.input_ids,
            "position_ids": batch.position_ids,
            "attention_mask": batch.attention_mask,
        }
        if "token_type_ids" in self.tokenizer.model_input_names:
            inputs["token_type_ids"] = torch.zeros_like(batch.input_ids)
        with torch.inference_mode(), self.cut_to(layer):
            inputs = {key: value.to(self.device) for key, value in inputs.items()}
            hidden = self.model(**inputs, output_hidden_states=True).hidden_states[layer]
            mask = batch.token_mask.to(self.device)
            return self._finish(pool(unpack(hidden, batch), mask, self.pooling), layer)

    def packing_matches(self, tolerance: float = 1e-5) -> bool:
        """Whether :meth:`encode_packed` gives this model's padded vectors (cosine within
        ``tolerance``) on texts packed side by side. A model whose position ids do not count
        from 0 (RoBERTa, MPNet) or that takes no attention mask per token pair fails."""
        if self.backend != "torch":  # packing feeds torch's model; ONNX graphs take padded rows
            return False
        texts = list(PACKING_PROBE)
        try:
            packed = self.encode_packed(texts)
        except Exception:  # whatever a model refusing packed inputs raises: it fails
            return False
        padded = self._forward_all(texts, [self.num_layers], batch_size=len(texts))
        reference = padded[self.num_layers]
        norms = np.linalg.norm(packed, axis=1) * np.linalg.norm(reference, axis=1)
        cosines = (packed * reference).sum(1) / np.maximum(norms, 1e-12)
        return bool(cosines.min() >= 1 - tolerance)


def _checked_modules(model: Any, path: Path) -> list[Any]:
    """The pipeline's modules; a demitasse export with a learned compressor is refused."""
    modules = list(model)
    if any(type(m).__name__ == "CompressorModule" for m in modules):
        raise DemitasseError(
            f"{path} is a demitasse export with a learned compressor; load it with "
            "SentenceTransformer(path, trust_remote_code=True), or give demitasse the model "
            "directory it was exported from"
        )
    return modules


def _sentence_transformer_class() -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise DemitasseError(f"the transformer encoder needs sentence-transformers "
                             f"({exc.name} is missing): pip install 'demitasse[train]'"
                             ) from None  # fmt: skip
    return SentenceTransformer


def _device_of(backend: str, device: str | None) -> str | None:
    """The device asked for, checked against the backend (ONNX Runtime runs on the CPU)."""
    check_backend(backend)
    if backend == "torch":
        return device
    if device not in (None, "cpu"):
        raise DemitasseError(f"the {backend} backend runs on the CPU, not on {device}")
    return "cpu"


class _SentenceEmbeddingModules(torch.nn.Module):
    """Sentence-transformers modules that map ``features["sentence_embedding"]``, in order."""

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        super().__init__()
        self.stages = torch.nn.ModuleList(modules)

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            vectors = stage({"sentence_embedding": vectors})["sentence_embedding"]
        return vectors


def load_transformer(name_or_path: str | Path = DEFAULT_MODEL, **kwargs: Any) -> TransformerEncoder:
    """Load a transformer sentence encoder by local path, packaged model name or hub id
    (``kwargs``: :class:`TransformerEncoder`'s options). :func:`demitasse.loading.load_encoder`
    also loads static models."""
    return TransformerEncoder(name_or_path, **kwargs)
