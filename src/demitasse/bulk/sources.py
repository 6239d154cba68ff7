"""Input files read as a stream of ``(ids, values)`` chunks, by deterministic row ranges.

A run's inputs are the files a glob matches, sorted by path. Every file is cut into shards of
``shard_rows`` records: shard ``k`` holds records ``k·R … (k+1)·R − 1`` in file order, so the
same inputs always give the same shards, whichever engine reads them and however often a run
was interrupted. A record is a line of a ``.txt(.gz)`` file (every line, empty ones too), a
non-blank line of a ``.jsonl(.gz)`` file, or a row of a Parquet file. Without an id column a
record's id is ``<file>:<n>``: the 1-based line of text and JSON Lines files, the 0-based row of
Parquet files, with ``<file>`` the path relative to the inputs' common folder.

Reading a shard skips the earlier records as raw bytes (text) or whole row batches (Parquet), so
a damaged record spoils only the shard that holds it. Text that is not valid Unicode (invalid
UTF-8, a JSON ``"\ud800"``) becomes U+FFFD, with one warning per file and run of shards read
(:mod:`demitasse.data.unicode`): the record is embedded, never dropped.
"""

from __future__ import annotations

import glob
import gzip
import itertools
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.arrays import arrow_vectors, check_float_vectors
from demitasse.data import check_columns
from demitasse.data.files import check_text
from demitasse.data.unicode import Replacements, arrow_texts
from demitasse.errors import DataError, one_line

KINDS = {".txt": "text", ".txt.gz": "text", ".jsonl": "jsonl", ".jsonl.gz": "jsonl",
         ".parquet": "parquet"}  # fmt: skip
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


@dataclass(frozen=True)
class InputFile:
    """One input file: where it is, what it is, and what identifies its content."""

    path: Path
    name: str  # the path relative to the inputs' common folder: the prefix of positional ids
    kind: str  # "text", "jsonl" or "parquet"
    size: int
    mtime_ns: int

    def record(self) -> dict[str, Any]:
        return {"path": str(self.path), "size": self.size, "mtime_ns": self.mtime_ns}


@dataclass(frozen=True)
class Columns:
    """What to read: the value column (texts or vectors), the id column, and what values are."""

    value: str
    ids: str | None
    values: str  # "texts" or "vectors"
    id_required: bool = True  # False: a missing id column falls back to positional ids

    def __post_init__(self) -> None:
        if self.ids is not None and self.ids == self.value:
            kind = "text" if self.values == "texts" else "vector"
            raise DataError(
                f"the {kind} column and the id column are both {self.value!r}: name two "
                "different columns"
            )


def kind_of(path: Path) -> str | None:
    name = path.name.lower()
    for suffix, kind in KINDS.items():
        if name.endswith(suffix):
            return kind
    return None


def expand_inputs(pattern: str, kinds: tuple[str, ...]) -> list[InputFile]:
    """The files ``pattern`` (a glob; ``**`` recurses) matches, sorted, all of ``kinds``."""
    # glob.glob, not Path.glob: the pattern may be absolute and hold wildcards in any part.
    matches = glob.glob(str(Path(pattern).expanduser()), recursive=True)  # noqa: PTH207
    try:
        paths = sorted({Path(p).resolve() for p in matches})
    except RuntimeError as exc:  # Path.resolve on a symlink loop (Python < 3.13)
        raise DataError(f"--input {pattern!r}: {exc}") from None
    paths = [p for p in paths if p.is_file()]
    if not paths:
        raise DataError(f"--input {pattern!r} matches no file")
    wrong = [p for p in paths if kind_of(p) not in kinds]
    if wrong:
        allowed = ", ".join(s for s, k in KINDS.items() if k in kinds)
        raise DataError(f"{wrong[0]}: unsupported input type; use {allowed}")
    root = Path(os.path.commonpath([p.parent for p in paths]))
    files = []
    for path in paths:
        stat = path.stat()
        kind = kind_of(path)
        assert kind is not None
        name = path.relative_to(root).as_posix()
        files.append(InputFile(path, name, kind, stat.st_size, stat.st_mtime_ns))
    return files


