"""The names users give precisions and compressors, resolved in one place.

Precisions are the quantiser registry's (:mod:`demitasse.compress.quantize`): a plain family
is its own name (``float32``, ``int8``, ``binary``), a sized family carries its size
(``pq16``: 16-byte product codes). Compressors are ``"none"`` (the encoder's own vectors), the
registered methods, which are fitted on vectors, and presets: a method with preset parameters
(``pca-abtt``); a built compressor (a pooler, trained with its encoder) is refused by name.
The command line, :class:`~demitasse.model.CompressedModel`, the evaluation grid and the tune
sweep all resolve names here, so they accept the same ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from demitasse.compress.base import (
    Compressor,
    built_compressor_error,
    built_compressor_names,
    compressor_names,
    make_compressor,
)
from demitasse.compress.quantize import (
    Quantizer,
    make_quantizer,
    quantizer_names,
    resolve_precision,
)
from demitasse.errors import (
    IncompatibleInputError,
    ParameterError,
    UnknownCompressionNameError,
    UnknownNameError,
)

# ---- precisions --------------------------------------------------------------------------------

#: A width to compare the plain precisions' storage at (any width gives the same order).
_PROBE_DIM = 64
#: Characters of a refused name quoted in its message.
_SHOWN_CHARS = 40


def check_precision(precision: Any) -> str:
    """The canonical name of ``precision`` (``"pq08"`` → ``"pq8"``), its size checked; a
    one-line :class:`UnknownNameError` for an unknown name, :class:`ParameterError` for a size
    out of range."""
    return make_quantizer(precision).precision


def accepts_width(quantizer: Quantizer, dim: int) -> bool:
    """Whether ``quantizer`` codes ``dim`` columns: a fitted one that mixes all its fitted
    width (a rotation, codebooks) takes exactly that width, no Matryoshka prefix."""
    try:
        quantizer._check_width(int(dim))
    except IncompatibleInputError:
        return False
    return True


def plain_precisions() -> list[str]:
    """The precisions without a size (float32, int8, binary), widest storage first."""
    plain = []
    for family in quantizer_names():
        try:
            resolve_precision(family)
        except UnknownNameError:  # a sized family: its name needs a size
            continue
        plain.append(family)
    return sorted(plain, key=precision_sort_key)


def calibration_free_precisions() -> list[str]:
    """The plain precisions whose quantiser needs no fit (float32, binary sign bits): every
    model offers them."""
    return list(_calibration_free(tuple(quantizer_names())))


@lru_cache(maxsize=8)
def _calibration_free(families: tuple[str, ...]) -> tuple[str, ...]:
    """:func:`calibration_free_precisions` for the registry holding ``families`` (a model asks
    at every request; the answer changes only when a family is registered)."""
    return tuple(p for p in plain_precisions() if not make_quantizer(p).needs_fit)


@lru_cache(maxsize=1024)
def precision_sort_key(precision: str) -> tuple[int, int, str, int]:
    """The order of precisions in lists, tables and plots: the plain ones by storage, widest
    first (float32, int8, binary), then the sized ones by family and size (pq8, pq16, rq8),
    then names that are no precision, by name."""
    try:
        quantizer = make_quantizer(precision)
    except (ValueError, TypeError):  # UnknownNameError and ParameterError among them
        return (2, 0, str(precision), 0)
    if quantizer.size_param is None:
        return (0, -quantizer.bytes_per_vector(_PROBE_DIM), quantizer.family, 0)
    return (1, 0, quantizer.family, int(getattr(quantizer, quantizer.size_param)))


def sort_precisions(precisions: Iterable[str]) -> list[str]:
    """``precisions`` without repeats, in :func:`precision_sort_key` order."""
    return sorted(dict.fromkeys(precisions), key=precision_sort_key)


# ---- compressors -------------------------------------------------------------------------------

#: The name of no compressor: the encoder's own vectors at full width.
NO_COMPRESSOR = "none"
#: A preset parameter set from the input width when the compressor is built for it.
AUTO = "auto"
#: Names of a registered method with preset parameters.
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "pca-whiten": ("pca", {"whiten": True}),
    "pca-abtt": ("pca", {"abtt": AUTO}),
}


def compressor_choices() -> list[str]:
    """Every compressor name a user may give: ``none``, the registered methods (all fitted on
    vectors; the built ones, a pooler, are not named), then the presets."""
    return [NO_COMPRESSOR, *compressor_names(), *PRESETS]


def resolve_compressor(name: Any) -> tuple[str | None, dict[str, Any]]:
    """The registered method a compressor name builds and its preset parameters (values may
    be :data:`AUTO`: see :func:`resolve_auto`); ``(None, {})`` for ``none``."""
    if not isinstance(name, str):
        raise UnknownCompressionNameError(
            f"a compressor name is a string such as 'pca', not {name!r}"
        )
    if name == NO_COMPRESSOR:
        return None, {}
    if name in PRESETS:
        method, params = PRESETS[name]
        return method, dict(params)
    if name in compressor_names():
        return name, {}
    if name in built_compressor_names():
        raise built_compressor_error(name)
    known = ", ".join(compressor_choices())
    raise UnknownCompressionNameError(f"unknown compressor {name[:_SHOWN_CHARS]!r}; known: {known}")


def named_compressor(
    name: str, dim: int | None, params: dict[str, Any]
) -> tuple[Compressor | None, dict[str, Any]]:
    """The compressor ``name`` builds for width ``dim`` with ``params`` over its preset ones,
    and the parameters left to :func:`resolve_auto` at fit time (checked resolvable now)."""
    method, preset = resolve_compressor(name)
    if method is None:
        if params:
            raise ParameterError("compressor_params need a compressor; 'none' has none")
        return None, {}
    params = {**preset, **params}
    auto = auto_params(params)
    concrete = {key: value for key, value in params.items() if key not in auto}
    compressor = make_compressor(method, dim=dim, **concrete)
    if auto:
        resolve_auto(auto, 100)  # one that cannot be resolved fails now
    return compressor, auto


def auto_params(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``params`` left to :func:`resolve_auto`."""
    return {key: value for key, value in params.items() if _is_auto(value)}


def resolve_auto(params: dict[str, Any], input_dim: int) -> dict[str, Any]:
    """``params`` with :data:`AUTO` values set for ``input_dim``-dimensional inputs: ABTT
    removes about d/100 dominating directions (Mu & Viswanath, 2018)."""
    resolved = dict(params)
    if _is_auto(resolved.get("abtt")):
        resolved["abtt"] = max(1, int(input_dim) // 100)
    left = sorted(auto_params(resolved))
    if left:
        raise ParameterError(f"{left[0]}={AUTO} has no automatic value; give a number")
    return resolved


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO
