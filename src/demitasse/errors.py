"""User-facing errors.

Anything a user can cause (bad files, bad options, unknown models) raises a subclass of
:class:`DemitasseError` with a one-line message; the CLI prints it and exits with code 2.
The type names the kind of mistake::

    DemitasseError
    ├── DataError                 missing, empty or malformed data files or arrays
    ├── ModelNotFoundError        a model name that resolves to nothing loadable
    ├── UnknownNameError          a name outside its vocabulary (a metric, a backend, an engine)
    ├── CompressorError           a misused compressor, quantiser or compressed model:
    │   ├── UnknownCompressionNameError  an unknown precision or compressor (an
    │   │                                UnknownNameError too)
    │   ├── ParameterError        a hyperparameter or option outside its valid values
    │   ├── NotFittedError        a compressor, quantiser or model used before it is fitted
    │   ├── SavedStateError       a saved directory that is missing, not what was asked for,
    │   │                         truncated, of another format version or inconsistent
    │   └── IncompatibleInputError  vectors or codes of another width, shape or dtype than
    │                               a fitted part takes (a DataError too)
    ├── ExportError               a model that cannot be exported as asked
    └── MissingExtraError         an optional library that is not installed (an ImportError)

:class:`DataError`, :class:`UnknownNameError` and :class:`CompressorError` (with its kinds)
are also ``ValueError``s, the type scikit-learn (and its estimator checks) expect for bad input
to an estimator; :class:`NotFittedError` is an ``AttributeError`` too, as scikit-learn's is
(and, raised by a compressor or quantiser where scikit-learn is installed, scikit-learn's
``NotFittedError`` itself).
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


class UnknownNameError(DemitasseError, ValueError):
    """A name that is not in its vocabulary: a precision, compressor, format or method that
    does not exist (the message lists those that do)."""


class CompressorError(DemitasseError, ValueError):
    """Invalid use of a compressor, a quantiser or a compressed model: the base of the kinds
    below (catch it to catch them all), raised itself for a misuse none of them names."""


class UnknownCompressionNameError(UnknownNameError, CompressorError):
    """A precision or compressor name that the registries do not hold: an unknown name, and a
    misused compressor (so that ``except CompressorError`` catches every bad precision, an
    unknown name as a size out of range)."""


class ParameterError(CompressorError):
    """A hyperparameter or option whose value is outside what it accepts, or an argument it
    does not take."""


class NotFittedError(CompressorError, AttributeError):
    """A compressor, quantiser or model used before it is fitted (scikit-learn's
    ``NotFittedError`` semantics: a ``ValueError`` and an ``AttributeError``)."""


class SavedStateError(CompressorError):
    """A saved directory or file that is missing, holds another kind of object than asked for,
    is truncated or corrupt, was written in another format version, or contradicts itself."""


class IncompatibleInputError(CompressorError, DataError):
    """Vectors or codes that a compressor, quantiser or index cannot take: another width than
    it was fitted on (or too few columns to fit it), codes of another shape or dtype than it
    makes."""


class ExportError(DemitasseError):
    """A model, compressor or quantizer that cannot be exported as asked."""


def one_line(exc: BaseException | str) -> str:
    """First line of an exception's message, so user-facing errors stay one line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


#: The optional libraries, by the name they are imported as: the package pip installs and the
#: extra of demitasse that brings it (``pip install 'demitasse[<extra>]'``).
OPTIONAL_LIBRARIES: dict[str, tuple[str, str]] = {
    "torch": ("torch", "train"),
    "transformers": ("transformers", "train"),
    "sentence_transformers": ("sentence-transformers", "train"),
    "onnx": ("onnx", "train"),
    "onnxscript": ("onnxscript", "train"),
    "sklearn": ("scikit-learn", "eval"),
    "scipy": ("scipy", "eval"),
    "threadpoolctl": ("threadpoolctl", "eval"),
    "matplotlib": ("matplotlib", "eval"),
    "faiss": ("faiss-cpu", "eval"),
    "fastapi": ("fastapi", "serve"),
    "uvicorn": ("uvicorn", "serve"),
    "openai": ("openai", "serve"),
    "lancedb": ("lancedb", "vectordb"),
    "ray": ("ray[data]", "ray"),
    "numba": ("numba", "fast"),
    "model2vec": ("model2vec", "static"),
    "wordllama": ("wordllama", "static"),
    "skeletoken": ("skeletoken", "static"),
}


class MissingExtraError(DemitasseError, ImportError):
    """An optional library that a feature needs is not installed (an ImportError too)."""


def missing_extra(
    exc: ImportError | str, feature: str, extra: str | None = None
) -> MissingExtraError:
    """The one-line error for ``feature`` needing the library ``exc`` failed to import (or the
    module named ``exc``): which package, and the extra that installs it; ``extra`` names the
    extra where the library is in several (scikit-learn: ``train`` and ``eval``)."""
    name = exc if isinstance(exc, str) else (exc.name or "")
    root = name.partition(".")[0]
    package, default = OPTIONAL_LIBRARIES.get(root, (root or "a library", None))
    chosen = extra or default
    install = f"pip install 'demitasse[{chosen}]'" if chosen else f"pip install {package}"
    return MissingExtraError(f"{feature} needs {package}, which is not installed: {install}")


def require_library(module: str, feature: str, extra: str | None = None) -> None:
    """Import ``module`` (a no-op once it is loaded), or raise :func:`missing_extra`'s error."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        known = (exc.name or "").partition(".")[0] in OPTIONAL_LIBRARIES
        raise missing_extra(exc if known else module, feature, extra) from None
