"""``manifest.json``: what a bulk run is, which shards are durably written, which failed.

The manifest is rewritten (temporary name, fsync, rename) after every shard, and names a shard
only once the shard itself is on disk under its final name. After ``kill -9`` at any moment the
folder therefore holds the manifest of some earlier moment, every shard it names (complete),
and maybe one more shard or a temporary file that ``--resume`` rewrites or removes. Because
shard boundaries depend on the inputs only, the resumed run writes exactly the shards the
uninterrupted one would have.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demitasse.bulk.shards import SHARD_DIR, TEMPORARY_SUFFIX, durable_write_bytes
from demitasse.errors import DataError, DemitasseError
from demitasse.provenance import check_provenance

MANIFEST = "manifest.json"
KIND = "demitasse bulk output"
VERSION = 1


@dataclass
class Manifest:
    """The state of one output folder (see the module's description)."""

    command: str
    provenance: dict[str, Any]
    inputs: list[dict[str, Any]]
    options: dict[str, Any]
    shards: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False

    def done(self) -> set[tuple[int, int]]:
        """(file, shard) pairs already settled: written, or failed and skipped."""
        settled = {(s["file"], s["shard"]) for s in self.shards}
        return settled | {(e["file"], e["shard"]) for e in self.errors if e.get("skipped")}

    def finished_files(self) -> set[int]:
        return {s["file"] for s in self.shards if s.get("last")} | {
            e["file"] for e in self.errors if e.get("skipped") and e.get("last")
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "version": VERSION,
            "command": self.command,
            "complete": self.complete,
            "provenance": self.provenance,
            "options": self.options,
            "inputs": self.inputs,
            "shards": self.shards,
            "errors": self.errors,
            "rows": sum(s["rows"] for s in self.shards),
        }

    def save(self, directory: Path) -> None:
        text = json.dumps(self.as_json(), indent=1, ensure_ascii=False, allow_nan=False)
        durable_write_bytes(directory / MANIFEST, text.encode("utf-8") + b"\n")


def load_manifest(directory: Path) -> Manifest | None:
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("kind") != KIND or data.get("version") != VERSION:
            raise ValueError(f"not a {KIND} version {VERSION}")
        return Manifest(
            command=data["command"], provenance=data["provenance"], inputs=data["inputs"],
            options=data["options"], shards=data["shards"], errors=data["errors"],
            complete=bool(data["complete"]),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{path}: unreadable manifest ({exc})") from None


def check_resumable(old: Manifest, new: Manifest, directory: Path) -> None:
    """Refuse to continue ``old`` with another model, command, options or changed inputs."""
    check_provenance(old.provenance, new.provenance, str(directory))
    if old.command != new.command:
        raise DemitasseError(
            f"{directory} holds the output of '{old.command}', not '{new.command}'"
        )
    for key in sorted(set(old.options) | set(new.options)):
        if old.options.get(key) != new.options.get(key):
            raise DemitasseError(
                f"{directory} was started with {key}={old.options.get(key)!r}, not "
                f"{new.options.get(key)!r}; resume with the same options"
            )
    old_paths = [i["path"] for i in old.inputs]
    if old_paths != [i["path"] for i in new.inputs]:
        raise DemitasseError(
            f"{directory} was started on {len(old_paths)} other input files; resume with the "
            "same --input"
        )
    started = {s["file"] for s in old.shards}
    for index, (before, now) in enumerate(zip(old.inputs, new.inputs, strict=True)):
        if index in started and before != now:
            raise DemitasseError(
                f"{now['path']} changed since the run started (size or modification time); "
                "start again in an empty directory"
            )


def check_output_target(directory: Path) -> None:
    """Refuse, before any model is loaded, a target that no run may write into."""
    if directory.exists() and not directory.is_dir():
        raise DemitasseError(f"{directory} exists and is not a directory")
    if directory.is_dir() and load_manifest(directory) is None and not _fresh(directory):
        raise DemitasseError(
            f"{directory} is not empty and holds no demitasse output; choose an empty or new "
            "directory"
        )


def prepare_output(directory: Path, new: Manifest, resume: bool) -> Manifest:
    """The manifest to continue from: a fresh one for an empty or new folder, the stored one
    on ``--resume``; anything else in the folder is refused in one line, and left alone."""
    check_output_target(directory)
    old = load_manifest(directory) if directory.is_dir() else None
    if old is None:
        directory.mkdir(parents=True, exist_ok=True)
        new.save(directory)  # first: a folder with a manifest is ours, whenever we are killed
        (directory / SHARD_DIR).mkdir(exist_ok=True)
        return new
    check_provenance(old.provenance, new.provenance, str(directory))
    if not resume:
        state = "a finished" if old.complete else "an unfinished"
        raise DemitasseError(
            f"{directory} holds {state} run; pass --resume to complete it, or choose an empty "
            "directory"
        )
    check_resumable(old, new, directory)
    (directory / SHARD_DIR).mkdir(exist_ok=True)
    for leftover in (directory / SHARD_DIR).glob("*.tmp"):
        leftover.unlink()  # a shard a killed run was writing: it will be written again
    old.inputs = new.inputs
    return old


def _fresh(directory: Path) -> bool:
    """Empty, or holding only what a run killed before its first manifest leaves behind."""
    for entry in directory.iterdir():
        if entry.name == MANIFEST + TEMPORARY_SUFFIX:
            continue
        if entry.name == SHARD_DIR and entry.is_dir() and not any(entry.iterdir()):
            continue
        return False
    return True


def read_output(directory: str | Path) -> Iterator[Any]:
    """The shards a finished or interrupted output holds, in order, as Arrow tables."""
    import pyarrow.parquet as pq

    directory = Path(directory)
    manifest = load_manifest(directory)
    if manifest is None:
        raise DataError(f"{directory}: no {MANIFEST}; not a demitasse bulk output")
    for shard in sorted(manifest.shards, key=lambda s: (s["file"], s["shard"])):
        yield pq.read_table(directory / SHARD_DIR / shard["name"])
