"""A bulk job (what to read, which model, where to write) and what both engines share: the
model's conversion of a chunk, and the sink that turns chunks into durable shards."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from demitasse.bulk.ids import SeenIds
from demitasse.bulk.manifest import Manifest
from demitasse.bulk.shards import SHARD_DIR, ShardWriter, schema, shard_name
from demitasse.bulk.sources import Columns, InputFile, record_position
from demitasse.errors import DataError, DemitasseError, one_line

if TYPE_CHECKING:
    from demitasse.model import CompressedModel

logger = logging.getLogger(__name__)

EMBED = "embed"
RECOMPRESS = "recompress"


@dataclass(frozen=True)
class BulkJob:
    """One run of ``embed`` (texts → codes) or ``recompress`` (stored vectors → codes)."""

    command: str
    model: str
    inputs: list[InputFile]
    out: Path
    columns: Columns
    dim: int | None = None  # None: the model's own width and precision
    precision: str | None = None
    shard_rows: int = 100_000
    batch_size: int = 1024  # records read, converted and written (a row group) at a time
    on_error: str = "stop"  # or "skip": a shard that cannot be read is recorded and skipped

    def options(self) -> dict[str, Any]:
        """What decides the output beyond the model: a resumed run must use the same."""
        return {
            "value_column": self.columns.value,
            "id_column": self.columns.ids,
            "shard_rows": self.shard_rows,
            "batch_size": self.batch_size,
            "on_error": self.on_error,
        }


def load_model(path: str, command: str, threads: int | None = None) -> CompressedModel:
    """The model directory (or encoder) ``path``, ready to convert chunks (one-line
    errors)."""
    from demitasse.model import open_model

    if threads is not None:
        try:
            import torch
        except ImportError:  # the core install: no encoder of the model runs in torch
            pass
        else:
            torch.set_num_threads(threads)
    model = open_model(path)  # through the embedding cache (each Ray actor's own reads)
    if command == EMBED and model.recipe.encoder is None:
        raise DemitasseError(
            f"{path} is a vectors-only model (no encoder): it re-compresses stored vectors "
            "with 'demitasse recompress', it cannot embed texts"
        )
    return model


def convert(
    model: CompressedModel, command: str, values: Any, dim: int | None, precision: str | None
) -> np.ndarray:
    """Texts or vectors → the model's codes at ``dim`` and ``precision``."""
    if command == EMBED:
        return model.encode(values, dim=dim, precision=precision)
    return model.transform(values, dim=dim, precision=precision)


def count_empty(values: Any) -> int:
    return sum(not v.strip() for v in values) if isinstance(values, list) else 0


class ShardSink:
    """Chunks of (file, shard) in order → shard files; the manifest names each shard once it
    is durable, and records each failed shard."""

    def __init__(self, job: BulkJob, manifest: Manifest, model: CompressedModel) -> None:
        self.job = job
        self.manifest = manifest
        self.schema = schema(
            model.output_dim if job.dim is None else job.dim,
            job.precision or model.recipe.precision,
            manifest.provenance,
        )
        self._writer: ShardWriter | None = None
        self._key: tuple[int, int] | None = None
        self._empty = 0
        # Positional ids ('<file>:<line>') cannot repeat; ids read from a column can.
        self.ids = None if job.columns.ids is None else self._written_ids()

    def _written_ids(self) -> SeenIds:
        """The ids of the shards already written (a resumed run's), checked as a run checks
        them."""
        seen = SeenIds(self._written_id, self._place)
        for entry in sorted(self.manifest.shards, key=lambda e: (e["file"], e["shard"])):
            seen.add(self._shard_ids(entry["name"]), entry["file"],
                     entry["shard"] * self.job.shard_rows)  # fmt: skip
            seen.close_shard()
        return seen

    def _shard_ids(self, name: str) -> list[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.job.out / SHARD_DIR / name
        try:
            return pq.read_table(path, columns=["id"]).column("id").to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise DataError(
                f"{path}: cannot read the ids of a written shard ({one_line(exc)})"
            ) from None

    def _written_id(self, file: int, record: int) -> str:
        shard, row = divmod(record, self.job.shard_rows)
        return self._shard_ids(shard_name(file, shard))[row]

    def _place(self, file: int, record: int) -> tuple[str, tuple[str, int]]:
        source = self.job.inputs[file]
        return str(source.path), record_position(source, record)

    def add(self, file: int, shard: int, ids: Any, codes: np.ndarray, empty: int = 0) -> bool:
        """Write a chunk; True when it completed its shard (which is then recorded)."""
        if self._key != (file, shard):
            self.finish(file, last=False)
            target = self.job.out / SHARD_DIR / shard_name(file, shard)
            self._writer, self._key, self._empty = (
                ShardWriter(target, self.schema),
                (file, shard),
                0,
            )
        assert self._writer is not None
        if self.ids is not None:
            self.ids.add(ids, file, shard * self.job.shard_rows + self._writer.rows)
        self._writer.write(ids, codes)
        self._empty += empty
        if self._writer.rows < self.job.shard_rows:
            return False
        self.finish(file, last=False)
        return True

    def finish(self, file: int, last: bool) -> None:
        """Close and record the shard being written; ``last``: ``file`` has no more records."""
        if self._writer is None or self._key is None:
            ends = [s for s in self.manifest.shards if s["file"] == file]
            if last and ends and not ends[-1]["last"]:
                ends[-1]["last"] = True  # the file ended exactly at a shard boundary
                self.manifest.save(self.job.out)
            return
        rows = self._writer.close()
        if self.ids is not None:
            self.ids.close_shard()
        shard = self._key[1]
        entry = {"file": self._key[0], "shard": shard, "name": self._writer.target.name,
                 "rows": rows, "empty_texts": self._empty, "last": last}  # fmt: skip
        self.manifest.shards.append(entry)
        self.manifest.save(self.job.out)
        self._writer, self._key = None, None
        logger.info("shard %s: %d rows", entry["name"], rows)

    def fail(self, file: int, shard: int, exc: BaseException, last: bool) -> None:
        """Record that shard ``shard`` of ``file`` could not be read: skipped, or the end."""
        if self._writer is not None and self._key == (file, shard):
            self.abandon()
        skipped = self.job.on_error == "skip"
        entry = {"file": file, "shard": shard, "path": str(self.job.inputs[file].path),
                 "error": one_line(exc), "skipped": skipped, "last": last}  # fmt: skip
        self.manifest.errors = [
            e for e in self.manifest.errors if (e["file"], e["shard"]) != (file, shard)
        ] + [entry]
        self.manifest.save(self.job.out)
        if not skipped:
            raise DataError(f"{one_line(exc)} (the shards written so far are kept)")
        logger.warning("skipped shard %d of %s: %s", shard, entry["path"], entry["error"])

    def abandon(self) -> None:
        if self._writer is not None:
            self._writer.abandon()
            self._writer, self._key = None, None
        if self.ids is not None:
            self.ids.drop_shard()