class UnreadableRestError(DataError):
    """The file cannot be read past some record: its later shards cannot be reached either."""


def iter_chunks(
    source: InputFile, columns: Columns, shard_rows: int, chunk_rows: int,
    first_shard: int = 0, last_shard: int | None = None,
) -> Iterator[tuple[int, list[str], Any]]:  # fmt: skip
    """``(shard, ids, values)`` chunks of at most ``chunk_rows`` records, each inside one
    shard, from shard ``first_shard`` to ``last_shard`` (or the end of the file), in one pass.
    Values are a list of texts, or a float32 [n, d] array of vectors."""
    start = first_shard * shard_rows
    stop = None if last_shard is None else (last_shard + 1) * shard_rows
    if source.kind != "parquet" and columns.values != "texts":
        raise DataError(f"{source.path}: vectors are read from Parquet files only")
    reader = _parquet_chunks if source.kind == "parquet" else _text_chunks
    unit = "row" if source.kind == "parquet" else "line"
    with Replacements(str(source.path), unit) as replaced:
        chunks = reader(source, start, stop, _Cut(shard_rows, chunk_rows), columns, replaced)
        for first, ids, values in chunks:
            yield first // shard_rows, ids, values


@dataclass(frozen=True)
class _Cut:
    shard_rows: int
    chunk_rows: int

    def size(self, row: int, stop: int | None) -> int:
        """Rows of the chunk that starts at ``row``: it ends at the next shard boundary."""
        size = min(self.chunk_rows, self.shard_rows - row % self.shard_rows)
        return size if stop is None else min(size, stop - row)


def _text_chunks(
    source: InputFile,
    start: int,
    stop: int | None,
    cut: _Cut,
    columns: Columns,
    replaced: Replacements,
) -> Iterator[tuple[int, list[str], Any]]:
    records = (_text_records if source.kind == "text" else _jsonl_records)(
        source, columns, replaced
    )
    try:
        for _ in itertools.islice(records, start):
            pass
    except DataError as exc:
        raise UnreadableRestError(str(exc)) from None
    row = start
    while stop is None or row < stop:
        chunk = [decode() for decode in itertools.islice(records, cut.size(row, stop))]
        if not chunk:
            return
        ids, values = zip(*chunk, strict=True)
        yield row, list(ids), list(values)
        row += len(chunk)


def count_records(source: InputFile) -> int:
    """How many records ``source`` holds (raw lines or Parquet metadata; nothing decoded).
    A file unreadable part way counts the records before the damage, plus one."""
    if source.kind == "parquet":
        rows = _parquet_rows(source)
        return 1 if rows is None else rows
    count = 0
    try:
        for _, raw in _raw_lines(source):
            count += source.kind == "text" or bool(raw.strip())
    except DataError:
        return count + 1
    return count


