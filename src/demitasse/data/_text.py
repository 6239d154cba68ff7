"""UTF-8 text reading that turns decoding and gzip problems into one-line DataErrors."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from demitasse.errors import DataError, one_line

# What a truncated or non-gzip ``*.gz`` file raises while being read.
GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


def require_file(path: str | Path) -> Path:
    """``path`` as a Path, or DataError if it is missing or not a regular file."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if not path.is_file():
        raise DataError(f"{path}: not a file")
    return path


def read_lines(path: Path) -> list[str]:
    """All lines of a UTF-8 file (BOM dropped), without line ends or the final empty line.

    Splits on ``\\n`` only: ``str.splitlines`` would also split on form feeds and Unicode line
    separators that can occur inside a sentence, silently shifting every later pair.
    """
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line} is not valid UTF-8") from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def open_text(path: Path) -> TextIO:
    """Open a UTF-8 text file for reading, transparently gunzipping ``*.gz``.

    ``newline="\\n"``: split on line feeds only; the csv module handles ``\\r\\n`` itself.
    """
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="\n")
    return path.open("r", encoding="utf-8-sig", newline="\n")


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Stream ``(line_number, line)`` pairs (1-based, line end removed) of a text or .gz file.

    Decodes line by line from bytes so a decoding error names the right line.
    """
    lineno = 0
    try:
        with gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb") as f:
            for lineno, raw in enumerate(f, start=1):
                line = raw.decode("utf-8").rstrip("\r\n")
                yield lineno, line.removeprefix("\ufeff") if lineno == 1 else line
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: line {lineno} is not valid UTF-8") from exc
    except GZIP_ERRORS as exc:
        raise DataError(f"{path}: not a valid gzip file ({one_line(exc)})") from exc


def parse_json_line(line: str, where: str) -> Any:
    """One JSON Lines record, or a one-line DataError that starts with ``where``."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise DataError(f"{where}: invalid JSON (nested too deeply)") from None
    except ValueError as exc:  # a number of more than 4300 digits
        raise DataError(f"{where}: invalid JSON ({one_line(exc)})") from None
