"""Column access for user table files: CSV, TSV, JSON Lines (``.gz`` allowed) and Parquet.

Readers yield ``(where, values)``: ``where`` is a position for error messages ("line 7" in text
formats, "row 6", 0-based, in Parquet) and ``values`` the requested columns in order.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from demitasse.data._text import GZIP_ERRORS, iter_lines, open_text, parse_json_line
from demitasse.data.unicode import Replacements, arrow_texts
from demitasse.errors import DataError, one_line

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")

Rows = Iterator[tuple[str, list[Any]]]
# csv's quoting constants (QUOTE_MINIMAL, QUOTE_ALL, QUOTE_NONNUMERIC, QUOTE_NONE), as their
# stubs type them: a plain int is refused by csv.reader's signature.
CsvQuoting = Literal[0, 1, 2, 3]


def table_kind(path: Path) -> str | None:
    """``"csv"``, ``"tsv"``, ``"jsonl"`` or ``"parquet"`` from the name (``.gz`` for text ones)."""
    name = path.name.lower()
    gz = name.endswith(".gz")
    name = name.removesuffix(".gz")
    for suffix in TABLE_SUFFIXES:
        if name.endswith(suffix):
            return None if gz and suffix == ".parquet" else suffix[1:]
    return None


def file_stem(path: Path) -> str:
    """``pairs.jsonl.gz`` → ``pairs``."""
    name = path.name.removesuffix(".gz")
    for suffix in (*TABLE_SUFFIXES, ".txt", ".npy"):
        name = name.removesuffix(suffix)
    return name


def missing_columns(path: Path, columns: Sequence[str], present: Sequence[str]) -> DataError:
    """The error for ``columns`` not all being among ``present``."""
    missing = ", ".join(repr(c) for c in columns if c not in present)
    found = ", ".join(repr(c) for c in present) or "none"
    return DataError(f"{path}: missing column(s) {missing}; the file has {found}")


def check_columns(path: Path, columns: Sequence[str], names: Sequence[str]) -> None:
    """Each of ``columns`` must be among a table's column ``names`` (a Parquet schema's, or a
    CSV or TSV header's), once: of two columns of one name, neither is the one meant."""
    if any(c not in names for c in columns):
        raise missing_columns(path, columns, names)
    repeated = next((c for c in columns if names.count(c) > 1), None)
    if repeated is not None:
        raise DataError(
            f"{path}: {names.count(repeated)} columns are named {repeated!r}; rename all but one"
        )


def _csv_rows(path: Path, columns: Sequence[str], delimiter: str, quoting: CsvQuoting) -> Rows:
    with open_text(path) as f:
        reader = csv.reader(f, delimiter=delimiter, quoting=quoting, strict=True)
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path}: file is empty")
        header = [h.strip() for h in header]
        check_columns(path, columns, header)
        index = [header.index(c) for c in columns]
        for fields in reader:
            if not any(field.strip() for field in fields):
                continue
            if len(fields) <= max(index):
                raise DataError(
                    f"{path}: line {reader.line_num}: {len(fields)} fields, "
                    f"but the header has {len(header)}"
                )
            yield f"line {reader.line_num}", [fields[i] for i in index]


def _delimited_rows(path: Path, columns: Sequence[str], delimiter: str) -> Rows:
    try:
        if delimiter != "\t":
            yield from _csv_rows(path, columns, delimiter, csv.QUOTE_MINIMAL)
            return
        # TSV is parsed eagerly so a quoting error can still switch readers: TSV is often
        # written without quoting, with sentences that start with '"', which strict quote
        # parsing rejects; such a file is then read literally.
        try:
            rows = list(_csv_rows(path, columns, delimiter, csv.QUOTE_MINIMAL))
        except csv.Error:
            rows = list(_csv_rows(path, columns, delimiter, csv.QUOTE_NONE))
    except csv.Error as exc:
        kind = "TSV" if delimiter == "\t" else "CSV"
        raise DataError(f"{path}: malformed {kind} ({one_line(exc)})") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not valid UTF-8") from exc
    except GZIP_ERRORS as exc:
        raise DataError(f"{path}: not a valid gzip file ({one_line(exc)})") from exc
    yield from rows


def _jsonl_rows(path: Path, columns: Sequence[str]) -> Rows:
    empty = True
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        empty = False
        record = parse_json_line(line, f"{path}: line {lineno}")
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {lineno}: expected a JSON object")
        if any(c not in record for c in columns):
            raise DataError(f"{missing_columns(path, columns, list(record))} (line {lineno})")
        yield f"line {lineno}", [record[c] for c in columns]
    if empty:
        raise DataError(f"{path}: file is empty")


def _parquet_rows(path: Path, columns: Sequence[str]) -> Rows:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        check_columns(path, columns, pq.read_schema(path).names)
        table = pq.read_table(path, columns=list(columns))
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({one_line(exc)})") from exc
    data = []
    with Replacements(str(path), "row") as replaced:  # invalid UTF-8: the text policy
        for c in columns:
            try:
                data.append(arrow_texts(table.column(c), replaced))
            except (pa.ArrowException, ValueError, OverflowError) as exc:  # a year 30000 date
                raise DataError(
                    f"{path}: column {c!r} of type {table.column(c).type} cannot be read "
                    f"({one_line(exc)})"
                ) from None
    for i in range(table.num_rows):
        yield f"row {i}", [col[i] for col in data]


def iter_table(path: Path, columns: Sequence[str]) -> Rows:
    """Rows of the table file ``path``, restricted to ``columns``."""
    kind = table_kind(path)
    if kind == "csv":
        return _delimited_rows(path, columns, ",")
    if kind == "tsv":
        return _delimited_rows(path, columns, "\t")
    if kind == "jsonl":
        return _jsonl_rows(path, columns)
    if kind == "parquet":
        return _parquet_rows(path, columns)
    raise DataError(f"{path}: unsupported file type; use .csv, .tsv, .jsonl, .jsonl.gz or .parquet")
