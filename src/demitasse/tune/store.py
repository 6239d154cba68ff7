"""The resumable results store of a tune: one JSON line per finished measurement.

The first line says what the sweep is of (``fingerprint``: the data and the reference model);
every later line is one finished configuration (``"kind": "configuration"``) or one encoder
speed (``"kind": "speed"``), appended and flushed to disk as soon as it is measured. A tune that
is interrupted, or that stops on a bad target, leaves every finished line behind, and
``resume=True`` skips them. A last line cut short by the interruption is dropped on reopening.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from demitasse.errors import DataError
from demitasse.io import atomic_write_text, strict_json

logger = logging.getLogger(__name__)

STORE_KIND = "demitasse-tune-results"
#: 2: judged retrieval entries carry the spread of their per-query scores.
STORE_VERSION = 2
STORE_FILE = "sweep.jsonl"
#: What a tune writes into its work folder; a folder holding anything else is someone's.
WORK_ENTRIES = frozenset({STORE_FILE, "embeddings", "results.json", "report"})


def check_work_dir(work_dir: str | Path, *, resume: bool) -> Path:
    """``work_dir`` as a Path if a tune may work there: nothing yet, an empty folder, or a
    tune's work folder (holding a sweep only with ``resume``). Anything else is refused in one
    line before any work starts."""
    work_dir = Path(work_dir)
    if work_dir.is_symlink() or (work_dir.exists() and not work_dir.is_dir()):
        raise DataError(f"--work-dir {work_dir} is not a folder")
    if not work_dir.exists():
        return work_dir
    names = {entry.name for entry in work_dir.iterdir()}
    foreign = sorted(n for n in names - WORK_ENTRIES if not n.startswith(".dt-"))
    if foreign:
        raise DataError(
            f"refusing to work in {work_dir}: it holds {foreign[0]!r}, which no tune wrote; "
            "choose a new or empty --work-dir"
        )
    if STORE_FILE in names and not resume:
        raise DataError(
            f"{work_dir} holds an earlier sweep: pass --resume to continue it (finished "
            "configurations are not measured again), or choose another --work-dir"
        )
    return work_dir


class ResultsStore:
    """Finished measurements of one sweep, keyed by configuration (or speed) key. Each entry
    names the files of the encoder it measured (``encoder_fingerprint``), so that a static
    model replaced under the same name is measured again."""

    def __init__(self, path: Path, header: dict[str, Any], entries: list[dict[str, Any]]):
        self.path = path
        self.header = header
        self._entries: dict[str, dict[str, Any]] = {e["key"]: e for e in entries}

    @classmethod
    def open(cls, path: str | Path, fingerprint: str, *, resume: bool) -> ResultsStore:
        """The store at ``path``: its finished entries with ``resume``, else a new, empty one.
        An earlier sweep is never dropped silently: without ``resume`` it is refused, and so
        is resuming a sweep of other data or another reference model."""
        path = Path(path)
        header = {"kind": STORE_KIND, "version": STORE_VERSION, "fingerprint": fingerprint}
        entries: list[dict[str, Any]] = []
        if path.exists() and not resume:
            raise DataError(
                f"{path.parent} holds an earlier sweep: pass --resume to continue it (finished "
                "configurations are not measured again), or choose another --work-dir"
            )
        if path.exists():
            found, entries = _read(path)
            if found.get("fingerprint") != fingerprint:
                raise DataError(
                    f"{path} holds a sweep of other data or another model; choose another "
                    "--work-dir (or delete that file to start over)"
                )
        elif resume:
            logger.info("no earlier sweep at %s: starting a new one", path)
        lines = [strict_json(header, indent=None), *(strict_json(e, indent=None) for e in entries)]
        # Rewritten whole (atomically): a line cut short by an interruption is gone before
        # anything is appended after it.
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        return cls(path, header, entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str, encoder_fingerprint: str | None = None) -> dict[str, Any] | None:
        """The finished entry ``key``, if it measured the encoder ``encoder_fingerprint``
        (when given)."""
        entry = self._entries.get(key)
        if entry is None or encoder_fingerprint is None:
            return entry
        return entry if entry.get("encoder_fingerprint") == encoder_fingerprint else None

    def entries(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self._entries.values() if e.get("kind") == kind]

    def append(self, entry: dict[str, Any]) -> None:
        """Record one finished measurement on disk (flushed and synced) and in memory."""
        if "key" not in entry or "kind" not in entry:
            raise DataError("a results store entry needs a key and a kind")
        line = strict_json(entry, indent=None) + "\n"
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        self._entries[entry["key"]] = entry


def _read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the complete entries of a store file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the tune results {path}: {exc}") from None
    parsed: list[Any] = []
    for number, line in enumerate(lines, start=1):
        try:
            parsed.append(json.loads(line))
        except ValueError:
            if number == len(lines):  # cut short by an interruption: that one is lost
                logger.warning("%s: its last line is incomplete and was dropped", path)
                break
            raise DataError(
                f"{path}:{number}: not a JSON line; is this a tune results file?"
            ) from None
    header = parsed[0] if parsed else None
    if not isinstance(header, dict) or header.get("kind") != STORE_KIND:
        raise DataError(f"{path} is not a demitasse tune results file")
    if header.get("version") != STORE_VERSION:
        raise DataError(f"{path} was written by another version of demitasse tune; start over")
    entries = [e for e in parsed[1:] if isinstance(e, dict) and "key" in e and "kind" in e]
    return header, entries
