"""A static sentence encoder: tokenise, look up word vectors, average, normalise.

Inference is numpy plus the Rust ``tokenizers`` library: no torch, no transformer. The
tokenizer is the teacher's WordPiece with the corpus words added to its vocabulary, so a known
word is one vector and an unknown word falls back to its longest known prefix and then to
subwords.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from demitasse.data.files import check_texts
from demitasse.errors import DemitasseError, one_line
from demitasse.persistence import (
    CONFIG_FILE,
    check_version,
    demitasse_version,
    read_saved,
    require,
    write_saved,
)

METHOD = "static"
FORMAT_VERSION = 1
TOKENIZER_FILE = "tokenizer.json"
# Texts per tokenizer call and per gather: the batch_size of the Encoder protocol is meant for
# transformer forward passes; a lookup table needs bigger blocks to amortise Python overhead.
BLOCK_TEXTS = 2048


class StaticModel:
    """Sentence vector = normalised mean of the texts' token vectors (an :class:`Encoder`).

    ``vectors[i]`` is the vector of the tokenizer's token id ``i``. The unknown token is
    dropped before averaging (as model2vec does); a text without tokens gets the zero vector.
    """

    num_layers = 1

    def __init__(
        self,
        vectors: np.ndarray,
        tokenizer: Tokenizer,
        *,
        name: str = "static",
        normalize: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2:
            raise DemitasseError(f"static vectors must be a matrix, got shape {vectors.shape}")
        vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab_size > len(vectors):
            raise DemitasseError(
                f"the tokenizer has {vocab_size} tokens but there are only {len(vectors)} vectors"
            )
        self.vectors = vectors
        self.tokenizer = tokenizer
        self.name = name
        self.normalize = normalize
        self.metadata = dict(metadata or {})
        self.unk_id = _unk_id(tokenizer)
        self._plain = _plain_text_tokenizer(tokenizer)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __repr__(self) -> str:
        return f"StaticModel({self.name!r}, vocabulary={len(self.vectors)}, dim={self.dim})"

    # ---- encoding ------------------------------------------------------------------------------

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, unknown tokens removed."""
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        if self.unk_id is None:
            return [encoding.ids for encoding in encodings]
        return [[i for i in encoding.ids if i != self.unk_id] for encoding in encodings]

    def encode(
        self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32
    ) -> np.ndarray:
        texts = check_texts(texts)
        if layer not in (None, 1):
            raise DemitasseError(f"layer {layer} does not exist: a static model has one layer")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), BLOCK_TEXTS):
            block = texts[start : start + BLOCK_TEXTS]
            ids = self._block_ids(block)
            out[start : start + len(ids)] = mean_vectors(self.vectors, ids, skip=self.unk_id)
        if self.normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out /= np.maximum(norms, 1e-12)
        return out

    def _block_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, unknown tokens kept (mean_vectors drops them in numpy)."""
        if self._plain is None:
            return self._block_ids_full(texts)
        plain = [i for i, text in enumerate(texts) if text.isascii() and text.isprintable()]
        if len(plain) == len(texts):
            return self._block_ids_plain(texts)
        other = sorted(set(range(len(texts))).difference(plain))
        ids: list[list[int]] = [[] for _ in texts]
        for rows, encoder in ((plain, self._block_ids_plain), (other, self._block_ids_full)):
            for row, found in zip(rows, encoder([texts[i] for i in rows]), strict=True):
                ids[row] = found
        return ids

    def _block_ids_full(self, texts: list[str]) -> list[list[int]]:
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def _block_ids_plain(self, texts: list[str]) -> list[list[int]]:
        # Printable ASCII: the BERT normaliser only lower-cases it (nothing to clean, no
        # accents, no CJK), which str.lower does far faster than the Rust normaliser, whose
        # per-character alignment bookkeeping was most of the tokenizer's time.
        assert self._plain is not None
        tokenizer, lowercase = self._plain
        texts = [text.lower() for text in texts] if lowercase else texts
        encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def encode_layers(
        self, texts: Sequence[str], layers: Sequence[int] | None = None, batch_size: int = 32
    ) -> dict[int, np.ndarray]:
        if layers is not None and any(int(layer) != 1 for layer in layers):
            raise DemitasseError("a static model has one layer (1)")
        return {1: self.encode(texts, batch_size=batch_size)}

    # ---- persistence ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write ``config.json``, ``state.safetensors`` and ``tokenizer.json`` atomically."""
        config = {
            "method": METHOD,
            "version": FORMAT_VERSION,
            "demitasse_version": demitasse_version(),
            "name": self.name,
            "dim": self.dim,
            "vocabulary_size": len(self.vectors),
            "normalize": self.normalize,
            "metadata": self.metadata,
        }
        write_saved(
            path,
            config,
            {"vectors": self.vectors},
            text_files={TOKENIZER_FILE: self.tokenizer.to_str()},
        )
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> StaticModel:
        config, arrays = read_saved(path, "static model")
        if config.get("method") != METHOD:
            raise DemitasseError(
                f"{path} is not a saved static model (method {config.get('method')!r})"
            )
        check_version(require(config, "version", "int", path), FORMAT_VERSION, METHOD, path)
        dim = require(config, "dim", "int", path)
        size = require(config, "vocabulary_size", "int", path)
        vectors = arrays.get("vectors")
        if vectors is None or vectors.shape != (size, dim):
            raise DemitasseError(f"{path}: vectors do not match {CONFIG_FILE} ({size} × {dim})")
        try:
            tokenizer = Tokenizer.from_file(str(Path(path) / TOKENIZER_FILE))
        except Exception as exc:  # tokenizers raises plain Exceptions
            raise DemitasseError(f"{path}: cannot read {TOKENIZER_FILE}: {one_line(exc)}") from None
        metadata = config.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DemitasseError(
                f"invalid {CONFIG_FILE} in {path}: 'metadata' should be dict, got {metadata!r}"
            )
        return cls(
            vectors,
            tokenizer,
            name=require(config, "name", "str", path),
            normalize=require(config, "normalize", "bool", path),
            metadata=metadata,
        )


