"""UTF-8 text reading: invalid UTF-8 replaced under the Unicode policy
(:mod:`demitasse.data.unicode`), gzip problems turned into one-line DataErrors."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from demitasse.data.unicode import Replacements
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


def read_lines(path: Path, replaced: Replacements | None = None) -> list[str]:
    """All lines of a UTF-8 file (BOM dropped), without line ends or the final empty line.

    Invalid UTF-8 is replaced with U+FFFD (see :mod:`demitasse.data.unicode`), counted in
    ``replaced`` or, without it, in one warning for the file. Splits on ``\\n`` only:
    ``str.splitlines`` would also split on form feeds and Unicode line separators that can
    occur inside a sentence, silently shifting every later pair.
    """
    data = path.read_bytes()
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        with _replacements(path, replaced) as tally:
            lines = [tally.decode(raw, f"line {n}") for n, raw in enumerate(data.split(b"\n"), 1)]
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


class TextLines:
    """The lines of a UTF-8 text file (``*.gz`` gunzipped), decoded under the Unicode policy:
    iterable, with ``readline``, usable in ``with``. Lines keep their ends; they are split on
    line feeds only (the csv module handles ``\\r\\n`` itself)."""

    def __init__(self, path: Path, replaced: Replacements | None = None) -> None:
        # Closed by __exit__: this object is the context manager.
        self._file: gzip.GzipFile | BinaryIO = (
            gzip.open(path, "rb")  # noqa: SIM115
            if path.name.endswith(".gz")
            else path.open("rb")
        )
        self._own = replaced is None
        self._replaced = Replacements(str(path), "line") if replaced is None else replaced
        self._lineno = 0
        self._ended = False

    def readline(self) -> str:
        raw = self._file.readline()
        if not raw:
            self._ended = True
            return ""
        return self._line(raw)

    def __iter__(self) -> Iterator[str]:
        for raw in self._file:
            yield self._line(raw)
        self._ended = True

    def _line(self, raw: bytes) -> str:
        self._lineno += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = self._replaced.decode(raw, f"line {self._lineno}")
        return line.removeprefix("\ufeff") if self._lineno == 1 else line

    def __enter__(self) -> TextLines:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc_info: object) -> None:
        # The file's own tally warns once it was read to the end: a reader that stopped at the
        # header, or at an error, leaves the warning to the read that follows, if any.
        self._file.close()
        if self._own and self._ended and kind is None:
            self._replaced.warn()


def open_text(path: Path, replaced: Replacements | None = None) -> TextLines:
    """Open a UTF-8 text file for reading, transparently gunzipping ``*.gz``; invalid UTF-8 is
    replaced with U+FFFD, counted in ``replaced`` or, without it, in one warning for the file
    when it is closed after being read to the end."""
    return TextLines(path, replaced)


def iter_lines(path: Path, replaced: Replacements | None = None) -> Iterator[tuple[int, str]]:
    """Stream ``(line_number, line)`` pairs (1-based, line end removed) of a text or .gz file.

    Decodes line by line from bytes; invalid UTF-8 is replaced with U+FFFD, counted in
    ``replaced`` or, without it, in one warning for the file once it is read (or closed).
    """
    lineno = 0
    try:
        with (
            _replacements(path, replaced) as tally,
            gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb") as f,
        ):
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    line = tally.decode(raw, f"line {lineno}")
                line = line.rstrip("\r\n")
                yield lineno, line.removeprefix("\ufeff") if lineno == 1 else line
    except GZIP_ERRORS as exc:
        raise DataError(f"{path}: not a valid gzip file ({one_line(exc)})") from exc


@contextmanager
def _replacements(path: Path, replaced: Replacements | None) -> Iterator[Replacements]:
    """``replaced``, or a tally of the file's own that warns when the block ends."""
    if replaced is not None:
        yield replaced
        return
    with Replacements(str(path), "line") as own:
        yield own


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
