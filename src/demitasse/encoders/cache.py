"""On-disk embedding cache.

Keyed by model identity (a directory per model + pooling + normalisation), then layer and a
hash of the text. Each ``encode`` call that computes new vectors appends one shard file holding
the text hashes and one array per layer; shards are written atomically, so an interrupted run
leaves only complete shards behind. Only finite vectors of the expected width, one row per
hash, are stored or read back: a shard that fails that check is a miss (said once, then
ignored), so a bad run can never poison later ones.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from demitasse.encoders.file_hashes import file_sha256s
from demitasse.io import atomic_path

HASH_BYTES = 16
#: The folder beside a local model that holds the ONNX graphs exported from it (hidden: not
#: part of the model's :func:`content_hash`).
ONNX_CACHE_DIR = ".demitasse-onnx"
logger = logging.getLogger(__name__)


def text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=HASH_BYTES).digest()


def content_files(path: Path) -> list[Path]:
    """The files a folder's content hash covers, sorted: every file under ``path`` except
    hidden ones (a name starting with ``.`` at any depth: demitasse's output marker, the
    ONNX graphs cached beside a local model in ``.demitasse-onnx/``, a hub's ``.cache/``,
    ``.gitattributes``), which say nothing about what the folder computes. Links are
    followed (a hub snapshot links to its blobs), each folder once; a broken link is no file."""
    found, seen = [], set()
    for root, dirs, files in os.walk(path, followlinks=True):
        folder = Path(root).stat()
        if (folder.st_dev, folder.st_ino) in seen:  # a link back up: walked already
            dirs[:] = []
            continue
        seen.add((folder.st_dev, folder.st_ino))
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        named = (Path(root, name) for name in files if not name.startswith("."))
        found += [file for file in named if file.is_file()]
    return sorted(found, key=lambda file: file.relative_to(path).as_posix())


def content_hash(path: Path, *, cache: bool = True) -> str:
    """The sha256 of a folder's content: each file of :func:`content_files` by its relative
    path and the sha256 of all its bytes (:func:`file_sha256s`, through its cache unless
    ``cache`` is False)."""
    files = content_files(path)
    digest = hashlib.sha256()
    for file, sha in zip(files, file_sha256s(files, cache=cache), strict=True):
        digest.update(f"{file.relative_to(path).as_posix()}\0{sha}\n".encode())
    return digest.hexdigest()


def fingerprint_directory(path: Path) -> str:
    """A model directory's identity: its :func:`content_hash` (every file in full), short."""
    return content_hash(path)[:20]


