"""scikit-learn's estimator plumbing where scikit-learn is installed, a small stand-in where it
is not (the core install: loading a model directory and compressing vectors needs no
scikit-learn).

Compressors are scikit-learn transformers: with scikit-learn installed these are its own
classes, so ``clone``, ``Pipeline``, ``GridSearchCV`` and its estimator checks work. Without
it, the stand-ins give what demitasse itself calls: ``get_params``/``set_params`` from the
``__init__`` signature, parameter validation against ``_parameter_constraints`` (``Interval``,
``StrOptions``, ``"boolean"``, ``None``, types) with scikit-learn's messages, and
``InvalidParameterError``. :func:`not_fitted_error` is demitasse's
:class:`~demitasse.errors.NotFittedError`, and scikit-learn's where it is installed.
"""

from __future__ import annotations

import inspect
import operator
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, Self

import numpy as np

from demitasse.errors import NotFittedError

__all__ = [
    "BaseEstimator",
    "ClassNamePrefixFeaturesOutMixin",
    "Interval",
    "InvalidParameterError",
    "StrOptions",
    "Tags",
    "TransformerMixin",
    "has_sklearn",
    "not_fitted_error",
]


class _InvalidParameterError(ValueError, TypeError):
    """A parameter of the wrong type or value (scikit-learn's ``InvalidParameterError``)."""


class _Interval:
    """``Interval(Integral | Real, left, right, closed=...)``: as scikit-learn's."""

    def __init__(self, type: type, left: Any, right: Any, *, closed: str) -> None:
        if type not in (Integral, Real) or closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"invalid interval: {type}, closed={closed!r}")
        self.type, self.left, self.right, self.closed = type, left, right, closed

    def __contains__(self, val: Any) -> bool:
        if not isinstance(val, Integral) and np.isnan(val):
            return False
        below = operator.lt if self.closed in ("left", "both") else operator.le
        above = operator.gt if self.closed in ("right", "both") else operator.ge
        left = -np.inf if self.left is None else self.left
        right = np.inf if self.right is None else self.right
        return not below(val, left) and not above(val, right)

    def is_satisfied_by(self, val: Any) -> bool:
        return isinstance(val, self.type) and val in self

    def __str__(self) -> str:
        integral = self.type is Integral
        left = "-inf" if self.left is None else self.left if integral else float(self.left)
        right = "inf" if self.right is None else self.right if integral else float(self.right)
        return (
            f"{'an int' if integral else 'a float'} in the range "
            f"{'[' if self.closed in ('left', 'both') else '('}{left}, "
            f"{right}{']' if self.closed in ('right', 'both') else ')'}"
        )


class _StrOptions:
    """A set of allowed strings (scikit-learn's ``StrOptions``)."""

    def __init__(self, options: set[str]) -> None:
        self.options = options

    def is_satisfied_by(self, val: Any) -> bool:
        return isinstance(val, str) and val in self.options

    def __str__(self) -> str:
        return f"a str among {{{', '.join(repr(o) for o in sorted(self.options))}}}"


class _Constraint:
    def __init__(self, test: Any, text: str) -> None:
        self.is_satisfied_by, self.text = test, text

    def __str__(self) -> str:
        return self.text


def _constraint(spec: Any) -> Any:
    if spec is None:
        return _Constraint(lambda v: v is None, "None")
    if spec == "boolean":
        return _Constraint(
            lambda v: isinstance(v, bool | np.bool_),
            "an instance of 'bool' or an instance of 'numpy.bool'",
        )
    if isinstance(spec, type):
        return _Constraint(lambda v: isinstance(v, spec), f"an instance of {spec.__name__!r}")
    if hasattr(spec, "is_satisfied_by"):
        return spec
    raise TypeError(f"unsupported parameter constraint {spec!r}")


def _validate(constraints: dict[str, list[Any]], params: dict[str, Any], caller: str) -> None:
    for name, value in params.items():
        if name not in constraints:
            continue
        options = [_constraint(spec) for spec in constraints[name]]
        if any(option.is_satisfied_by(value) for option in options):
            continue
        texts = [str(option) for option in options]
        allowed = texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} or {texts[-1]}"
        raise _InvalidParameterError(
            f"The {name!r} parameter of {caller} must be {allowed}. Got {value!r} instead."
        )


@dataclass
class _TransformerTags:
    preserves_dtype: list[str] = field(default_factory=lambda: ["float64"])


@dataclass
class _Tags:
    transformer_tags: _TransformerTags | None = None


class _BaseEstimator:
    """Hyperparameters are the ``__init__`` arguments, stored as attributes of the same name."""

    _parameter_constraints: dict[str, list[Any]]

    @classmethod
    def _get_param_names(cls) -> list[str]:
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
        return sorted(p.name for p in parameters if p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self._get_param_names():
            value = getattr(self, key)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{key}__{k}", v) for k, v in value.get_params().items())
            out[key] = value
        return out

    def set_params(self, **params: Any) -> Self:
        valid = set(self._get_param_names())
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"Invalid parameter {key!r} for estimator {self}.")
            setattr(self, key, value)
        return self

    def _validate_params(self) -> None:
        _validate(self._parameter_constraints, self.get_params(deep=False), type(self).__name__)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __sklearn_tags__(self) -> _Tags:
        return _Tags()


class _TransformerMixin:
    def __sklearn_tags__(self) -> _Tags:
        tags: _Tags = super().__sklearn_tags__()  # type: ignore[misc]
        tags.transformer_tags = _TransformerTags()
        return tags


class _ClassNamePrefixFeaturesOutMixin:
    _n_features_out: int

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(self._n_features_out)], dtype=object)


def has_sklearn() -> bool:
    """Whether these names are scikit-learn's own classes."""
    return _HAS_SKLEARN


def not_fitted_error(message: str) -> NotFittedError:
    """The error for a compressor or quantiser used before ``fit``: demitasse's
    :class:`~demitasse.errors.NotFittedError` (one line, exit code 2 on the command line) and,
    where scikit-learn is installed, its ``NotFittedError`` too, which ``check_is_fitted``
    raises and scikit-learn code catches."""
    return _NOT_FITTED(message)


try:
    from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
    from sklearn.exceptions import NotFittedError as _SklearnNotFittedError
    from sklearn.utils import Tags
    from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

    class _BothNotFittedError(NotFittedError, _SklearnNotFittedError):
        """demitasse's NotFittedError and scikit-learn's."""

    _NOT_FITTED: type[NotFittedError] = _BothNotFittedError
    _HAS_SKLEARN = True
except ImportError:
    BaseEstimator = _BaseEstimator
    ClassNamePrefixFeaturesOutMixin = _ClassNamePrefixFeaturesOutMixin
    TransformerMixin = _TransformerMixin
    Tags = _Tags
    Interval = _Interval
    InvalidParameterError = _InvalidParameterError
    StrOptions = _StrOptions
    _NOT_FITTED = NotFittedError
    _HAS_SKLEARN = False
