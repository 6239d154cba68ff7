# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Fitting on vectors stored as Parquet shards, shard by shard, never holding them all.

The shards hold one vector per row in a list column (``list<float>``, as ``demitasse embed``
writes them). :func:`shard_statistics` gathers :class:`VectorStatistics` for PCA (locally, or
on Ray Data: ``read_parquet`` → ``map_batches`` giving one statistics row per block → merged in
a reduce step on the driver); :func:`sample_shards` draws a seeded uniform sample for the
compressors that need the vectors themselves; :func:`scan_shards` does both in one pass.

Example::

    stats = shard_statistics("vectors/*.parquet", column="embedding", engine="ray")
    pca = PCA(dim=256).fit_from_statistics(stats)
    sample = sample_shards("vectors/*.parquet", size=100_000, seed=0)
"""

from __future__ import annotations

import glob
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from demitasse.arrays import arrow_vectors
from demitasse.compress.sampling import Reservoir
from demitasse.compress.statistics import VectorStatistics
from demitasse.errors import DataError, DemitasseError, UnknownNameError, one_line
from demitasse.progress import tracked

logger = logging.getLogger(__name__)

_WORKER_ERROR = re.compile(r"^demitasse\.errors\.(\w+): (.+)$", re.MULTILINE)

Engine = Literal["local", "ray"]
ENGINES = ("local", "ray")
#: Rows read at a time: 65,536 × 768 float32 is 200 MB, and gives BLAS enough work per call.
DEFAULT_BATCH_ROWS = 65_536


class _Sink(Protocol):
    def update(self, X: Any) -> Any: ...


def vector_shards(pattern: str | Path | Sequence[str | Path]) -> list[Path]:
    """The Parquet files of ``pattern``: a glob (``dir/*.parquet``), a directory (its
    ``*.parquet``), one file, or a list of files; sorted, so the stream order is fixed."""
    if not isinstance(pattern, str | Path):
        paths = [Path(p) for p in pattern]
    elif Path(pattern).is_dir():
        paths = sorted(Path(pattern).glob("*.parquet"))
    else:
        # Wildcards may sit in directory parts too ('runs/*/part-*.parquet'): Path.glob
        # takes them only relative to a fixed root.
        matches = glob.glob(str(pattern))  # noqa: PTH207
        paths = sorted(Path(p) for p in matches if Path(p).is_file())
    if not paths:
        raise DataError(f"no Parquet file matches {str(pattern)!r}")
    missing = next((p for p in paths if not p.is_file()), None)
    if missing is not None:
        raise DataError(f"{missing}: no such file")
    return paths


def check_vector_column(path: Path, column: str) -> int | None:
    """Fail in one line unless ``path`` is Parquet with a list-of-numbers ``column``; its
    width if the type fixes it, else None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({one_line(exc)})") from None
    if column not in schema.names:
        found = ", ".join(repr(name) for name in schema.names) or "none"
        raise DataError(f"{path}: no column {column!r}; the file has {found}")
    kind = schema.field(column).type
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    if not (is_list or pa.types.is_fixed_size_list(kind)):
        raise DataError(f"{path}: column {column!r} has type {kind}, expected a list of numbers")
    value_type = kind.value_type
    if not (pa.types.is_floating(value_type) or pa.types.is_integer(value_type)):
        raise DataError(f"{path}: column {column!r} holds {value_type} values, not numbers")
    return None if is_list else int(kind.list_size)


def vector_width(paths: Sequence[Path], column: str = "embedding") -> int:
    """The width of the first vector in the shards (read from the schema when it fixes it)."""
    fixed = check_vector_column(paths[0], column)
    if fixed is not None:
        return fixed
    for X in iter_shard_vectors(paths, column, batch_rows=1):
        return int(X.shape[1])
    raise DataError(f"the {len(paths)} shard(s) hold no vectors")


def iter_shard_vectors(
    paths: Sequence[Path], column: str = "embedding", batch_rows: int = DEFAULT_BATCH_ROWS
) -> Iterator[np.ndarray]:
    """float32 batches of ``column`` over the shards in order; every shard is checked first,
    so a missing column in the last shard fails before any work."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in paths:
        check_vector_column(path, column)
    width: int | None = None
    for path in tracked(paths, "reading vector shards", unit="shards"):
        first = 0
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=[column])
            for batch in batches:
                where = f"{path}, rows {first}-{first + batch.num_rows - 1}"
                X = arrow_vectors(batch.column(0), where)
                first += batch.num_rows
                if X.shape[0] == 0:
                    continue
                if width is not None and X.shape[1] != width:
                    raise DataError(
                        f"{where}: vectors have {X.shape[1]} values, earlier ones {width}"
                    )
                width = X.shape[1]
                yield X
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{path}: not a readable Parquet file ({one_line(exc)})") from None


