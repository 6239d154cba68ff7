"""Readers for the three files of a retrieval set, in BEIR's formats and in user tables.

- documents and queries: JSON Lines (``_id``, ``text``, optional ``title``; BEIR's layout, any
  other fields ignored) or a table with a header (TSV, CSV, Parquet) with the same columns
  (``id`` is taken for ``_id``);
- relevance judgements (qrels): BEIR's TSV (``query-id``, ``corpus-id``, ``score``; the header
  is optional and extra columns are ignored) or a JSON Lines / CSV / Parquet table with those
  columns (``query_id``, ``corpus_id`` / ``doc_id`` are taken too).

Every file may be gzipped except Parquet. Ids are strings: a JSON or Parquet integer id becomes
its decimal string, so it matches the same id in a TSV file; a string id that looks like a
number (``"0042"``) is kept exactly as written. Invalid UTF-8 and lone surrogates in texts
and ids become U+FFFD, with one warning per file (:mod:`demitasse.data.unicode`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demitasse.data._tables import iter_table, table_kind
from demitasse.data._text import GZIP_ERRORS, iter_lines, open_text, parse_json_line
from demitasse.data.files import check_text
from demitasse.data.unicode import Replacements
from demitasse.errors import DataError, one_line

#: Accepted column names, first the BEIR one.
ID_COLUMNS = ("_id", "id")
QUERY_ID_COLUMNS = ("query-id", "query_id", "qid")
DOC_ID_COLUMNS = ("corpus-id", "corpus_id", "doc-id", "doc_id", "docid")
SCORE_COLUMNS = ("score", "relevance")


@dataclass(frozen=True)
class Judgement:
    """One qrels row; ``where`` locates it for error messages (``"path:7"``)."""

    where: str
    query_id: str
    doc_id: str
    grade: int


def _check_kind(path: Path) -> str:
    kind = table_kind(path)
    if kind is None:
        raise DataError(
            f"{path}: unsupported file type; use .jsonl, .tsv, .csv (each optionally .gz) "
            "or .parquet"
        )
    return kind


def _header(path: Path, kind: str) -> list[str]:
    """Column names of a CSV, TSV or Parquet file."""
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{path}: not a readable Parquet file ({one_line(exc)})") from None
    try:
        # A peek: the full read that follows warns about what the policy replaced.
        with open_text(path, Replacements(str(path))) as f:
            first = next(csv.reader(f, delimiter="\t" if kind == "tsv" else ","), None)
    except (csv.Error, UnicodeDecodeError, *GZIP_ERRORS) as exc:
        raise DataError(f"{path}: cannot read the header ({one_line(exc)})") from None
    if first is None:
        raise DataError(f"{path}: file is empty")
    return [name.strip() for name in first]


def _pick(path: Path, names: Sequence[str], choices: Sequence[str], what: str) -> str | None:
    found = next((c for c in choices if c in names), None)
    if found is None and what:
        have = ", ".join(repr(n) for n in names) or "none"
        raise DataError(
            f"{path}: no {what} column (one of {', '.join(repr(c) for c in choices)}); "
            f"the file has {have}"
        )
    return found


def identifier(value: Any, where: str, column: str) -> str:
    """An id as a string: strings as written, integers in decimal; anything else refused
    (a float id such as ``12.0`` would silently fail to match ``12`` elsewhere)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    kind = "missing" if value is None else f"a {type(value).__name__}"
    raise DataError(f"{where}: {column!r} is {kind}; ids must be strings or integers")


def _text(value: Any, where: str, column: str, *, optional: bool = False) -> str:
    """A text (or title) as every reader of texts takes it: a string; a number is refused,
    not turned into text (:func:`~demitasse.data.files.check_text`)."""
    if value is None and optional:
        return ""
    return check_text(value, where, column)


# ---- documents and queries ------------------------------------------------------------------


def _jsonl_id_texts(
    path: Path, with_title: bool, replaced: Replacements
) -> Iterator[tuple[str, str, str, str]]:
    """``(where, id, title, text)`` of each non-blank JSON Lines record."""
    for lineno, line in iter_lines(path, replaced):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        record = parse_json_line(line, where)
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected a JSON object")
        for name in ("_id", "text"):
            if name not in record:
                raise DataError(f"{where}: missing field {name!r}")
        item_id = identifier(record["_id"], where, "_id")
        title = _text(record.get("title"), where, "title", optional=True) if with_title else ""
        at = f"line {lineno}"
        yield (
            where,
            replaced.text(item_id, at),
            replaced.text(title, at),
            replaced.text(_text(record["text"], where, "text"), at),
        )


