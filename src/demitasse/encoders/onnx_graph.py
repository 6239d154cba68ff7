"""A transformer encoder carried as an ONNX graph: runs with numpy, ONNX Runtime and the
``tokenizers`` library only, never torch or transformers.

A graph folder (``encoder/`` of a model directory, written by
:func:`demitasse.encoders.backends.write_graph_folder`) holds

- ``model.onnx``: the transformer cut after one layer, pooled, with that layer's exit head when
  it has one (the graph of the ``onnx`` backend, :mod:`demitasse.encoders.backends`), and
  ``model_qint8.onnx``, its dynamic int8 version, when it was written for ``onnx-int8``;
- ``tokenizer.json``: the fast tokenizer, with the truncation and padding the transformer
  encoder asks of it (``max_seq_length``, ``longest_first``, padding to the longest text);
- ``config.json``: what the graph is (:data:`GRAPH_KIND`): the source encoder's name and
  content fingerprint, its width and depth, the layer, pooling, normalisation, the text
  preparation, and the sha256 of every file above.

:class:`OnnxGraphEncoder` tokenizes as the transformer encoder does, runs the graph in batches
of texts of similar length (longest first) and L2-normalises in numpy when the source model
normalises. A file whose sha256 differs from the record is refused: the graph is the encoder,
so its hash stands where the source's fingerprint stood (hashed in full, cached by the file's
stamp: :mod:`demitasse.encoders.file_hashes`).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.data import check_texts
from demitasse.encoders.base import check_backend, check_batch_size
from demitasse.encoders.cache import CacheChain, EmbeddingCache, encode_through, open_cache
from demitasse.encoders.file_hashes import file_sha256
from demitasse.errors import DemitasseError
from demitasse.io import read_json
from demitasse.progress import tracked

GRAPH_KIND = "onnx-encoder"
GRAPH_FORMAT_VERSION = 1
GRAPH_CONFIG = "config.json"
TOKENIZER_FILE = "tokenizer.json"
#: The graph file of each ONNX backend.
GRAPH_FILES = {"onnx": "model.onnx", "onnx-int8": "model_qint8.onnx"}
PROGRESS_MIN_TEXTS = 2048
#: Intra-op threads set by :func:`set_threads` (None: see :func:`intra_op_threads`).
_threads_override: int | None = None


def set_threads(threads: int | None) -> None:
    """Run every ONNX graph (sessions made from now, and existing ones at their next call) on
    ``threads`` intra-op threads; None: back to :func:`intra_op_threads`'s default."""
    global _threads_override
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):  # fmt: skip
        raise DemitasseError(f"threads must be a positive integer, got {threads!r}")
    _threads_override = threads


