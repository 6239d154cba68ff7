"""The sha256 of whole files, with a cache of those already computed.

Every file is hashed in full, streamed in 1 MiB blocks. The hash of a file of at least
:data:`CACHED_MIN_BYTES` is kept in ``file-hashes.json`` under demitasse's cache folder
(``DEMITASSE_CACHE``), by absolute path, with the file's stamp: size, mtime, ctime, inode
and device. A later call whose file has the same stamp takes the hash from there (a warm start
of a 90 MB encoder reads a few stats, not 90 MB); any change of the stamp hashes the file in
full again. ctime is in the stamp because no program can set it back (``os.utime`` sets mtime
and atime and moves ctime to now), so an edit in place whose mtime is restored is seen too.
What is not seen: a change made with the system clock set back to the file's ctime, or by
writing the disk underneath the file system.

A file changed less than :data:`RACY_SECONDS` before it is hashed is not cached (as git's
"racily clean" entries): a second change within the same timestamp tick would keep the stamp.
The cache file is replaced atomically; one that cannot be read or holds anything unexpected is
ignored (the files are hashed again), one that cannot be written is skipped: never an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from demitasse.encoders.resolve import cache_root
from demitasse.errors import DemitasseError
from demitasse.io import atomic_write_text, read_json

logger = logging.getLogger(__name__)

HASHES_FILE = "file-hashes.json"
HASHES_KIND = "demitasse-file-hashes"
HASHES_VERSION = 1
#: Files at least this large are hashed through the cache; smaller ones are read each time.
CACHED_MIN_BYTES = 64 << 10
#: A file whose mtime or ctime is this recent when it is hashed is not cached.
RACY_SECONDS = 2.0
#: The most files the cache remembers (the oldest entries go first).
MAX_ENTRIES = 20_000
BLOCK = 1 << 20

#: (size, mtime_ns, ctime_ns, inode, device)
Stamp = tuple[int, int, int, int, int]

#: The cache file's entries read in this process, by cache file (``DEMITASSE_CACHE`` may
#: change): path → (stamp, sha256).
_known: dict[Path, dict[str, tuple[Stamp, str]]] = {}
_lock = threading.Lock()


def hash_file(path: Path) -> str:
    """The sha256 of all of ``path``'s bytes, read in blocks of 1 MiB."""
    digest = hashlib.sha256()
    block = bytearray(BLOCK)
    view = memoryview(block)
    with path.open("rb", buffering=0) as handle:
        while size := handle.readinto(block):
            digest.update(view[:size])
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``'s whole content (cached while its stamp holds)."""
    return file_sha256s([path])[0]


def file_sha256s(paths: Sequence[Path], *, cache: bool = True) -> list[str]:
    """The sha256 of each file's whole content: from the cache where a large file's stamp is
    the one recorded with it, else read in full (and recorded when the file is not too
    fresh). The cache file is written once, when something was added. ``cache=False``: all
    read in full, nothing recorded (files about to move, as a folder written atomically)."""
    store = cache_root() / HASHES_FILE
    hashes, added = [], {}
    for path in paths:
        stat = path.stat()
        if not cache or stat.st_size < CACHED_MIN_BYTES:
            hashes.append(hash_file(path))
            continue
        key, stamp = str(path.absolute()), _stamp(stat)
        with _lock:
            known = _known_hashes(store)
            hit = known.get(key)
        if hit is not None and hit[0] == stamp:
            hashes.append(hit[1])
            continue
        sha = hash_file(path)
        hashes.append(sha)
        settled = time.time() - max(stat.st_mtime, stat.st_ctime) >= RACY_SECONDS
        # Recorded when unchanged while it was read, and named in text (JSON holds no
        # undecodable bytes of a file name).
        if settled and _stamp(path.stat()) == stamp and key.isprintable():
            added[key] = (stamp, sha)
    if added:
        _record(store, added)
    return hashes


def _stamp(stat: os.stat_result) -> Stamp:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)


def _known_hashes(store: Path) -> dict[str, tuple[Stamp, str]]:
    """The cache file's entries, read once per process (the caller holds the lock)."""
    if store not in _known:
        _known[store] = _read_store(store) or {}
    return _known[store]


def _read_store(store: Path) -> dict[str, tuple[Stamp, str]] | None:
    """The valid entries of the cache file: none when it is missing, None when the file is
    not one demitasse wrote (it is then never replaced: it may be a user's own file)."""
    try:
        data = read_json(store)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        logger.info("ignoring the file hash cache %s: %s", store, exc)
        return None
    header = {"kind": HASHES_KIND, "version": HASHES_VERSION}
    if not isinstance(data, dict) or {key: data.get(key) for key in header} != header \
            or not isinstance(data.get("files"), dict):  # fmt: skip
        logger.info("ignoring the file hash cache %s: not a cache of this demitasse", store)
        # Another version's cache is replaced; what is no cache of demitasse's never is.
        return {} if isinstance(data, dict) and data.get("kind") == HASHES_KIND else None
    entries = {}
    for key, entry in data["files"].items():
        parsed = _entry(entry)
        if parsed is not None:
            entries[key] = parsed
    return entries


def _entry(entry: Any) -> tuple[Stamp, str] | None:
    """(stamp, sha256) from a cache entry ``[size, mtime, ctime, inode, device, sha256]``."""
    if not isinstance(entry, list) or len(entry) != 6:
        return None
    *numbers, sha = entry
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        return None
    if not isinstance(sha, str) or len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
        return None
    return (numbers[0], numbers[1], numbers[2], numbers[3], numbers[4]), sha


def _record(store: Path, added: dict[str, tuple[Stamp, str]]) -> None:
    """Add ``added`` to the cache file (merged with what other processes wrote since)."""
    with _lock:
        recorded = _read_store(store)
        if recorded is None:  # a file demitasse did not write (it is written only atomically)
            return
        # Files gone since are dropped (a model saved over, a package removed).
        entries = {key: e for key, e in recorded.items() if Path(key).is_file()}
        for key, value in added.items():
            entries.pop(key, None)  # re-inserted last: the newest
            entries[key] = value
        while len(entries) > MAX_ENTRIES:
            del entries[next(iter(entries))]
        _known[store] = entries
        files = {key: [*stamp, sha] for key, (stamp, sha) in entries.items()}
        data = {"kind": HASHES_KIND, "version": HASHES_VERSION, "files": files}
        try:
            atomic_write_text(store, json.dumps(data, separators=(",", ":")) + "\n")
        except (OSError, DemitasseError) as exc:  # a read-only cache: hash again next time
            logger.info("cannot write the file hash cache %s: %s", store, exc)