def scan_shards(
    pattern: str | Path | Sequence[str | Path],
    *sinks: _Sink,
    column: str = "embedding",
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> int:
    """Feed every vector of the shards, batch by batch, to each sink's ``update`` (e.g. a
    :class:`VectorStatistics` and a :class:`Reservoir` in one pass); the number of rows."""
    rows = 0
    for X in iter_shard_vectors(vector_shards(pattern), column, batch_rows):
        for sink in sinks:
            sink.update(X)
        rows += X.shape[0]
    if rows == 0:
        raise DataError(f"the shards of {str(pattern)!r} hold no vectors")
    return rows


def sample_shards(
    pattern: str | Path | Sequence[str | Path],
    size: int,
    *,
    column: str = "embedding",
    seed: int = 0,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> np.ndarray:
    """A seeded uniform sample of ``size`` vectors (all of them if there are fewer), in
    shard order; the same for a seed however the rows are cut into shards."""
    reservoir = Reservoir(size, seed)
    scan_shards(pattern, reservoir, column=column, batch_rows=batch_rows)
    logger.info("sampled %d of %d vectors (seed %d)", len(reservoir.sample), reservoir.seen, seed)
    return reservoir.sample


def shard_statistics(
    pattern: str | Path | Sequence[str | Path],
    *,
    column: str = "embedding",
    engine: Engine = "local",
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> VectorStatistics:
    """Count, sum and ``XᵀX`` of every vector in the shards, for ``PCA.fit_from_statistics``.

    ``engine="ray"`` computes one :class:`VectorStatistics` per Ray Data block (on whatever
    cluster ``ray.init`` joined, or a local one) and merges them on the driver; Ray is
    imported only then (``pip install 'demitasse[ray]'``). ``batch_rows`` is the local
    engine's batch; Ray takes whole blocks, bounded by its target block size.
    """
    if engine not in ENGINES:
        raise UnknownNameError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine == "ray":
        return _ray_statistics(vector_shards(pattern), column)
    statistics = VectorStatistics()
    scan_shards(pattern, statistics, column=column, batch_rows=batch_rows)
    return statistics


def block_statistics(batch: Any, column: str = "embedding") -> dict[str, np.ndarray]:
    """A Ray Data ``map_batches`` function (``batch_format="pyarrow"``, best with
    ``batch_size=None``, whole blocks, so no file's rows are cut apart): the
    :class:`VectorStatistics` of one batch of ``column`` as one row (count, shift, sum, gram),
    for :func:`merge_statistics_rows` to reduce. Usable in your own pipelines."""
    stats = VectorStatistics()
    paths = ["a Ray block"] * len(batch)
    if "path" in batch.column_names:  # read_parquet(include_paths=True): name the bad file
        paths = batch.column("path").to_pylist()
    starts = [i for i in range(len(paths)) if i == 0 or paths[i] != paths[i - 1]]
    for start, stop in pairwise([*starts, len(paths)]):
        X = arrow_vectors(batch.column(column).slice(start, stop - start), paths[start])
        if stats.n_features is not None and X.shape[1] != stats.n_features:
            raise DataError(
                f"{paths[start]}: vectors have {X.shape[1]} values, but those of {paths[0]} "
                f"have {stats.n_features}"
            )
        stats.update(X)
    if stats.count == 0:
        return {"count": np.zeros(0, dtype=np.int64)}
    assert stats.shift is not None and stats.sum is not None and stats.gram is not None
    return {
        "count": np.array([stats.count], dtype=np.int64),
        "where": np.array([paths[0]]),
        "shift": stats.shift[None],
        "sum": stats.sum[None],
        "gram": stats.gram[None],
    }


def merge_statistics_rows(rows: Iterable[dict[str, Any]]) -> VectorStatistics:
    """The reduce step: merge the rows :func:`block_statistics` produced into one."""
    total = VectorStatistics()
    first = ""
    for row in rows:
        if int(row["count"]) == 0:
            continue
        first = first or str(row.get("where", "a Ray block"))
        part = VectorStatistics(shift=row["shift"])
        part.sum = np.asarray(row["sum"], dtype=np.float64)
        part.gram = np.asarray(row["gram"], dtype=np.float64)
        part.count = int(row["count"])
        try:
            total.merge(part)
        except DataError as exc:
            raise DataError(f"{row.get('where', 'a Ray block')} and {first}: {exc}") from None
    return total


def _ray_statistics(paths: list[Path], column: str) -> VectorStatistics:
    try:
        import ray
    except ImportError:
        raise DemitasseError("engine 'ray' needs Ray Data: pip install 'demitasse[ray]'") from None
    for path in paths:
        check_vector_column(path, column)
    # Statistics of different blocks are merged exactly (up to rounding) in any order, so
    # Ray may split and schedule the blocks however it likes.
    dataset = ray.data.read_parquet([str(p) for p in paths], include_paths=True)
    dataset = dataset.select_columns([column, "path"])  # read only these (Ray pushes it down)
    # Whole blocks (batch_size=None): re-batching would cut a file's rows apart, and an error
    # could then name the wrong file. Blocks are bounded by Ray's target block size.
    blocks = dataset.map_batches(
        block_statistics, fn_kwargs={"column": column}, batch_format="pyarrow", batch_size=None
    )
    try:
        total = merge_statistics_rows(blocks.iter_rows())
    except Exception as exc:  # a worker's error arrives wrapped in Ray's exception types
        raise _worker_error(exc) from None
    if total.count == 0:
        raise DataError(f"the {len(paths)} shard(s) hold no vectors")
    logger.info("statistics of %d vectors from %d shards on Ray", total.count, len(paths))
    return total


def _worker_error(exc: BaseException) -> DemitasseError:
    """The DemitasseError a Ray worker raised, in one line, else Ray's error in one line.

    Ray re-raises a task's error on the driver as its own exception type, keeping the
    original only as traceback text, so the original is read back from that text."""
    from demitasse import errors

    found = _WORKER_ERROR.findall(str(exc))
    if found:
        name, message = found[-1]
        kind = getattr(errors, name, DemitasseError)
        if isinstance(kind, type) and issubclass(kind, DemitasseError):
            return kind(message.strip())
    return DemitasseError(f"Ray failed: {one_line(exc)}")
