"""On-disk embedding cache, one for every command.

Where: ``$DEMITASSE_CACHE/embeddings`` (default ``~/.cache/demitasse/embeddings``,
:func:`shared_root`), one folder per encoder configuration, named by its key: the encoder's
name and content fingerprint (every file hashed in full), pooling, normalisation, maximum
sequence length, exit heads and backend (a graph encoder: the hash of its record, which holds
the source's fingerprint, the layer and the backend). Inside, vectors are found by layer and a
hash of the text. Each ``encode`` call that computes new vectors appends one shard file holding
the text hashes and one array per layer; shards are written atomically, so an interrupted run
leaves only complete shards behind. Only finite vectors of the expected width, one row per
hash, are stored or read back: a shard that fails that check is a miss (said once, then
ignored), so a bad run can never poison later ones; a shard another process removed is a
silent miss.

Bounded: past ``$DEMITASSE_CACHE_MAX_BYTES`` (default 2 GiB; 0 turns the shared cache off) the
least recently used shards are removed (a shard read for a hit counts as used), checked when a
process first writes and then every sixteenth of the bound written, not at every write. A
folder given explicitly (``cache_dir``, a tune's work folder) is not bounded.
:data:`STATS` counts the texts found in a cache and those the encoder ran on instead.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import logging
import os
import time
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file, save_file

from demitasse.encoders.file_hashes import file_sha256s
from demitasse.encoders.resolve import cache_root
from demitasse.errors import DemitasseError
from demitasse.io import atomic_path

HASH_BYTES = 16
#: The bound of the shared cache unless ``$DEMITASSE_CACHE_MAX_BYTES`` says otherwise.
DEFAULT_MAX_BYTES = 2 << 30
MAX_BYTES_VARIABLE = "DEMITASSE_CACHE_MAX_BYTES"
#: Eviction brings the cache down to this share of its bound, so it does not run again soon.
EVICT_TO = 0.9
#: Shard arrays one process keeps in memory (the least recently used are read again).
MEMORY_BYTES = 256 << 20
#: Index entries (text × layer) one cache keeps before it forgets what it wrote itself and
#: reads the index from disk again (a bulk run writes far more than it reads back).
INDEX_ENTRIES = 4_000_000
#: A killed run's temporary shard older than this is removed by eviction and ``--clear``.
STALE_SECONDS = 24 * 3600
SHARD_GLOB = "shard-*.safetensors"
TEMPORARY_GLOB = ".dt-*.tmp"
logger = logging.getLogger(__name__)


@dataclass
class CacheStats:
    """What the encoders of this process read through a cache since it started (or since
    :meth:`reset`): texts found there (``hits``) and distinct texts the encoder ran on and
    stored (``misses``). Encoding without a cache (speed timings, the server) is not counted."""

    hits: int = 0
    misses: int = 0

    def reset(self) -> None:
        self.hits = self.misses = 0


STATS = CacheStats()


def text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=HASH_BYTES).digest()


def content_files(path: Path) -> list[Path]:
    """The files a folder's content hash covers, sorted: every file under ``path`` except
    hidden ones (a name starting with ``.`` at any depth: demitasse's output marker, a hub's
    ``.cache/``, ``.gitattributes``), which say nothing about what the folder computes. Links are
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


# ---- where, and how much --------------------------------------------------------------------


def shared_root() -> Path:
    """The folder of the embedding cache every command shares."""
    return cache_root() / "embeddings"


