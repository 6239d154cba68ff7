"""Parquet shards of ids and codes, written so that a crash leaves a whole shard or none.

A shard is ``shards/part-FFFFF-SSSSS.parquet`` (input file F, shard S of that file) with two
columns: ``id`` (string) and ``embedding``, typed by the precision's codes:

- float32: ``fixed_size_list<float32>[dim]``
- int8: ``fixed_size_list<int8>[dim]``
- byte codes (uint8): ``fixed_size_binary[bytes per vector]``: for binary the packed bits
  (numpy ``packbits`` order, the first dimension in the high bit of the first byte), for
  product or residual codes (``pq16``, ``rq8``) one codeword index a byte, as
  ``CompressedModel.encode`` returns them.

Every shard carries the model's provenance as JSON under the Parquet key-value metadata key
``demitasse.provenance``. A shard is written to a temporary name, flushed to disk (fsync), then
renamed; only then does the manifest name it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.compress import make_quantizer
from demitasse.errors import DataError, one_line
from demitasse.provenance import provenance_json, read_provenance

PROVENANCE_KEY = b"demitasse.provenance"
SHARD_DIR = "shards"
TEMPORARY_SUFFIX = ".tmp"


def shard_name(file_index: int, shard: int) -> str:
    return f"part-{file_index:05d}-{shard:05d}.parquet"


def code_type(dim: int, precision: str) -> Any:
    """The Arrow type of one vector's codes at ``dim`` and ``precision``: byte codes as
    fixed-size binary, numbers as a fixed-size list of their dtype."""
    import pyarrow as pa

    quantizer = make_quantizer(precision)  # unfitted: the layout depends on the kind alone
    dtype = np.dtype(quantizer.code_dtype)
    if dtype == np.uint8:
        return pa.binary(quantizer.bytes_per_vector(dim))
    return pa.list_(pa.from_numpy_dtype(dtype), quantizer.code_width(dim))


def schema(dim: int, precision: str, provenance: dict[str, Any]) -> Any:
    import pyarrow as pa

    codes = code_type(dim, precision)
    return pa.schema(
        [pa.field("id", pa.string(), nullable=False), pa.field("embedding", codes, nullable=False)],
        metadata={PROVENANCE_KEY: provenance_json(provenance).encode("utf-8")},
    )


def codes_array(codes: np.ndarray, kind: Any) -> Any:
    """``codes`` (float32 or int8 [n, d], or uint8 [n, bytes] packed bits) as an Arrow array."""
    import pyarrow as pa

    codes = np.ascontiguousarray(codes)
    if pa.types.is_fixed_size_binary(kind):
        buffer = pa.py_buffer(codes.astype(np.uint8, copy=False).tobytes())
        return pa.FixedSizeBinaryArray.from_buffers(kind, len(codes), [None, buffer])
    flat = pa.array(codes.reshape(-1).astype(kind.value_type.to_pandas_dtype(), copy=False))
    return pa.FixedSizeListArray.from_arrays(flat, kind.list_size)


def fsync_directory(path: Path) -> None:
    """Make a rename inside ``path`` durable (a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def durable_replace(tmp: Path, target: Path) -> None:
    """Flush ``tmp`` to disk, rename it to ``target`` and flush the rename."""
    with tmp.open("rb+") as f:
        os.fsync(f.fileno())
    tmp.replace(target)
    fsync_directory(target.parent)


def durable_write_bytes(target: Path, data: bytes) -> None:
    tmp = target.with_name(target.name + TEMPORARY_SUFFIX)
    tmp.write_bytes(data)
    durable_replace(tmp, target)


class ShardWriter:
    """One shard being written: chunks in (one row group each), :meth:`close` makes it
    durable under its final name and returns the row count."""

    def __init__(self, target: Path, arrow_schema: Any) -> None:
        import pyarrow.parquet as pq

        self.target = target
        self.schema = arrow_schema
        self.rows = 0
        self._tmp = target.with_name(target.name + TEMPORARY_SUFFIX)
        # Codes are near-random bytes (int8 ones dictionary-encoded to a byte a value, which
        # compression shrinks by ~15 %) and compressing them costs a third of the write time;
        # ids compress well.
        self._writer = pq.ParquetWriter(
            self._tmp, arrow_schema, compression={"id": "zstd", "embedding": "none"}
        )

    def write(self, ids: list[str] | Any, codes: np.ndarray) -> None:
        import pyarrow as pa

        kind = self.schema.field("embedding").type
        ids = ids if isinstance(ids, pa.Array) else pa.array(ids, pa.string())
        table = pa.Table.from_arrays([ids, codes_array(codes, kind)], schema=self.schema)
        self._writer.write_table(table)
        self.rows += len(codes)

    def close(self) -> int:
        self._writer.close()
        durable_replace(self._tmp, self.target)
        return self.rows

    def abandon(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        self._tmp.unlink(missing_ok=True)


def shard_provenance(path: Path) -> dict[str, Any]:
    """The provenance a shard carries (one-line errors for a damaged or foreign file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({one_line(exc)})") from None
    if PROVENANCE_KEY not in metadata:
        raise DataError(f"{path}: no demitasse provenance in its metadata")
    return read_provenance(metadata[PROVENANCE_KEY], str(path))
