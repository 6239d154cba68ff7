"""The encoders a tune sweeps: loaded once, every text embedded once per layer, speed measured.

Vectors are read through the embedding cache every command shares (what an ``eval`` or
``index`` of the same texts embedded is not embedded again), and the work folder keeps a copy of
every one, read first, so an interrupted tune resumes without re-encoding whatever the shared
cache has evicted since.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.encoders.base import Encoder
from demitasse.encoders.cache import fingerprint_directory
from demitasse.evaluation.efficiency import measure_encode_throughput
from demitasse.evaluation.records import ResultRecord
from demitasse.loading import load_encoder
from demitasse.progress import progress as show_progress

logger = logging.getLogger(__name__)

#: Texts per encoder call: each call stores its vectors in the cache, so an interruption loses
#: at most one chunk of work.
EMBED_CHUNK = 1024
#: Texts the encoding speed is timed on (a fixed sample of the corpus), and timed runs.
SPEED_TEXTS = 128
SPEED_REPEATS = 2


@dataclass
class EncodedTexts:
    """One encoder's vectors of every text of a tune, per layer cut to sweep."""

    name: str
    source: str  # what a CompressedModel loads the encoder from
    fingerprint: str
    dim: int
    layers: tuple[int, ...]
    vectors: dict[int, np.ndarray]  # layer -> [n_texts, dim], rows as the texts given
    backend: str = "torch"

    @property
    def last_layer(self) -> int:
        return max(self.layers)


def open_encoder(source: str, work_dir: Path, backend: str = "torch") -> Encoder:
    """The encoder at ``source``; a transformer reads through the shared embedding cache and
    keeps a copy of its vectors under ``work_dir``."""
    if backend == "torch":  # a static model takes no backend
        return load_encoder(source, work_cache_dir=work_dir / "embeddings")
    return load_encoder(source, work_cache_dir=work_dir / "embeddings" / backend, backend=backend)


def model_source(source: str) -> str:
    """``source`` as a model directory records it: a local folder as an absolute path."""
    path = Path(source).expanduser()
    return str(path.resolve()) if path.is_dir() else source


def encoder_fingerprint(encoder: Encoder, source: str) -> str:
    """The encoder's files' identity: a changed model must not reuse stored results."""
    path = getattr(encoder, "path", None) or Path(source).expanduser()
    return fingerprint_directory(Path(path)) if Path(path).is_dir() else str(source)


def sweep_layers(encoder: Encoder) -> tuple[int, ...]:
    """The layer cuts worth trying: those with an exit head (a cut without one gives vectors
    its next layers were never trained to read), and always the last layer."""
    heads = getattr(encoder, "heads", None) or {}
    return tuple(sorted({int(layer) for layer in heads} | {int(encoder.num_layers)}))


def embed_texts(
    encoder: Encoder,
    texts: Sequence[str],
    layers: Sequence[int],
    *,
    batch_size: int = 64,
    progress: bool = False,
) -> dict[int, np.ndarray]:
    """Vectors of ``texts`` at each of ``layers``, a chunk of texts per encoder call."""
    out = {layer: np.empty((len(texts), encoder.dim), np.float32) for layer in layers}
    desc = f"tune: embedding with {encoder.name}"
    with show_progress(desc, total=len(texts), unit="texts", enabled=progress) as bar:
        for start in range(0, len(texts), EMBED_CHUNK):
            chunk = list(texts[start : start + EMBED_CHUNK])
            encoded = encoder.encode_layers(chunk, list(layers), batch_size=batch_size)
            for layer in layers:
                out[layer][start : start + len(chunk)] = encoded[layer]
            bar.update(len(chunk))
    return out


def encode(
    source: str,
    texts: Sequence[str],
    work_dir: Path,
    *,
    batch_size: int = 64,
    progress: bool = False,
    backend: str = "torch",
) -> EncodedTexts:
    """Load the encoder at ``source`` and embed ``texts`` at every layer worth sweeping;
    an ONNX ``backend``'s encoder is named and fingerprinted apart (``name+onnx-int8``)."""
    encoder = open_encoder(source, work_dir, backend)
    layers = sweep_layers(encoder)
    logger.info("embedding %d texts with %s, layers %s", len(texts), encoder.name, layers)
    vectors = embed_texts(encoder, texts, layers, batch_size=batch_size, progress=progress)
    own = backend != "torch"
    return EncodedTexts(
        name=str(encoder.name) + (f"+{backend}" if own else ""),
        source=model_source(source),
        fingerprint=encoder_fingerprint(encoder, source) + (f"-{backend}" if own else ""),
        dim=int(encoder.dim),
        layers=layers,
        vectors=vectors,
        backend=backend,
    )


def speed_sample(corpus: Sequence[str], size: int = SPEED_TEXTS, seed: int = 0) -> list[str]:
    """A fixed sample of the corpus to time encoding on (documents are what gets encoded in
    bulk, and their length is what the speed depends on)."""
    unique = list(dict.fromkeys(corpus))
    if len(unique) <= size:
        return unique
    picked = np.random.default_rng(seed).choice(len(unique), size=size, replace=False)
    return [unique[i] for i in sorted(picked)]


def measure_speeds(
    source: str,
    sample: Sequence[str],
    layers: Sequence[int],
    *,
    batch_size: int = 64,
    backend: str = "torch",
) -> list[ResultRecord]:
    """Texts per second of each layer cut on this machine (an efficiency record each, with
    the thread counts and the load in ``extra``), timed without the embedding cache."""
    options = {} if backend == "torch" else {"backend": backend}
    encoder = load_encoder(source, cache=False, **options)
    return measure_encode_throughput(
        encoder, list(sample), list(layers), repeats=SPEED_REPEATS, batch_size=batch_size
    )


def speed_of(record: dict[str, Any]) -> float:
    return float(record["score"])
