"""Hyperparameter plumbing shared by compressors and quantisers: building from a dict,
one-line errors for unknown names, a one-line repr and integer constraints for scikit-learn's
parameter validation."""

from __future__ import annotations

import inspect
from numbers import Integral
from typing import Any, Self

from demitasse.compress._estimator import Interval
from demitasse.errors import CompressorError


class Integers(Interval):
    """``Interval(Integral, left, right, closed=closed)`` of scikit-learn's parameter
    validation, without bools (as :func:`is_int`): ``dim=True`` is a mistake, not 1. For
    ``_parameter_constraints``."""

    def __init__(self, left: int | None, right: int | None = None, *, closed: str = "left") -> None:
        super().__init__(Integral, left, right, closed=closed)

    def is_satisfied_by(self, val: Any) -> bool:
        return not isinstance(val, bool) and super().is_satisfied_by(val)


class ParamsMixin:
    """Hyperparameters are ``__init__`` arguments stored verbatim as attributes (scikit-learn's
    convention), listed in signature order; shared by compressors and quantisers.

    Subclasses provide ``get_params``/``set_params`` and ``_check_params`` (one-line
    CompressorError for invalid values); this adds building from a dict and a one-line repr.
    """

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        names = []
        for p in list(sig.parameters.values())[1:]:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                # get_params/load rebuild objects from named arguments only.
                raise TypeError(f"{cls.__name__}.__init__ must not take *args or **kwargs")
            names.append(p.name)
        return names

    def _check_params(self) -> None:
        """Raise CompressorError for invalid hyperparameters."""
        raise NotImplementedError

    def _display_name(self) -> str:
        return type(self).__name__

    @classmethod
    def _construct(cls, params: dict[str, Any]) -> Self:
        """Build from a params dict, turning bad names into a one-line CompressorError."""
        known = cls._param_names()
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise CompressorError(
                f"{cls.__name__} got unknown parameter(s) {', '.join(unknown)}; "
                f"its parameters are: {', '.join(known) or 'none'}"
            )
        obj = cls(**params)
        obj._check_params()
        return obj

    def _unknown_param_error(self, name: str) -> CompressorError:
        known = self._param_names()
        return CompressorError(
            f"{self._display_name()} has no parameter {name!r}; "
            f"its parameters are: {', '.join(known) or 'none'}"
        )

    def __repr__(self) -> str:
        """One line, with the parameters that differ from their defaults."""
        defaults = {
            p.name: p.default
            for p in inspect.signature(type(self).__init__).parameters.values()
            if p.default is not p.empty
        }
        shown = [
            f"{name}={getattr(self, name)!r}"
            for name in self._param_names()
            if name not in defaults or not _same(getattr(self, name), defaults[name])
        ]
        return f"{type(self).__name__}({', '.join(shown)})"


class Params(ParamsMixin):
    """Hyperparameter plumbing of quantisers (compressors are scikit-learn estimators)."""

    def get_params(self) -> dict[str, Any]:
        """Hyperparameters, read from the ``__init__`` signature."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Self:
        """Set hyperparameters (takes effect at the next ``fit``)."""
        known = self._param_names()
        for name, value in params.items():
            if name not in known:
                raise self._unknown_param_error(name)
            setattr(self, name, value)
        return self

    def _validate_params(self) -> None:
        """Raise CompressorError for invalid hyperparameters; subclasses extend."""

    def _check_params(self) -> None:
        self._validate_params()


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError):
        return False