class EmbeddingCache:
    """Per-layer sentence embeddings of one model configuration, stored as safetensors shards."""

    def __init__(self, directory: Path, dim: int | None = None) -> None:
        self.directory = Path(directory)
        self.dim = dim
        self._index: dict[tuple[int, bytes], tuple[Path, int]] | None = None
        self._arrays: dict[Path, dict[str, np.ndarray]] = {}
        self._rejected: set[Path] = set()

    def _load_shard(self, shard: Path) -> dict[str, np.ndarray] | None:
        if shard in self._rejected:
            return None
        if shard not in self._arrays:
            try:
                arrays = load_file(shard)
            except (SafetensorError, OSError, ValueError):
                arrays = None
            problem = "unreadable" if arrays is None else self._problem(arrays)
            if problem:  # a bad shard is a cache miss, never an error
                self._rejected.add(shard)
                logger.warning("ignoring embedding cache shard %s: %s", shard, problem)
                return None
            assert arrays is not None
            self._arrays[shard] = arrays
        return self._arrays[shard]

    def _problem(self, arrays: dict[str, np.ndarray]) -> str | None:
        """Why ``arrays`` cannot be a shard of this cache, or None."""
        hashes = arrays.get("hashes")
        if hashes is None or hashes.dtype != np.uint8 or hashes.ndim != 2:
            return "no text hashes"
        if hashes.shape[1] != HASH_BYTES:
            return "text hashes of the wrong size"
        layers = {k: v for k, v in arrays.items() if k != "hashes"}
        if not layers or any(not _is_layer_key(k) for k in layers):
            return "unexpected arrays"
        for name, matrix in layers.items():
            if matrix.ndim != 2 or matrix.shape[0] != hashes.shape[0]:
                return f"{name} does not have one row per text"
            if self.dim is not None and matrix.shape[1] != self.dim:
                return f"{name} has width {matrix.shape[1]}, expected {self.dim}"
            if matrix.dtype != np.float32 or not np.isfinite(matrix).all():
                return f"{name} holds non-finite or non-float32 values"
        return None

    def _build_index(self) -> dict[tuple[int, bytes], tuple[Path, int]]:
        if self._index is None:
            self._index = {}
            for shard in sorted(self.directory.glob("shard-*.safetensors")):
                self._add_to_index(shard)
        return self._index

    def _add_to_index(self, shard: Path) -> None:
        arrays = self._load_shard(shard)
        if arrays is None or "hashes" not in arrays:
            return
        layers = [int(k.split("_")[1]) for k in arrays if k.startswith("layer_")]
        assert self._index is not None
        for row, digest in enumerate(arrays["hashes"]):
            key = bytes(digest)
            for layer in layers:
                self._index[(layer, key)] = (shard, row)

    def fill(self, texts: Sequence[str], out: dict[int, np.ndarray]) -> list[int]:
        """Copy cached vectors into the rows of ``out`` (one array per layer).

        Returns the indices of texts not cached for every requested layer; their rows are
        left untouched.
        """
        index = self._build_index()
        missing = []
        for i, text in enumerate(texts):
            digest = text_hash(text)
            hits = [index.get((layer, digest)) for layer in out]
            if any(hit is None for hit in hits):
                missing.append(i)
                continue
            for (layer, matrix), (shard, row) in zip(out.items(), hits, strict=True):  # type: ignore[misc]
                matrix[i] = self._arrays[shard][f"layer_{layer}"][row]
        return missing

    def store(self, texts: Sequence[str], embeddings: dict[int, np.ndarray]) -> None:
        if not texts:
            return
        arrays = {"hashes": np.frombuffer(b"".join(text_hash(t) for t in texts), dtype=np.uint8)}
        arrays["hashes"] = arrays["hashes"].reshape(len(texts), HASH_BYTES)
        for layer, matrix in embeddings.items():
            arrays[f"layer_{layer}"] = np.ascontiguousarray(matrix, dtype=np.float32)
        problem = self._problem(arrays)
        if problem:
            logger.warning("not caching these embeddings: %s", problem)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        shard = self.directory / f"shard-{uuid.uuid4().hex}.safetensors"
        with atomic_path(shard) as tmp:
            save_file(arrays, str(tmp))
        self._arrays[shard] = arrays
        self._build_index()
        self._add_to_index(shard)


def encode_through(
    cache: EmbeddingCache | None,
    texts: Sequence[str],
    layers: Sequence[int],
    dim: int,
    compute: Callable[[list[str]], dict[int, np.ndarray]],
) -> dict[int, np.ndarray]:
    """Vectors of ``texts`` at each of ``layers``: those ``cache`` holds, and ``compute`` run
    once on the distinct texts it lacks (then stored)."""
    out = {layer: np.empty((len(texts), dim), dtype=np.float32) for layer in layers}
    missing = cache.fill(texts, out) if cache else list(range(len(texts)))
    if missing:
        unique = list(dict.fromkeys(texts[i] for i in missing))
        computed = compute(unique)
        row_of = {text: row for row, text in enumerate(unique)}
        rows = [row_of[texts[i]] for i in missing]
        for layer in layers:
            out[layer][missing] = computed[layer][rows]
        if cache:
            cache.store(unique, computed)
    return out


def _is_layer_key(key: str) -> bool:
    prefix, _, number = key.partition("_")
    return prefix == "layer" and number.isdigit()
