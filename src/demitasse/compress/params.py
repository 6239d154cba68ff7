"""Hyperparameter plumbing shared by compressors and quantisers: building from a dict,
one-line errors for unknown names, a one-line repr, integer constraints for scikit-learn's
parameter validation, and groups of settings held by one parameter (:class:`ParamGroup`)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import Any, ClassVar, Self

from demitasse.compress._estimator import Interval, has_sklearn
from demitasse.errors import CompressorError


class Integers(Interval):
    """``Interval(Integral, left, right, closed=closed)`` of scikit-learn's parameter
    validation, without bools (as :func:`is_int`): ``dim=True`` is a mistake, not 1. For
    ``_parameter_constraints``."""

    def __init__(self, left: int | None, right: int | None = None, *, closed: str = "left") -> None:
        super().__init__(Integral, left, right, closed=closed)

    def is_satisfied_by(self, val: Any) -> bool:
        return not isinstance(val, bool) and super().is_satisfied_by(val)


@dataclass(frozen=True)
class ParamGroup:
    """Several settings held by one hyperparameter (``training=TrainingSettings(...)``).

    A frozen dataclass: scikit-learn's ``clone`` deep-copies it, ``==`` compares it, and
    ``config.json`` holds it as a dict of its fields (:meth:`as_dict`, :meth:`from_dict`).
    ``constraints`` gives each field's valid values as scikit-learn's
    ``_parameter_constraints`` do; the estimator checks them when it checks its own. The
    parameter's default, None, stands for the estimator's default group (see
    :attr:`ParamsMixin._param_groups`), and a field left None for that group's value.
    """

    #: scikit-learn parameter constraints of the fields, by name.
    constraints: ClassVar[dict[str, list[Any]]] = {}

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def as_dict(self) -> dict[str, Any]:
        """The fields, in declaration order: how ``config.json`` holds the group."""
        return {name: getattr(self, name) for name in self.field_names()}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], owner: str) -> Self:
        """The group of ``values`` (fields left out keep their defaults); an unknown field is
        a one-line CompressorError naming ``owner``."""
        unknown = sorted(set(values) - set(cls.field_names()))
        if unknown:
            raise CompressorError(
                f"{owner}: {cls.__name__} has no setting(s) {', '.join(unknown)}; "
                f"its settings are: {', '.join(cls.field_names())}"
            )
        return cls(**values)

    def __repr__(self) -> str:
        """One line, with the fields that differ from their defaults."""
        defaults = type(self)()
        shown = [
            f"{name}={value!r}"
            for name, value in self.as_dict().items()
            if not _same(value, getattr(defaults, name))
        ]
        return f"{type(self).__name__}({', '.join(shown)})"


def check_group(group: ParamGroup, constraints: dict[str, list[Any]], caller: str) -> None:
    """Check ``group``'s fields against ``constraints`` with scikit-learn's parameter
    validation (its stand-in without scikit-learn): InvalidParameterError, in the words of
    ``caller``'s own parameters."""
    if has_sklearn():
        from sklearn.utils._param_validation import validate_parameter_constraints
    else:
        from demitasse.compress._estimator import _validate as validate_parameter_constraints
    validate_parameter_constraints(constraints, group.as_dict(), caller)


class ParamsMixin:
    """Hyperparameters are ``__init__`` arguments stored verbatim as attributes (scikit-learn's
    convention), listed in signature order; shared by compressors and quantisers.

    Subclasses provide ``get_params``/``set_params`` and ``_check_params`` (one-line
    CompressorError for invalid values); this adds building from a dict and a one-line repr.

    A parameter named in ``_param_groups`` holds a :class:`ParamGroup` (None: the default group
    given there). ``__init__`` takes the group itself. Wherever parameters go by name
    (``make_compressor``, the command line's ``method:key=value``, ``load``, and ``set_params``
    where a subclass passes them through :meth:`_grouped`) the group may also be a dict of its
    fields, and each field may come by its own name: ``max_epochs=3`` sets ``training``'s.
    """

    #: Parameters that hold a group of settings, with the group their None stands for.
    _param_groups: ClassVar[dict[str, ParamGroup]] = {}

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
        """Build from a params dict, turning bad names into a one-line CompressorError; a
        group's fields may come as a dict or by their own names (see the class doc)."""
        known = cls._param_names()
        params = cls._grouped(params, known)
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise CompressorError(
                f"{cls.__name__} got unknown parameter(s) {', '.join(unknown)}; "
                f"its parameters are: {cls._described_params()}"
            )
        obj = cls(**params)
        obj._check_params()
        return obj

    @classmethod
    def _group_of_field(cls, name: str) -> str | None:
        """The parameter whose group has a field ``name`` (None: none has)."""
        for group, default in cls._param_groups.items():
            if name in default.field_names():
                return group
        return None

    @classmethod
    def _grouped(
        cls, params: dict[str, Any], known: list[str], current: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """``params`` with each group given as a dict turned into the group, and the fields
        given by their own names moved into their group: over the group given beside them,
        else over its ``current`` value (``set_params``), else over the group's defaults."""
        params = dict(params)
        loose: dict[str, dict[str, Any]] = {}
        for name in list(params):
            group = None if name in known else cls._group_of_field(name)
            if group is not None:
                loose.setdefault(group, {})[name] = params.pop(name)
        for group, default in cls._param_groups.items():
            value = params.get(group, (current or {}).get(group))
            if isinstance(value, Mapping):
                value = default.from_dict(value, cls.__name__)
            if group in loose:
                base = type(default)() if value is None else value
                if isinstance(base, ParamGroup):  # anything else fails validation as it is
                    value = dataclasses.replace(base, **loose[group])
            if group in params or group in loose:
                params[group] = value
        return params

    @classmethod
    def _described_params(cls) -> str:
        """The parameter names, each group's followed by its fields."""
        names = [
            f"{name} ({', '.join(cls._param_groups[name].field_names())})"
            if name in cls._param_groups
            else name
            for name in cls._param_names()
        ]
        return ", ".join(names) or "none"

    def _group(self, name: str) -> ParamGroup:
        """The group parameter ``name`` holds, with the default group's value for each field it
        leaves None (all of them where it holds None)."""
        default = self._param_groups[name]
        value: ParamGroup | None = getattr(self, name)
        if value is None:
            return default
        unset = {key: getattr(default, key) for key, v in value.as_dict().items() if v is None}
        return dataclasses.replace(value, **unset) if unset else value

    def _saved_params(self) -> dict[str, Any]:
        """The hyperparameters as ``config.json`` holds them (and ``metadata`` shows them): a
        group as the dict of its fields."""
        return {
            name: value.as_dict() if isinstance(value, ParamGroup) else value
            for name, value in ((name, getattr(self, name)) for name in self._param_names())
        }

    def _unknown_param_error(self, name: str) -> CompressorError:
        return CompressorError(
            f"{self._display_name()} has no parameter {name!r}; "
            f"its parameters are: {self._described_params()}"
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