def _parquet_rows(source: InputFile) -> int | None:
    """The rows a Parquet file's metadata counts (nothing decoded); None if it cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(source.path).metadata.num_rows)
    except (pa.ArrowException, OSError):
        return None


def has_records(source: InputFile) -> bool:
    """Whether ``source`` holds a record, found without reading past the first one (raw lines
    or Parquet metadata; nothing decoded). A file that cannot be read counts as holding one:
    the run reads it, and names the damage (or skips it, with ``--on-error skip``)."""
    if source.kind == "parquet":
        rows = _parquet_rows(source)
        return rows is None or rows > 0
    try:
        return any(source.kind == "text" or raw.strip() for _, raw in _raw_lines(source))
    except DataError:
        return True


def check_some_records(inputs: list[InputFile], values: str) -> None:
    """Refuse inputs that hold no record at all, in the words ``encode`` and ``transform``
    use for an empty file (``values``: ``"texts"`` or ``"vectors"``). Some empty files among
    others are read as they are: only inputs with no record in total are refused."""
    if any(has_records(source) for source in inputs):
        return
    what = "text" if values == "texts" else "vectors"
    if len(inputs) == 1:  # a text file without a line, JSON Lines without a record: empty
        empty = "file is empty" if inputs[0].kind != "parquet" else f"no {what} found"
        raise DataError(f"{inputs[0].path}: {empty}")
    shown = ", ".join(str(source.path) for source in inputs[:3])
    more = ", …" if len(inputs) > 3 else ""
    raise DataError(f"no {what} found: the {len(inputs)} input files ({shown}{more}) are all empty")


def record_position(source: InputFile, record: int) -> tuple[str, int]:
    """Where record ``record`` (0-based, in file order) of ``source`` is, as messages name
    records: ``("line", n)`` in a text or JSON Lines file (a scan of the raw lines, nothing
    decoded), ``("row", n)`` in a Parquet file (0-based, as positional ids count rows)."""
    if source.kind == "parquet":
        return "row", record
    if source.kind == "text":
        return "line", record + 1
    records = (n for n, raw in _raw_lines(source) if raw.strip())
    return "line", next(itertools.islice(records, record, None), 0)


def _raw_lines(source: InputFile) -> Iterator[tuple[int, bytes]]:
    try:
        with (
            gzip.open(source.path, "rb")
            if source.path.name.endswith(".gz")
            else source.path.open("rb") as f
        ):
            yield from enumerate(f, start=1)
    except _GZIP_ERRORS as exc:
        raise DataError(f"{source.path}: not a valid gzip file ({one_line(exc)})") from None


def _decode(lineno: int, raw: bytes, replaced: Replacements) -> str:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        line = replaced.decode(raw, f"line {lineno}")
    line = line.rstrip("\r\n")
    return line.removeprefix("\ufeff") if lineno == 1 else line


def _text_records(source: InputFile, columns: Columns, replaced: Replacements) -> Iterator[Any]:
    """Every line is a record (an empty one too: ids stay line numbers); each item is a
    function that decodes it, so skipped records cost no decoding."""
    if columns.ids is not None and columns.id_required:
        raise DataError(f"{source.path}: a text file has no id column; drop --id-column")
    for lineno, raw in _raw_lines(source):
        yield lambda lineno=lineno, raw=raw: (
            f"{source.name}:{lineno}",
            _decode(lineno, raw, replaced),
        )


def _jsonl_records(source: InputFile, columns: Columns, replaced: Replacements) -> Iterator[Any]:
    for lineno, raw in _raw_lines(source):
        if raw.strip():
            yield lambda lineno=lineno, raw=raw: _json_record(
                source, lineno, raw, columns, replaced
            )


def _json_record(
    source: InputFile, lineno: int, raw: bytes, columns: Columns, replaced: Replacements
) -> tuple[str, str]:
    where = f"{source.path}: line {lineno}"
    try:
        record = json.loads(_decode(lineno, raw, replaced))
    except (ValueError, RecursionError) as exc:
        raise DataError(f"{where}: invalid JSON ({one_line(exc)})") from None
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object")
    if columns.value not in record:
        found = ", ".join(repr(k) for k in list(record)[:5]) or "none"
        raise DataError(f"{where}: no {columns.value!r} field (it has {found})")
    ident = f"{source.name}:{lineno}"
    if columns.ids is not None and (columns.ids in record or columns.id_required):
        if columns.ids not in record:
            raise DataError(f"{where}: no {columns.ids!r} field for the id")
        ident = replaced.text(_id_text(record[columns.ids], where), f"line {lineno}")
    text = check_text(record[columns.value], where, columns.value)
    return ident, replaced.text(text, f"line {lineno}")


def _id_text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(f"{where}: the id must be a string or an integer, got {value!r:.40}")
    return str(value)


def _parquet_chunks(
    source: InputFile,
    start: int,
    stop: int | None,
    cut: _Cut,
    columns: Columns,
    replaced: Replacements,
) -> Iterator[tuple[int, list[str], Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(source.path)
        sizes = [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
    except (pa.ArrowException, OSError) as exc:
        message = f"{source.path}: not a readable Parquet file ({one_line(exc)})"
        raise UnreadableRestError(message) from None
    try:
        wanted = _parquet_columns(source, parquet.schema_arrow, columns)
    except DataError as exc:
        raise UnreadableRestError(str(exc)) from None
    try:
        # Row groups wholly before ``start`` are never decoded.
        first_group, row = 0, 0
        while first_group < len(sizes) and row + sizes[first_group] <= start:
            row += sizes[first_group]
            first_group += 1
        groups = list(range(first_group, len(sizes)))
        # One thread: decoding a list column does not split across threads, and Arrow's pool
        # only competes with the conversion for the cores (measured 15 % slower).
        batches = parquet.iter_batches(
            batch_size=cut.chunk_rows, row_groups=groups, columns=wanted, use_threads=False
        )
        for batch in batches:
            offset = max(start - row, 0)
            while offset < batch.num_rows and (stop is None or row + offset < stop):
                size = min(cut.size(row + offset, stop), batch.num_rows - offset)
                part = batch.slice(offset, size)
                yield (
                    row + offset,
                    *_parquet_chunk(source, part, row + offset, (columns, wanted), replaced),
                )
                offset += size
            row += batch.num_rows
            if stop is not None and row >= stop:
                return
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{source.path}: not a readable Parquet file ({one_line(exc)})") from None


def _parquet_columns(source: InputFile, schema: Any, columns: Columns) -> list[str]:
    """The columns to read; a missing one, one of two columns of one name (refused as every
    reader of tables refuses it), or integer vectors (codes, not vectors: refused as every
    reader of vectors refuses them), fail before any record is read."""
    import pyarrow as pa

    names = schema.names
    if columns.value not in names:
        found = ", ".join(repr(n) for n in names[:8]) or "none"
        raise DataError(f"{source.path}: no column {columns.value!r} (it has {found})")
    check_columns(source.path, [columns.value], names)
    value_type = getattr(schema.field(columns.value).type, "value_type", None)
    if columns.values == "vectors" and value_type is not None and pa.types.is_integer(value_type):
        where = f"{source.path}: column {columns.value!r}"
        check_float_vectors(value_type.to_pandas_dtype(), where)
    if columns.ids is None or (columns.ids not in names and not columns.id_required):
        return [columns.value]
    if columns.ids not in names:
        raise DataError(f"{source.path}: no id column {columns.ids!r}")
    check_columns(source.path, [columns.ids], names)
    return [columns.value, columns.ids]


def _parquet_chunk(
    source: InputFile,
    batch: Any,
    first: int,
    read: tuple[Columns, list[str]],
    replaced: Replacements,
) -> tuple[list[str], Any]:
    columns, wanted = read
    where = f"{source.path}: rows {first}-{first + batch.num_rows - 1}"
    if len(wanted) == 2:
        ids = [_id_text(v, where) for v in arrow_texts(batch.column(1), replaced, first)]
    else:
        ids = [f"{source.name}:{first + i}" for i in range(batch.num_rows)]
    column = batch.column(0)
    if columns.values == "vectors":
        return ids, vectors_of(column, where, columns.value)
    texts = arrow_texts(column, replaced, first)
    for i, text in enumerate(texts):
        check_text(text, f"{source.path}: row {first + i}", columns.value)
    return ids, texts


def vectors_of(column: Any, where: str, name: str) -> np.ndarray:
    """A Parquet list column as a float32 [n, d] array (one copy; nulls and ragged rows refused)."""
    return arrow_vectors(column, f"{where}: column {name!r}")
