"""User-supplied files: scored sentence pairs and unlabeled text."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.data._tables import file_stem, iter_table, table_kind
from demitasse.data._text import iter_lines, require_file
from demitasse.data.pairs import ScoredPairs
from demitasse.data.unicode import Replacements, replace_in_texts
from demitasse.errors import DataError


def _nonempty_file(path: str | Path) -> Path:
    path = require_file(path)
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")
    return path


def _score(value: Any, path: Path, where: str, column: str) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{path}: {where}: {column!r} is missing")
    if isinstance(value, bool):  # float(True) == 1.0 would hide a wrong column
        raise DataError(f"{path}: {where}: {column!r} is {value!r}, not a number")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{path}: {where}: {column!r} is {value!r}, not a number") from None
    except OverflowError:  # an integer of more than 308 digits
        score = math.inf
    if not math.isfinite(score):
        raise DataError(f"{path}: {where}: {column!r} is {value!r}, not a finite number")
    return score


def check_text(value: Any, where: str, column: str) -> str:
    """``value`` if it is a string, else the one-line DataError of every reader of texts in
    files (fit, encode, embed, index, eval, tune): a number, an object, a list, bytes or null
    is no text, and never turned into one with ``str()`` (a JSON ``"text": 7`` is a mistake in
    the file, not the sentence "7"). ``where`` locates it (``"path: line 7"``)."""
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        raise DataError(f"{where}: {column!r} holds {kind}, not a string")
    return value


def _sentence(value: Any, path: Path, where: str, column: str, replaced: Replacements) -> str:
    return replaced.text(check_text(value, f"{path}: {where}", column), where)


def load_scored_pairs(
    path: str | Path,
    sentence1_column: str = "sentence1",
    sentence2_column: str = "sentence2",
    score_column: str = "score",
    name: str | None = None,
) -> ScoredPairs:
    """Scored pairs from a .csv / .tsv (with header), .jsonl(.gz) or .parquet file."""
    path = _nonempty_file(path)
    columns = [sentence1_column, sentence2_column, score_column]
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    with Replacements(str(path), "record") as replaced:
        for where, (a, b, score) in iter_table(path, columns):
            s1.append(_sentence(a, path, where, sentence1_column, replaced))
            s2.append(_sentence(b, path, where, sentence2_column, replaced))
            scores.append(_score(score, path, where, score_column))
    if not scores:
        raise DataError(f"{path}: no rows")
    return ScoredPairs(name or file_stem(path), s1, s2, np.asarray(scores))


def read_texts(
    path: str | Path,
    column: str | None = None,
    limit: int | None = None,
    *,
    aligned: bool = False,
) -> list[str]:
    """Unlabeled texts, stripped, blanks skipped, at most ``limit``.

    ``.txt`` / ``.txt.gz`` hold one text per line (a ``column`` given for one is refused: it
    has none); .jsonl(.gz), .parquet, .csv and .tsv files hold them in ``column`` (default
    ``"text"``). ``aligned=True`` keeps one text per row, in order (blank rows as
    ``""``), so outputs line up with the input; a missing or non-string value is then an error
    rather than skipped or turned into text with ``str()``. Invalid UTF-8 and lone surrogates
    become U+FFFD, with one warning for the file (:mod:`demitasse.data.unicode`).
    """
    if limit is not None and limit < 1:
        raise DataError(f"text limit must be a positive number, got {limit}")
    path = _nonempty_file(path)
    if column is not None and _is_text_file(path):
        raise DataError(
            f"{path} is a text file (one text a line): it has no column {column!r}; a column "
            "applies to .jsonl, .parquet, .csv and .tsv inputs"
        )
    column = column or "text"
    with Replacements(str(path), "line" if _is_text_file(path) else "record") as replaced:
        values = _values(path, column, replaced)
        texts = _texts_of(values, (path, column), limit, aligned, replaced)
    if not any(texts):  # blank lines only (kept as "" when aligned) are no texts either
        raise DataError(f"{path}: no text found")
    return texts


def _values(path: Path, column: str, replaced: Replacements) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` of each line of a text file or each row of a table's ``column``."""
    if _is_text_file(path):
        return ((f"line {n}", line) for n, line in iter_lines(path, replaced))
    if table_kind(path) is not None:
        return ((where, value) for where, (value,) in iter_table(path, [column]))
    raise DataError(
        f"{path}: unsupported file type; use .txt, .txt.gz, .jsonl, .jsonl.gz, .parquet, "
        ".csv or .tsv"
    )


def _is_text_file(path: Path) -> bool:
    return path.name.lower().removesuffix(".gz").endswith(".txt")


def _texts_of(
    values: Iterator[tuple[str, Any]],
    source: tuple[Path, str],
    limit: int | None,
    aligned: bool,
    replaced: Replacements,
) -> list[str]:
    path, column = source
    texts: list[str] = []
    for where, value in values:
        if value is None and not aligned:
            continue
        text = replaced.text(check_text(value, f"{path}: {where}", column), where).strip()
        if text or aligned:
            texts.append(text)
            if limit is not None and len(texts) >= limit:
                break
    return texts


def read_corpus(path: str | Path, limit: int | None = None) -> list[str]:
    """Unique texts of a text file or of every ``*.txt`` / ``*.txt.gz`` file in a folder (sorted
    by name), in first-seen order, at most ``limit``."""
    path = Path(path).expanduser()
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.name.lower().removesuffix(".gz").endswith(".txt")
        )
        if not files:
            raise DataError(f"{path}: no .txt or .txt.gz files in this folder")
    else:
        files = [path]
    texts: dict[str, None] = {}
    for file in files:
        texts.update(dict.fromkeys(read_texts(file)))
        if limit is not None and len(texts) >= limit:
            break
    return list(texts)[:limit]


def check_texts(texts: Any, what: str = "texts") -> list[str]:
    """``texts`` as a list of strings, or a one-line DataError: a single string, a non-iterable
    or an item that is not a string (a number, a dict, bytes) is refused, never ``str()``-ed.
    Lone surrogates are replaced with U+FFFD, with one warning that counts them
    (:mod:`demitasse.data.unicode`)."""
    if isinstance(texts, str | bytes):
        raise DataError(f"{what} must be a list of strings, not a single string")
    try:
        items = list(texts)
    except TypeError:
        raise DataError(f"{what} must be a list of strings, got {type(texts).__name__}") from None
    bad = next((i for i, text in enumerate(items) if not isinstance(text, str)), None)
    if bad is not None:
        kind = type(items[bad]).__name__
        raise DataError(f"{what}: item {bad} is a {kind}, not a string")
    # Lone surrogates (a JSON "\ud800", a string built in Python) become U+FFFD, with one
    # warning: a tokenizer would refuse them, and no output file can hold them.
    return replace_in_texts(items, what)
