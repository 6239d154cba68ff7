"""User-facing errors.

Anything a user can cause (bad files, bad options, unknown models) raises a subclass of
:class:`DemitasseError` with a one-line message; the CLI prints it and exits with code 2.
:class:`DataError` and :class:`CompressorError` are also ``ValueError``s, the type
scikit-learn (and its estimator checks) expect for bad input to an estimator.
"""

from __future__ import annotations


class DemitasseError(Exception):
    """A problem with the user's input or environment, explained in one line."""


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
