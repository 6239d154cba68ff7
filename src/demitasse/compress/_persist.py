"""Shared machinery for compressors and quantisers: hyperparameters and on-disk format.

A saved object is a directory holding ``config.json`` (readable metadata and hyperparameters)
and ``state.safetensors`` (learned arrays). No pickle anywhere: loading a file never runs code.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
from collections.abc import Callable
from numbers import Integral
from pathlib import Path
from typing import Any, Self

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file
from sklearn.utils._param_validation import Interval

from demitasse.compress._arrays import is_int, non_finite_array
from demitasse.errors import CompressorError, one_line
from demitasse.io import atomic_directory, check_directory_target, read_json

CONFIG_FILE = "config.json"
STATE_FILE = "state.safetensors"


def demitasse_version() -> str:
    try:
        return importlib.metadata.version("demitasse")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


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


def _json_default(obj: Any) -> Any:
    # numpy scalars sneak into params (e.g. dim=np.int64(128)); store them as plain numbers.
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _saved_kind(config: dict[str, Any]) -> str:
    return str(config.get("kind", config.get("method", "saved object")))


def _earlier_save(kind: str) -> Callable[[Path], bool]:
    def earlier_save(folder: Path) -> bool:  # saved before outputs carried a marker
        saved = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        return isinstance(saved, dict) and _saved_kind(saved) == kind

    return earlier_save


def check_saved_target(path: str | Path, kind: str) -> Path:
    """``path`` as a Path if :func:`write_saved` may save a ``kind`` there (the ``kind`` or
    ``method`` of its config), else a one-line error: for callers that check before working."""
    return check_directory_target(path, kind=kind, recognise=_earlier_save(kind))


def write_saved(
    path: str | Path,
    config: dict[str, Any],
    arrays: dict[str, np.ndarray],
    text_files: dict[str, str] | None = None,
) -> None:
    """Atomically write ``config.json`` + ``state.safetensors`` (and any ``text_files``, by
    name) into the directory ``path``."""
    path = Path(path)
    kind = _saved_kind(config)
    try:
        text = json.dumps(
            config, indent=2, ensure_ascii=False, default=_json_default, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise CompressorError(
            f"cannot save to {path}: config is not JSON: {one_line(exc)}"
        ) from None
    bad = non_finite_array(arrays)
    if bad is not None:
        raise CompressorError(f"cannot save to {path}: {bad} holds NaN or inf")
    tensors = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    with atomic_directory(path, kind=kind, recognise=_earlier_save(kind)) as tmp:
        (tmp / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / STATE_FILE))
        for name, content in (text_files or {}).items():
            (tmp / name).write_text(content, encoding="utf-8")


def read_config(path: str | Path, what: str) -> dict[str, Any]:
    """``path/config.json`` of a saved ``what``, parsed strictly (no NaN, no integer too large
    for a float, no nesting deep enough to crash), or a one-line CompressorError."""
    path = Path(path)
    if not path.exists():
        raise CompressorError(f"no saved {what} at {path}")
    if not path.is_dir():
        raise CompressorError(f"{path} is not a directory; a saved {what} is a directory")
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise CompressorError(f"{path} has no {CONFIG_FILE}; it is not a saved {what}")
    try:
        config = read_json(config_path)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: {one_line(exc)}") from None
    if not isinstance(config, dict):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: expected a JSON object")
    return config


def read_saved(path: str | Path, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a saved directory, raising a one-line CompressorError for anything wrong."""
    path = Path(path)
    config = read_config(path, what)
    state_path = path / STATE_FILE
    if not state_path.is_file():
        raise CompressorError(f"{path} has no {STATE_FILE}; the save is incomplete")
    try:
        # Copy out of the memory map so the directory can be replaced while we hold the arrays.
        arrays = {k: np.array(v) for k, v in load_file(str(state_path)).items()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CompressorError(f"corrupt {STATE_FILE} in {path}: {one_line(exc)}") from None
    bad = non_finite_array(arrays)
    if bad is not None:
        raise CompressorError(f"corrupt {STATE_FILE} in {path}: {bad} holds NaN or inf")
    return config, arrays


def require(config: dict[str, Any], key: str, kind: str, path: str | Path) -> Any:
    """Fetch ``config[key]`` checking its JSON type: 'str', 'int', 'dict', 'str?', 'int?'."""
    optional = kind.endswith("?")
    base = kind.rstrip("?")
    if key not in config:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: missing key {key!r}")
    value = config[key]
    if value is None and optional:
        return None
    ok = {
        "str": isinstance(value, str),
        "int": is_int(value),
        "dict": isinstance(value, dict),
        "bool": isinstance(value, bool),
    }[base]
    if not ok:
        raise CompressorError(
            f"invalid {CONFIG_FILE} in {path}: {key!r} should be {base}, got {value!r}"
        )
    return value


def check_state_shapes(
    arrays: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]], path: str | Path
) -> None:
    """Fail if the saved arrays do not have exactly the names and shapes the config implies."""
    missing = sorted(set(expected) - set(arrays))
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        detail = ", ".join([f"missing {n}" for n in missing] + [f"unexpected {n}" for n in extra])
        raise CompressorError(f"{STATE_FILE} in {path} does not match {CONFIG_FILE}: {detail}")
    for name, shape in expected.items():
        if arrays[name].shape != tuple(shape):
            raise CompressorError(
                f"{STATE_FILE} in {path} does not match {CONFIG_FILE}: {name} has shape "
                f"{arrays[name].shape}, expected {tuple(shape)}"
            )
        if arrays[name].dtype.kind not in "fiu":
            raise CompressorError(
                f"{STATE_FILE} in {path}: {name} has non-numeric dtype {arrays[name].dtype}"
            )


def check_version(saved: int, supported: int, name: str, path: str | Path) -> None:
    if saved > supported:
        raise CompressorError(
            f"{path} was saved by a newer demitasse ({name} format version {saved}; "
            f"this one reads up to {supported}); upgrade demitasse"
        )
    if saved < 1:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: version {saved} < 1")
