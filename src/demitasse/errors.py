"""User-facing errors.

Anything a user can cause (bad files, bad options, unknown models) raises a subclass of
:class:`DemitasseError` with a one-line message; the CLI prints it and exits with code 2.
:class:`DataError` and :class:`CompressorError` are also ``ValueError``s, the type
scikit-learn (and its estimator checks) expect for bad input to an estimator.
"""

from __future__ import annotations

#: What ``str.splitlines`` splits on, written as the escapes ``repr`` would use.
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def single_line(text: str) -> str:
    """``text`` with any line break written as an escape (``\\n``): a file name or a value
    the user typed may hold one, and must not break a message in two."""
    return text.translate(_LINE_BREAKS)


class DemitasseError(Exception):
    """A problem with the user's input or environment, explained in one line.

    Line breaks in the names and values a message quotes (a file name may hold one) are
    written as escapes (:func:`single_line`).
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(single_line(a) if isinstance(a, str) else a for a in args))


class DataError(DemitasseError, ValueError):
    """Missing, empty or malformed data files or arrays."""


class ModelNotFoundError(DemitasseError):
    """A model name that resolves to nothing loadable."""


class CompressorError(DemitasseError, ValueError):
    """Invalid use of a compressor, or a corrupt saved compressor."""


class ExportError(DemitasseError):
    """A model, compressor or quantizer that cannot be exported as asked."""


def one_line(exc: BaseException | str) -> str:
    """First line of an exception's message, so user-facing errors stay one line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
