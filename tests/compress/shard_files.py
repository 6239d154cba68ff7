# ruff: noqa: N803  (scikit-learn convention: matrices are capitalised)
"""Parquet vector shards as ``demitasse embed`` writes them (id, list<float32> vectors)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_shards(
    folder: Path, X: np.ndarray, cuts: list[int], column: str = "embedding"
) -> list[Path]:
    """Write the rows of ``X`` cut at ``cuts`` as ``part-00000.parquet``, ... in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, first = [], 0
    for i, part in enumerate(np.split(X, cuts)):
        vectors = pa.array(list(part.astype(np.float32)), type=pa.list_(pa.float32()))
        ids = pa.array(np.arange(first, first + len(part)))
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(pa.table({"id": ids, column: vectors}), path, row_group_size=64)
        paths.append(path)
        first += len(part)
    return paths


def write_rows(path: Path, rows: list, column: str = "embedding", kind=None) -> Path:
    """One shard with the given Python rows in ``column`` (for malformed input)."""
    kind = pa.list_(pa.float32()) if kind is None else kind
    pq.write_table(pa.table({column: pa.array(rows, type=kind)}), path)
    return path