def _table_id_texts(
    path: Path, kind: str, with_title: bool, replaced: Replacements
) -> Iterator[tuple[str, str, str, str]]:
    names = _header(path, kind)
    id_column = _pick(path, names, ID_COLUMNS, "id")
    assert id_column is not None
    _pick(path, names, ("text",), "text")
    title_column = _pick(path, names, ("title",), "") if with_title else None
    columns = [id_column, "text", *([title_column] if title_column else [])]
    for where, values in iter_table(path, columns):
        located = f"{path}: {where}"
        title = _text(values[2], located, "title", optional=True) if title_column else ""
        yield (
            located,
            replaced.text(identifier(values[0], located, id_column), where),
            replaced.text(title, where),
            replaced.text(_text(values[1], located, "text"), where),
        )


def read_id_texts(path: Path, *, with_title: bool, what: str) -> tuple[list[str], list[str]]:
    """Ids and texts of a documents or queries file, in file order; a document's text is
    ``title + " " + text``, stripped, as BEIR and MTEB embed it."""
    kind = _check_kind(path)
    with Replacements(str(path), "record") as replaced:
        rows = list(
            _jsonl_id_texts(path, with_title, replaced)
            if kind == "jsonl"
            else _table_id_texts(path, kind, with_title, replaced)
        )
    ids: list[str] = []
    texts: list[str] = []
    seen: dict[str, str] = {}
    for where, item_id, title, text in rows:
        if item_id in seen:
            first = seen[item_id][len(str(path)) + 1 :].strip()
            first = f"line {first}" if first.isdigit() else first
            raise DataError(f"{where}: duplicate _id {item_id!r} (first on {first})")
        seen[item_id] = where
        ids.append(item_id)
        texts.append(f"{title} {text}".strip() if title else text.strip())
    if not ids:
        raise DataError(f"{path}: no records ({what} is empty)")
    return ids, texts


# ---- relevance judgements -------------------------------------------------------------------


def _grade(value: Any, where: str) -> int:
    """An integer grade: an int, an integral float (Parquet often stores grades as floats), or
    the text of either ("2", "1.0")."""
    number = _number(value) if isinstance(value, str) else value
    if isinstance(number, int) and not isinstance(number, bool):
        return number
    if isinstance(number, float) and number.is_integer():
        return int(number)
    raise DataError(f"{where}: score {value!r} is not an integer")


def _number(text: str) -> int | float | str:
    """``text`` as the int or float it spells, else itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _tsv_judgements(path: Path, replaced: Replacements) -> Iterator[Judgement]:
    """BEIR's qrels TSV: query-id, corpus-id, score (+ ignored columns); header optional."""
    for lineno, line in iter_lines(path, replaced):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("\t")]
        where = f"{path}:{lineno}"
        if len(fields) < 3:
            raise DataError(
                f"{where}: expected 3 tab-separated fields "
                f"(query-id, corpus-id, score), got {len(fields)}"
            )
        if lineno == 1 and isinstance(_number(fields[2]), str):  # the header
            continue
        yield Judgement(where, fields[0], fields[1], _grade(fields[2], where))


def _table_judgements(path: Path, kind: str, replaced: Replacements) -> Iterator[Judgement]:
    # JSON Lines have no header: the first record's names stand for it.
    names = _first_record_keys(path) if kind == "jsonl" else _header(path, kind)
    columns = [
        _pick(path, names, QUERY_ID_COLUMNS, "query id"),
        _pick(path, names, DOC_ID_COLUMNS, "corpus id"),
        _pick(path, names, SCORE_COLUMNS, "score"),
    ]
    for where, (query_id, doc_id, grade) in iter_table(path, columns):  # type: ignore[arg-type]
        located = f"{path}: {where}"
        yield Judgement(
            located,
            replaced.text(identifier(query_id, located, str(columns[0])), where),
            replaced.text(identifier(doc_id, located, str(columns[1])), where),
            _grade(grade, located),
        )


def _first_record_keys(path: Path) -> list[str]:
    # A peek: the full read that follows warns about what the policy replaced.
    for lineno, line in iter_lines(path, Replacements(str(path))):
        if line.strip():
            record = parse_json_line(line, f"{path}:{lineno}")
            if not isinstance(record, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object")
            return list(record)
    raise DataError(f"{path}: file is empty")


def read_judgements(path: Path) -> list[Judgement]:
    """Every qrels row of ``path`` (a repeated pair is kept; the later grade wins later)."""
    kind = _check_kind(path)
    with Replacements(str(path), "record") as replaced:
        rows = list(
            _tsv_judgements(path, replaced)
            if kind == "tsv"
            else _table_judgements(path, kind, replaced)
        )
    if not rows:
        raise DataError(f"{path}: no relevance judgements")
    return rows