def intra_op_threads() -> int:
    """ONNX Runtime's threads: those of :func:`set_threads`, else torch's setting where torch
    is already loaded (``torch.set_num_threads``), else ``OMP_NUM_THREADS``, else 0 (ONNX
    Runtime's default, one per physical core)."""
    if _threads_override is not None:
        return _threads_override
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        return int(torch.get_num_threads())
    env = os.environ.get("OMP_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else 0


@dataclass
class OnnxSession:
    """An ONNX Runtime session over one graph file, with :func:`intra_op_threads` intra-op
    threads (re-created when that setting changes)."""

    path: Path
    _session: Any = None
    _threads: int = -1
    _input_names: list[str] = field(default_factory=list)

    def run(self, features: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs, float32, for ``features`` (the inputs it takes are picked)."""
        session = self._current()
        feeds = {name: features[name] for name in self._input_names}
        return [np.asarray(out, dtype=np.float32) for out in session.run(None, feeds)]

    def _current(self) -> Any:
        threads = intra_op_threads()
        if self._session is None or threads != self._threads:
            try:
                import onnxruntime as ort
            except ImportError:
                raise DemitasseError(
                    "running an ONNX graph needs onnxruntime: pip install onnxruntime"
                ) from None
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3  # warnings about unused initialisers are noise
            self._session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
            self._input_names = [i.name for i in self._session.get_inputs()]
            self._threads = threads
        return self._session


# ---- the folder --------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphSpec:
    """What a graph folder's ``config.json`` records, checked."""

    path: Path
    name: str
    source: str
    fingerprint: str | None
    dim: int
    num_layers: int
    layer: int
    normalize: bool
    max_seq_length: int
    do_lower_case: bool
    split_special_tokens: bool
    #: backend → (file name, sha256)
    graphs: dict[str, tuple[str, str]]
    tokenizer_sha256: str
    #: A hash of the whole config: what the embedding cache keys on.
    identity: str

    def offers(self, backend: str, layer: int | None = None) -> bool:
        """Whether the folder runs ``backend`` (at ``layer``: None = the source's last)."""
        wanted = self.num_layers if layer is None else layer
        return backend in self.graphs and wanted == self.layer


def is_graph_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a graph folder (by its config's kind; nothing else is read)."""
    try:
        return read_json(Path(path) / GRAPH_CONFIG).get("kind") == GRAPH_KIND
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def read_graph_spec(path: str | Path) -> GraphSpec:
    """The checked record of the graph folder ``path``, or a one-line DemitasseError."""
    path = Path(path)
    try:
        text = (path / GRAPH_CONFIG).read_text(encoding="utf-8")
        config = read_json(path / GRAPH_CONFIG)
    except (OSError, ValueError, RecursionError) as exc:
        raise DemitasseError(f"cannot read the ONNX encoder in {path}: {exc}") from None
    if not isinstance(config, dict) or config.get("kind") != GRAPH_KIND:
        raise DemitasseError(f"{path} is not an ONNX encoder folder (no {GRAPH_KIND} config)")
    if config.get("format_version") != GRAPH_FORMAT_VERSION:
        raise DemitasseError(f"{path}: ONNX encoder format {config.get('format_version')!r}; "
                             f"this demitasse reads {GRAPH_FORMAT_VERSION}")  # fmt: skip
    try:
        graphs = {
            check_backend(backend): (str(entry["file"]), str(entry["sha256"]))
            for backend, entry in config["graphs"].items()
        }
        spec = GraphSpec(
            path=path,
            name=str(config["name"]),
            source=str(config["source"]),
            fingerprint=config.get("fingerprint"),
            dim=_positive(config["dim"]),
            num_layers=_positive(config["num_layers"]),
            layer=_positive(config["layer"]),
            normalize=bool(config["normalize"]),
            max_seq_length=_positive(config["max_seq_length"]),
            do_lower_case=bool(config["do_lower_case"]),
            split_special_tokens=bool(config["split_special_tokens"]),
            graphs=graphs,
            tokenizer_sha256=str(config["tokenizer"]["sha256"]),
            identity=hashlib.sha256(text.encode()).hexdigest()[:20],
        )
    except (KeyError, TypeError, ValueError, AttributeError, DemitasseError) as exc:
        raise DemitasseError(f"invalid {GRAPH_CONFIG} in {path}: {exc!r}") from None
    if "onnx" not in spec.graphs or not 1 <= spec.layer <= spec.num_layers:
        raise DemitasseError(f"invalid {GRAPH_CONFIG} in {path}: no float32 graph or bad layer")
    return spec


def _positive(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return value


def checked_file(spec: GraphSpec, name: str, sha256: str) -> Path:
    """``spec.path / name`` if its content is the one recorded, else a one-line error."""
    path = spec.path / name
    if not path.is_file():
        raise DemitasseError(f"the ONNX encoder in {spec.path} lacks {name}")
    if file_sha256(path) != sha256:
        raise DemitasseError(
            f"{path} differs from the file this model was saved with (sha256); save the "
            "model again with its encoder's graph"
        )
    return path


# ---- the encoder -------------------------------------------------------------------------


class OnnxGraphEncoder:
    """The encoder of a graph folder: texts → the float32 vectors of the layer it carries.

    ``name``, ``dim`` and ``num_layers`` are the source transformer's, so a model records the
    same encoder whichever way it runs; ``source_fingerprint`` is the source's content
    fingerprint as recorded when the graph was written (the graph's sha256 is checked
    instead of the source's files, which need not be present). Only ``layer`` (or None, the
    layer carried when it is the source's last) can be encoded.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        backend: str = "onnx",
        cache: bool = True,
        cache_dir: str | Path | None = None,
        show_progress: bool | None = None,
    ) -> None:
        self.spec = read_graph_spec(path)
        self.path = self.spec.path
        self.name = self.spec.name
        self.dim = self.spec.dim
        self.num_layers = self.spec.num_layers
        self.layer = self.spec.layer
        self.normalize = self.spec.normalize
        self.max_seq_length = self.spec.max_seq_length
        self.source_fingerprint = self.spec.fingerprint
        self.show_progress = show_progress
        self._tokenizer = self._load_tokenizer()
        self._sessions: dict[str, OnnxSession] = {}
        self._cache_settings = (cache, cache_dir)
        self._cache: EmbeddingCache | CacheChain | None = None
        self.backend = backend

    @property
    def backend(self) -> str:
        """``"onnx"`` or ``"onnx-int8"``, whichever graphs the folder has; settable."""
        return self._backend

    @backend.setter
    def backend(self, backend: str) -> None:
        check_backend(backend)
        if not self.spec.offers(backend, self.layer):
            offered = ", ".join(self.spec.graphs)
            raise DemitasseError(f"the ONNX encoder in {self.path} runs {offered}, not {backend}")
        if backend not in self._sessions:
            name, sha256 = self.spec.graphs[backend]
            self._sessions[backend] = OnnxSession(checked_file(self.spec, name, sha256))
        self._backend = backend
        cache, cache_dir = self._cache_settings
        key = f"{self.name}-graph-{self.spec.identity}-{backend}"
        self._cache = open_cache(key, self.dim, cache_dir) if cache else None

    def _load_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        path = checked_file(self.spec, TOKENIZER_FILE, self.spec.tokenizer_sha256)
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library's own error types
            raise DemitasseError(f"cannot read {path}: {exc}") from None
        # As transformers sets it for each call (not kept in tokenizer.json).
        tokenizer.encode_special_tokens = self.spec.split_special_tokens
        return tokenizer

    def __repr__(self) -> str:
        return (
            f"OnnxGraphEncoder({self.name!r}, layer={self.layer}, dim={self.dim}, "
            f"normalize={self.normalize}, backend={self.backend!r})"
        )

    def encode(
        self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32
    ) -> np.ndarray:
        layer = self.layer if layer is None else layer
        return self.encode_layers(texts, [layer], batch_size=batch_size)[layer]

    def encode_layers(
        self, texts: Sequence[str], layers: Sequence[int] | None = None, batch_size: int = 32
    ) -> dict[int, np.ndarray]:
        texts = check_texts(texts)
        check_batch_size(batch_size)
        wanted = sorted({int(layer) for layer in (layers or [self.layer])})
        if wanted != [self.layer]:
            raise DemitasseError(
                f"the ONNX encoder in {self.path} carries layer {self.layer} of {self.name} "
                f"only, not {', '.join(map(str, wanted))}; other layers need the source model"
            )
        return encode_through(
            self._cache, texts, [self.layer], self.dim,
            lambda unique: {self.layer: self._forward_all(unique, batch_size)},
        )  # fmt: skip

    def packing_matches(self, tolerance: float = 1e-5) -> bool:
        """False: the graph takes padded rows (as the transformer encoder's ONNX backends)."""
        return False

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text as the graph sees it (special tokens in, truncated)."""
        return [int(n) for n in self.tokenize(list(texts))["attention_mask"].sum(1)] if texts \
            else []  # fmt: skip

    def tokenize(self, batch: Sequence[str]) -> dict[str, np.ndarray]:
        """The graph's inputs for ``batch``, as the transformer encoder builds them: texts
        stripped (and lower-cased when the model does), truncated to ``max_seq_length``,
        padded to the longest."""
        prepared = [t.strip().lower() if self.spec.do_lower_case else t.strip() for t in batch]
        encodings = self._tokenizer.encode_batch(prepared)
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }

    def _forward_all(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Vectors of ``texts`` (longest first, so batches pad little), normalised when the
        source model normalises (as torch's ``F.normalize``: divided by max(norm, 1e-12))."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        show = self.show_progress
        if show is None:
            show = len(texts) >= PROGRESS_MIN_TEXTS and not os.environ.get("DEMITASSE_QUIET")
        session = self._sessions[self.backend]
        starts = range(0, len(texts), batch_size)
        for start in tracked(starts, f"encoding with {self.name}", unit="batches", enabled=show):
            idx = order[start : start + batch_size]
            (vectors,) = session.run(self.tokenize([texts[i] for i in idx]))
            if self.normalize:
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                vectors = vectors / np.maximum(norms, np.float32(1e-12))
            out[idx] = vectors
        return out