def max_cache_bytes() -> int:
    """The shared cache's bound: ``$DEMITASSE_CACHE_MAX_BYTES`` (bytes, or with a K, M or G
    suffix), else :data:`DEFAULT_MAX_BYTES`; 0 turns the shared cache off."""
    text = os.environ.get(MAX_BYTES_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    number = text[:-1] if scale > 1 else text
    try:
        value = float(number) * scale
    except ValueError:
        value = -1.0
    if not 0 <= value < float(1 << 62):
        raise DemitasseError(f"{MAX_BYTES_VARIABLE}={text!r}: expected a size in bytes, e.g. "
                             "2147483648 or 2G (0 turns the embedding cache off)")  # fmt: skip
    return int(value)


def open_cache(
    key: str,
    dim: int,
    cache_dir: str | Path | None = None,
    work_dir: str | Path | None = None,
) -> EmbeddingCache | CacheChain | None:
    """The cache of the encoder configuration ``key``: under ``cache_dir`` (unbounded), else
    the shared one (bounded; None when its bound is 0). With ``work_dir``, a folder read
    first that keeps a copy of every vector read or computed (unbounded: a tune's work folder,
    which must resume whatever the shared cache evicts)."""
    if cache_dir is not None:
        shared: EmbeddingCache | None = EmbeddingCache(Path(cache_dir) / key, dim=dim)
    else:
        bound = max_cache_bytes()
        shared = EmbeddingCache(shared_root() / key, dim=dim, max_bytes=bound) if bound else None
    if work_dir is None:
        return shared
    own = EmbeddingCache(Path(work_dir) / key, dim=dim)
    return own if shared is None else CacheChain(own, shared)


# ---- one encoder configuration's vectors ------------------------------------------------------

#: safetensors' names of the dtypes a shard may hold.
_DTYPES = {"U8": "uint8", "F32": "float32"}
#: Where each layer's vector of a text is: (layer, text hash) → (shard, row).
Index = dict[tuple[int, bytes], tuple[Path, int]]


class EmbeddingCache:
    """Per-layer sentence embeddings of one encoder configuration, as safetensors shards in
    ``directory``; ``max_bytes``: the bound of the folder above it (None: unbounded). Shards
    are read when a hit needs them (their text hashes alone make the index)."""

    def __init__(
        self, directory: Path, dim: int | None = None, max_bytes: int | None = None
    ) -> None:
        self.directory = Path(directory)
        self.dim = dim
        self.max_bytes = max_bytes
        self._index: Index | None = None
        self._arrays: OrderedDict[Path, dict[str, np.ndarray]] = OrderedDict()
        self._held = 0  # bytes of ``_arrays``
        self._rejected: set[Path] = set()
        self._touched: set[Path] = set()
        self._unchecked: int | None = None  # bytes written since the bound was checked
        self._unwritable = False

    def _reject(self, shard: Path, problem: str) -> None:
        """A bad shard is a cache miss, never an error: said once, then ignored."""
        self._rejected.add(shard)
        logger.warning("ignoring embedding cache shard %s: %s", shard, problem)

    def _layout_problem(self, layout: dict[str, tuple[tuple[int, ...], str]]) -> str | None:
        """Why arrays of these (shape, dtype) cannot be a shard of this cache, or None."""
        hashes = layout.get("hashes")
        if hashes is None or hashes[1] != "uint8" or len(hashes[0]) != 2:
            return "no text hashes"
        if hashes[0][1] != HASH_BYTES:
            return "text hashes of the wrong size"
        layers = {k: v for k, v in layout.items() if k != "hashes"}
        if not layers or any(not _is_layer_key(k) for k in layers):
            return "unexpected arrays"
        for name, (shape, dtype) in layers.items():
            if len(shape) != 2 or shape[0] != hashes[0][0]:
                return f"{name} does not have one row per text"
            if self.dim is not None and shape[1] != self.dim:
                return f"{name} has width {shape[1]}, expected {self.dim}"
            if dtype != "float32":
                return f"{name} holds non-float32 values"
        return None

    def _problem(self, arrays: dict[str, np.ndarray]) -> str | None:
        """Why ``arrays`` cannot be a shard of this cache, or None."""
        problem = self._layout_problem({k: (v.shape, v.dtype.name) for k, v in arrays.items()})
        if problem is None:
            bad = next((k for k, v in arrays.items() if k != "hashes"
                        and not np.isfinite(v).all()), None)  # fmt: skip
            problem = None if bad is None else f"{bad} holds non-finite values"
        return problem

    def _read_hashes(self, shard: Path) -> tuple[np.ndarray, list[int]] | None:
        """A shard's text hashes and layers, from its header and hashes only."""
        try:
            with safe_open(str(shard), framework="numpy") as handle:
                slices = {name: handle.get_slice(name) for name in handle.keys()}  # noqa: SIM118
                layout = {name: (tuple(part.get_shape()), _DTYPES.get(part.get_dtype(), "?"))
                          for name, part in slices.items()}  # fmt: skip
                problem = self._layout_problem(layout)
                hashes = handle.get_tensor("hashes") if problem is None else None
        except (SafetensorError, OSError, ValueError):
            problem = "unreadable" if shard.exists() else "gone"
        if problem is not None or hashes is None:
            if problem != "gone":  # another process evicted it: a silent miss
                self._reject(shard, str(problem))
            return None
        return hashes, [int(k.split("_")[1]) for k in layout if k != "hashes"]

    def _build_index(self) -> Index:
        if self._index is None:
            self._index = {}
            for shard in sorted(self.directory.glob(SHARD_GLOB)):
                if shard not in self._rejected and (read := self._read_hashes(shard)):
                    self._add_to_index(shard, *read)
        return self._index

    def _add_to_index(self, shard: Path, hashes: np.ndarray, layers: list[int]) -> None:
        assert self._index is not None
        for row, digest in enumerate(hashes):
            key = bytes(digest)
            for layer in layers:
                self._index[(layer, key)] = (shard, row)

    def _load_shard(self, shard: Path) -> dict[str, np.ndarray] | None:
        """A shard's arrays (kept in memory up to :data:`MEMORY_BYTES`), checked; None: a
        miss (a bad shard, said once; or one removed since)."""
        if shard in self._arrays:
            self._arrays.move_to_end(shard)
            return self._arrays[shard]
        if shard in self._rejected:
            return None
        try:
            arrays = load_file(shard)
        except (SafetensorError, OSError, ValueError):
            if shard.exists():
                self._reject(shard, "unreadable")
            return None
        problem = self._problem(arrays)
        if problem:
            self._reject(shard, problem)
            return None
        if self.max_bytes and shard not in self._touched:  # used: the last to be evicted
            self._touched.add(shard)
            with contextlib.suppress(OSError):
                os.utime(shard)
        self._remember(shard, arrays)
        return arrays

    def _remember(self, shard: Path, arrays: dict[str, np.ndarray]) -> None:
        self._arrays[shard] = arrays
        self._held += sum(a.nbytes for a in arrays.values())
        while self._held > MEMORY_BYTES and len(self._arrays) > 1:
            _, dropped = self._arrays.popitem(last=False)
            self._held -= sum(a.nbytes for a in dropped.values())

    def fill(self, texts: Sequence[str], out: dict[int, np.ndarray]) -> list[int]:
        """Copy cached vectors into the rows of ``out`` (one array per layer).

        Returns the indices of texts not cached for every requested layer; what their rows
        hold is unspecified (the caller computes them).
        """
        index = self._build_index()
        found = np.ones(len(texts), dtype=bool)
        # shard → layer → (rows of out, rows of the shard)
        wanted: dict[Path, dict[int, tuple[list[int], list[int]]]] = defaultdict(dict)
        for i, text in enumerate(texts):
            digest = text_hash(text)
            hits = [index.get((layer, digest)) for layer in out]
            if any(hit is None for hit in hits):
                found[i] = False
                continue
            for layer, (shard, row) in zip(out, hits, strict=True):  # type: ignore[misc]
                rows = wanted[shard].setdefault(layer, ([], []))
                rows[0].append(i)
                rows[1].append(row)
        for shard, layers in wanted.items():
            arrays = self._load_shard(shard)
            for layer, (rows_out, rows_in) in layers.items():
                if arrays is None:
                    found[rows_out] = False
                else:
                    out[layer][rows_out] = arrays[f"layer_{layer}"][rows_in]
        return np.flatnonzero(~found).tolist()

    def store(self, texts: Sequence[str], embeddings: dict[int, np.ndarray]) -> None:
        """Write one shard of ``texts``' vectors (a cache that cannot be written is no
        error: said once, then the vectors are not kept)."""
        if not texts or self._unwritable:
            return
        arrays = {"hashes": np.frombuffer(b"".join(text_hash(t) for t in texts), dtype=np.uint8)}
        arrays["hashes"] = arrays["hashes"].reshape(len(texts), HASH_BYTES)
        for layer, matrix in embeddings.items():
            arrays[f"layer_{layer}"] = np.ascontiguousarray(matrix, dtype=np.float32)
        problem = self._problem(arrays)
        if problem:
            logger.warning("not caching these embeddings: %s", problem)
            return
        shard = self.directory / f"shard-{uuid.uuid4().hex}.safetensors"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with atomic_path(shard) as tmp:
                save_file(arrays, str(tmp))
        except (OSError, DemitasseError) as exc:
            self._unwritable = True
            logger.warning("not caching embeddings in %s: %s", self.directory, exc)
            return
        self._remember(shard, arrays)
        if self._index is not None:  # else read from disk, this shard with the others
            self._add_to_index(shard, arrays["hashes"], list(embeddings))
            if len(self._index) > INDEX_ENTRIES:
                self._index = None
        with contextlib.suppress(OSError):
            self._check_bound(shard.stat().st_size)

    def _check_bound(self, written: int) -> None:
        """Keep the folder above within ``max_bytes``: checked at the first write, then once
        a sixteenth of the bound has been written since."""
        if not self.max_bytes:
            return
        if self._unchecked is not None and self._unchecked + written < self.max_bytes // 16:
            self._unchecked += written
            return
        self._unchecked = 0
        evict(self.directory.parent, self.max_bytes)


class CacheChain:
    """A cache read first (``own``: a tune's work folder) that keeps a copy of every vector
    found in the second (``shared``) or computed; both receive what is stored."""

    def __init__(self, own: EmbeddingCache, shared: EmbeddingCache) -> None:
        self.own, self.shared = own, shared

    def fill(self, texts: Sequence[str], out: dict[int, np.ndarray]) -> list[int]:
        missing = self.own.fill(texts, out)
        if not missing:
            return missing
        sub = {layer: np.empty((len(missing), m.shape[1]), m.dtype) for layer, m in out.items()}
        still = set(self.shared.fill([texts[i] for i in missing], sub))
        found = [k for k in range(len(missing)) if k not in still]
        if found:
            rows = [missing[k] for k in found]
            for layer, matrix in out.items():
                matrix[rows] = sub[layer][found]
            self.own.store([texts[i] for i in rows], {layer: sub[layer][found] for layer in out})
        return [missing[k] for k in sorted(still)]

    def store(self, texts: Sequence[str], embeddings: dict[int, np.ndarray]) -> None:
        self.own.store(texts, embeddings)
        self.shared.store(texts, embeddings)


def encode_through(
    cache: EmbeddingCache | CacheChain | None,
    texts: Sequence[str],
    layers: Sequence[int],
    dim: int,
    compute: Callable[[list[str]], dict[int, np.ndarray]],
) -> dict[int, np.ndarray]:
    """Vectors of ``texts`` at each of ``layers``: those ``cache`` holds, and ``compute`` run
    once on the distinct texts it lacks (then stored). Counted in :data:`STATS`."""
    out = {layer: np.empty((len(texts), dim), dtype=np.float32) for layer in layers}
    missing = cache.fill(texts, out) if cache else list(range(len(texts)))
    unique = list(dict.fromkeys(texts[i] for i in missing))
    if missing:
        computed = compute(unique)
        row_of = {text: row for row, text in enumerate(unique)}
        rows = [row_of[texts[i]] for i in missing]
        for layer in layers:
            out[layer][missing] = computed[layer][rows]
        if cache:
            cache.store(unique, computed)
    if cache and texts:
        STATS.hits += len(texts) - len(missing)
        STATS.misses += len(unique)
        logger.info("%d of %d texts from the embedding cache", len(texts) - len(missing),
                    len(texts))  # fmt: skip
    return out


def _is_layer_key(key: str) -> bool:
    prefix, _, number = key.partition("_")
    return prefix == "layer" and number.isdigit()


# ---- the bound, and what the cache holds ------------------------------------------------------


def _cache_files(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """The shards and temporary shards (regular files only) of every configuration folder
    under ``root``, with their stat; nothing else there is the cache's."""
    try:
        with os.scandir(root) as entries:
            folders = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for folder in sorted(folders):
        try:
            with os.scandir(folder) as entries:
                files = [e for e in entries if _is_cache_file(e.name)]
            for entry in files:
                if entry.is_file(follow_symlinks=False):
                    yield Path(entry.path), entry.stat(follow_symlinks=False)
        except OSError:  # removed meanwhile
            continue


def _is_cache_file(name: str) -> bool:
    return fnmatch.fnmatchcase(name, SHARD_GLOB) or fnmatch.fnmatchcase(name, TEMPORARY_GLOB)


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:  # another process removed it first
        return False
    return True


def evict(root: Path, max_bytes: int) -> int:
    """Past ``max_bytes`` under ``root``, remove the least recently used shards (by mtime,
    which a hit renews) until :data:`EVICT_TO` of it is left; and killed runs' temporary
    shards older than :data:`STALE_SECONDS`. Returns the bytes freed."""
    shards, freed, now = [], 0, time.time()
    for path, stat in _cache_files(root):
        if fnmatch.fnmatchcase(path.name, SHARD_GLOB):
            shards.append((stat.st_mtime, stat.st_size, path))
        elif now - stat.st_mtime > STALE_SECONDS and _remove(path):
            freed += stat.st_size
    total = sum(size for _, size, _ in shards)
    if total > max_bytes:
        for _, size, path in sorted(shards):
            if total <= max_bytes * EVICT_TO:
                break
            total -= size
            freed += size if _remove(path) else 0
        logger.info("embedding cache %s: past its bound of %d bytes, least recently used "
                    "shards removed (%d bytes freed)", root, max_bytes, freed)  # fmt: skip
    return freed


@dataclass(frozen=True)
class CacheFolder:
    """One encoder configuration's folder in a cache: its name (the key), the texts its
    shards hold (a text stored twice counts twice), their layers, shards and bytes."""

    name: str
    texts: int
    layers: tuple[int, ...]
    shards: int
    bytes: int


def describe(root: Path) -> list[CacheFolder]:
    """What the cache at ``root`` holds, per configuration folder (shard headers only)."""
    found: dict[str, list[tuple[Path, int]]] = defaultdict(list)
    for path, stat in _cache_files(root):
        found[path.parent.name].append((path, stat.st_size))
    folders = []
    for name, files in sorted(found.items()):
        texts, layers, shards = 0, set(), 0
        for path, _ in files:
            if fnmatch.fnmatchcase(path.name, SHARD_GLOB):
                shards += 1
                with contextlib.suppress(SafetensorError, OSError, ValueError):
                    with safe_open(str(path), framework="numpy") as handle:
                        names = list(handle.keys())
                        texts += int(handle.get_slice("hashes").get_shape()[0])
                    layers |= {int(n.split("_")[1]) for n in names if _is_layer_key(n)}
        size = sum(size for _, size in files)
        folders.append(CacheFolder(name, texts, tuple(sorted(layers)), shards, size))
    return folders


def clear(root: Path) -> tuple[int, int]:
    """Remove every shard and temporary shard the cache at ``root`` holds (nothing else),
    and the folders left empty; returns (files, bytes) removed."""
    files = size = 0
    folders = set()
    for path, stat in _cache_files(root):
        folders.add(path.parent)
        if _remove(path):
            files, size = files + 1, size + stat.st_size
    for folder in sorted(folders):
        with contextlib.suppress(OSError):  # not empty: something else is in it
            folder.rmdir()
    return files, size