def is_static_model_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a model saved by :meth:`StaticModel.save`."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("method") == METHOD
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def mean_vectors(
    vectors: np.ndarray, ids: Sequence[Sequence[int]], skip: int | None = None
) -> np.ndarray:
    """Row ``i`` = mean of ``vectors[ids[i]]`` leaving out id ``skip``; zeros where no id is
    left."""
    lengths = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=lengths.sum())
    if skip is not None and (flat == skip).any():
        kept = flat != skip
        lengths = np.bincount(np.repeat(np.arange(len(ids)), lengths)[kept], minlength=len(ids))
        flat = flat[kept]
    starts = np.zeros(len(ids), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    # Sums token by token position: the j-th tokens of all texts that have one, in one gather
    # (texts sorted longest first, so those texts are a prefix). Each row adds its tokens in
    # order, as scipy's sparse (texts × vocabulary) product did: bit for bit its vectors, with
    # a gather of [texts, dim] at a time rather than of every token's vector at once.
    order = np.argsort(-lengths, kind="stable")
    starts, longest_first = starts[order], lengths[order]
    sums = np.zeros((len(ids), vectors.shape[1]), dtype=np.result_type(vectors, np.float32))
    longest = int(longest_first[0]) if len(ids) else 0
    having = np.searchsorted(-longest_first, -np.arange(1, longest + 1), side="right")
    for position, rows in enumerate(having.tolist()):
        sums[:rows] += vectors[flat[starts[:rows] + position]]
    means = np.empty(sums.shape, dtype=np.float32)
    means[order] = sums
    return means / np.maximum(lengths, 1)[:, None].astype(np.float32)


def _plain_text_tokenizer(tokenizer: Tokenizer) -> tuple[Tokenizer, bool] | None:
    """``tokenizer`` without its normaliser and whether to lower-case first, where that is
    exact for printable ASCII texts (a BERT normaliser); None for any other normaliser."""
    spec = json.loads(tokenizer.to_str())
    normalizer = spec.get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer":
        return None
    spec["normalizer"] = None
    return Tokenizer.from_str(json.dumps(spec)), bool(normalizer.get("lowercase", True))


def _unk_id(tokenizer: Tokenizer) -> int | None:
    model = json.loads(tokenizer.to_str()).get("model", {})
    token = model.get("unk_token")
    return None if token is None else tokenizer.token_to_id(token)
