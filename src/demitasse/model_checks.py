"""What a :class:`~demitasse.model.CompressedModel` accepts: its settings, a request for a
width and a precision, and the texts and vectors it is given. Each check fails in one line
(:class:`~demitasse.errors.DemitasseError` and its kinds), before any slow work starts."""

# ruff: noqa: N806  (scikit-learn convention: matrices are capitalised)
from __future__ import annotations

from typing import Any

import numpy as np

from demitasse.arrays import check_finite, check_float_vectors
from demitasse.compress import Compressor, Quantizer, check_precision
from demitasse.compress.vocabulary import accepts_width
from demitasse.data import check_texts
from demitasse.encoders.base import check_batch_size
from demitasse.errors import (
    DataError,
    DemitasseError,
    IncompatibleInputError,
    ParameterError,
)


def check_settings(layer: Any, batch_size: Any) -> None:
    """The layer cut and the batch size, positive integers (the layer may be None)."""
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 1):
        raise DemitasseError(f"layer must be a positive integer, got {layer!r}")
    check_batch_size(batch_size)


def check_fit_width(compressor: Compressor, vectors: np.ndarray) -> None:
    """The width ``compressor`` is asked for must exist: at most the vectors' own width, and,
    for a compressor that learns from the data, at most as many as there are fit vectors
    (beyond, its directions are arbitrary). A one-line error, not a silent cap."""
    dim = compressor.dim
    if dim is None:
        return
    n, width = vectors.shape
    if dim > width:
        raise ParameterError(
            f"dim {dim} exceeds the {width} dimensions of the vectors it is fitted on"
        )
    if compressor.learns_from_data and dim > n:
        raise ParameterError(
            f"fitting {compressor.method} to {dim} dimensions needs at least {dim} vectors; got {n}"
        )


def check_offered_precision(precision: Any, precisions: list[str]) -> str:
    """The canonical name of ``precision``, one of the ``precisions`` a model offers."""
    precision = check_precision(precision)
    if precision not in precisions:
        raise ParameterError(
            f"precision {precision!r} is not available: this model was fitted for "
            f"{', '.join(precisions)} (fit with precision={precision!r} to calibrate it)"
        )
    return precision


def check_dim(dim: Any) -> None:
    """A width asked for: a positive integer."""
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
        raise ParameterError(f"dim must be a positive integer, got {dim!r}")


def check_width(
    dim: int, precision: str, *, output_dim: int, matryoshka: bool, quantizer: Quantizer | None
) -> int:
    """``dim`` (checked by :func:`check_dim`) at ``precision``, if a model that produces
    ``output_dim`` dimensions (and every width below when it is ``matryoshka``) with the
    fitted ``quantizer`` offers it."""
    # Not ``dim in model.dims``: a corrupt config may claim a width of 10**12.
    if dim > output_dim or (dim != output_dim and not matryoshka):
        supported = f"1..{output_dim}" if matryoshka else str(output_dim)
        raise ParameterError(
            f"dim {dim} is not available: this model produces {supported} dimensions"
        )
    if (
        quantizer is not None
        and precision == quantizer.precision
        and not accepts_width(quantizer, dim)
    ):
        rotation = getattr(quantizer, "rotation", "none")
        what = f"{quantizer.family} codes span"
        if rotation != "none":
            what = f"{rotation} rotation of the {quantizer.family} codes spans"
        raise ParameterError(f"dim {dim} is not available at precision {precision}: the "
                             f"{what} all {output_dim} dimensions")  # fmt: skip
    return int(dim)


def check_vectors(vectors: Any, expected: int | None) -> np.ndarray:
    """``vectors`` as a non-empty, finite 2-D array of floats ``expected`` wide (None: any
    width); integers are refused, not read as floats."""
    if isinstance(vectors, str | bytes) or vectors is None:
        raise DataError("vectors must be a 2-D array of numbers")
    try:
        X = np.asarray(vectors)
    except (TypeError, ValueError) as exc:
        raise DataError(f"vectors must be a 2-D array of numbers ({exc})") from None
    if X.ndim != 2 or X.shape[0] == 0 or X.dtype.kind not in "fiu":
        raise DataError(f"vectors must be a non-empty 2-D array of numbers, got {X.shape}")
    check_float_vectors(X.dtype, "vectors")  # int8 codes are no vectors
    if expected is not None and X.shape[1] != expected:
        raise IncompatibleInputError(
            f"vectors have {X.shape[1]} dimensions but this model takes {expected}"
        )
    # NaN, inf, or a float64 too large for float32 (hashing and compressing cast to it).
    check_finite(X, name="vectors")
    return X


def check_text_list(texts: Any, what: str) -> list[str]:
    """``texts`` as a non-empty list of strings, ``what`` naming them in an error."""
    texts = check_texts(texts, what)
    if not texts:
        raise DataError(f"{what} are empty")
    return texts


def is_text_list(value: Any) -> bool:
    """Whether ``value`` is a non-empty list or tuple of strings (texts to encode)."""
    return (
        isinstance(value, list | tuple)
        and len(value) > 0
        and all(isinstance(item, str) for item in value)
    )
