"""Text that is not valid Unicode, handled one way wherever text comes in.

Invalid UTF-8 (in a file, a request body or a command-line argument) and lone surrogates (a
JSON ``"\\ud800"`` escape, or a Python string holding one) are replaced with U+FFFD, the
Unicode replacement character, and each source (a file, a list of texts, a request) logs one
warning that counts them. Bytes are decoded as Python's ``errors="replace"`` does (one U+FFFD
per maximal invalid subsequence, as the Unicode standard recommends); a lone surrogate becomes
one U+FFFD. So a text with a replaced character embeds exactly as the same text written with
U+FFFD, and every input row still gives one output row.

Valid text costs one check per text: ``str.isascii`` (constant time) and, for other strings,
one UTF-8 encode that stops at the first surrogate.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)

REPLACEMENT = "\ufffd"
_ENCODED_REPLACEMENT = REPLACEMENT.encode("utf-8")
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_valid_text(text: str) -> bool:
    """Whether ``text`` holds no lone surrogate, i.e. can be written as UTF-8."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def replace_surrogates(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many were."""
    if is_valid_text(text):
        return text, 0
    return _SURROGATE.subn(REPLACEMENT, text)


def decode_utf8(data: bytes) -> tuple[str, int]:
    """``data`` decoded as UTF-8, each invalid sequence replaced by U+FFFD, and how many were."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
    # U+FFFD written in the data decodes to itself; \xef never continues a sequence, so each
    # of its encodings in the data is one valid U+FFFD of the text.
    return text, text.count(REPLACEMENT) - data.count(_ENCODED_REPLACEMENT)


def argument_text(value: str) -> tuple[str, int]:
    """A command-line argument under the policy. Python hands invalid UTF-8 bytes of ``argv``
    over as surrogate escapes (``b"\\xff"`` → ``"\\udcff"``, PEP 383): they are turned back
    into the bytes and decoded as a file's bytes are, so an argument and a file line holding
    the same bytes give the same text."""
    if is_valid_text(value):
        return value, 0
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte
        return replace_surrogates(value)
    return decode_utf8(raw)


class Replacements:
    """What the policy replaced in one source, said in one warning when the source is done
    (at the end of a ``with`` block, or by :meth:`warn`).

    ``where`` arguments name the place in the source (``"line 3"``, ``"item 0"``); the warning
    counts the characters replaced, the places they were in and names the first place.
    """

    def __init__(self, source: str, unit: str = "text") -> None:
        self.source = source
        self.unit = unit
        self.characters = 0
        self.places = 0
        self.first: str | None = None
        self._last: str | None = None
        self._warned = False

    def __enter__(self) -> Replacements:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.warn()

    def count(self, characters: int, where: str) -> None:
        if not characters:
            return
        self.characters += characters
        if where != self._last:
            self.places += 1
            self._last = where
        if self.first is None:
            self.first = where

    def text(self, text: str, where: str) -> str:
        """``text`` with its lone surrogates replaced (counted here)."""
        if is_valid_text(text):
            return text
        cleaned, count = _SURROGATE.subn(REPLACEMENT, text)
        self.count(count, where)
        return cleaned

    def decode(self, data: bytes, where: str) -> str:
        """``data`` decoded as UTF-8 under the policy (counted here)."""
        text, count = decode_utf8(data)
        self.count(count, where)
        return text

    def argument(self, value: str, where: str) -> str:
        """A command-line argument under the policy (see :func:`argument_text`)."""
        text, count = argument_text(value)
        self.count(count, where)
        return text

    def message(self) -> str | None:
        """The warning, or None when nothing was replaced."""
        if not self.characters:
            return None
        n, places = self.characters, self.places
        return (
            f"{self.source}: replaced {n} {'character' if n == 1 else 'characters'} that "
            f"{'is' if n == 1 else 'are'} not valid Unicode (invalid UTF-8 or a lone "
            f"surrogate) with U+FFFD, in {places} {self.unit}{'' if places == 1 else 's'} "
            f"(the first: {self.first})"
        )

    def warn(self) -> None:
        """Log the warning, once, if anything was replaced."""
        message = self.message()
        if message is not None and not self._warned:
            self._warned = True
            logger.warning("%s", message)


def replace_in_texts(texts: Sequence[Any], what: str = "texts") -> list[Any]:
    """``texts`` under the policy, with one warning naming ``what`` if anything was replaced.
    The usual case (every text valid) returns ``texts`` itself when it is a list; items that
    are not strings are left to the caller's checks."""
    bad = [
        i
        for i, text in enumerate(texts)  # isascii first: constant time, and mostly True
        if isinstance(text, str) and not text.isascii() and not is_valid_text(text)
    ]
    out = texts if isinstance(texts, list) else list(texts)
    if not bad:
        return out
    out = list(out)
    with Replacements(what) as replaced:
        for i in bad:
            out[i] = replaced.text(out[i], f"item {i}")
    return out


def arrow_texts(column: Any, replaced: Replacements, first_row: int = 0) -> list[Any]:
    """A Parquet / Arrow string column as Python values, invalid UTF-8 (which Arrow does not
    check when it reads a file) decoded under the policy; ``first_row`` numbers its rows."""
    try:
        return list(column.to_pylist())
    except UnicodeDecodeError:
        pass
    import pyarrow as pa

    binary = pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary()
    values = column.cast(binary).to_pylist()
    return [
        replaced.decode(value, f"row {first_row + i}") if isinstance(value, bytes) else value
        for i, value in enumerate(values)
    ]
