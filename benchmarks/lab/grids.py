"""Experiment grids: what a benchmark sweeps, kept in a TOML file instead of in its code.

A grid's shape is a dataclass (the *schema*) whose type hints say what each key holds:
``bool``, ``int``, ``float`` (an integer is accepted and made a float), ``str``, ``Any`` (any
TOML value), ``list[...]``, ``tuple[..., ...]``, ``dict[str, ...]``, ``dict[int, ...]`` (TOML
keys are strings: ``{ 32 = 1.5 }`` becomes ``{32: 1.5}``), ``X | None`` (the key may be left
out) and nested dataclasses. Tables keep the order of the file. A key the schema does not
know, a missing key without a default, or a value of the wrong type is a one-line
:class:`~demitasse.errors.DataError` naming the file and the key; a ``ValueError`` raised by
a schema's ``__post_init__`` becomes one too.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from demitasse.errors import DataError, one_line

T = TypeVar("T")


class _SchemaError(ValueError):
    """A value that does not fit the schema, with where it sits in the file."""


def load_grid(path: str | Path, schema: type[T]) -> T:
    """Read the TOML grid at ``path`` into an instance of the dataclass ``schema``."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read the grid {path}: {one_line(exc)}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DataError(f"grid {path} is not valid TOML: {one_line(exc)}") from None
    try:
        return typing.cast(T, _convert(data, schema, ""))
    except _SchemaError as exc:
        raise DataError(f"grid {path}: {exc}") from None


def _convert(value: Any, hint: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass(value, hint, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        # TOML has no null: "| None" only lets the key be left out.
        inner = [arg for arg in args if arg is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"grid schemas take only 'X | None' unions, not {hint!r}")
        return _convert(value, inner[0], where)
    if origin in (list, tuple):
        items = _expect(value, list, "an array", where)
        converted = [_convert(item, args[0], f"{where}[{i}]") for i, item in enumerate(items)]
        return converted if origin is list else tuple(converted)
    if origin is dict:
        table = _expect(value, dict, "a table", where)
        return {
            _key(key, args[0], where): _convert(item, args[1], _join(where, key))
            for key, item in table.items()
        }
    return _scalar(value, hint, where)


def _dataclass(value: Any, schema: type, where: str) -> Any:
    table = _expect(value, dict, "a table", where)
    fields = {f.name: f for f in dataclasses.fields(schema) if f.init}
    unknown = [key for key in table if key not in fields]
    if unknown:
        raise _SchemaError(
            f"unknown key {_join(where, unknown[0])!r} (known: {', '.join(fields) or 'none'})"
        )
    required = [
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in table]
    if missing:
        raise _SchemaError(f"{where or 'the file'} lacks the key {missing[0]!r}")
    hints = typing.get_type_hints(schema)
    converted = {key: _convert(item, hints[key], _join(where, key)) for key, item in table.items()}
    try:
        return schema(**converted)
    except ValueError as exc:
        raise _SchemaError(f"{where or 'the file'}: {one_line(exc)}") from None


_SCALARS: dict[Any, tuple[str, tuple[type, ...]]] = {
    bool: ("true or false", (bool,)),
    int: ("an integer", (int,)),
    float: ("a number", (int, float)),
    str: ("a string", (str,)),
}


def _scalar(value: Any, hint: Any, where: str) -> Any:
    if hint is Any:
        return value
    if hint not in _SCALARS:
        raise TypeError(f"grid schemas cannot hold {hint!r} (at {where or 'the top'})")
    kind, accepted = _SCALARS[hint]
    fits = isinstance(value, bool) == (hint is bool) and isinstance(value, accepted)
    if not fits:  # bool is an int to Python, never to a grid
        raise _SchemaError(f"{where} must be {kind}, got {_shown(value)}")
    return float(value) if hint is float else value


def _key(key: str, hint: Any, where: str) -> Any:
    if hint is int:
        try:
            return int(key)
        except ValueError:
            raise _SchemaError(f"{_join(where, key)}: the key must be an integer") from None
    return key


def _expect(value: Any, kind: type, described: str, where: str) -> Any:
    if not isinstance(value, kind):
        raise _SchemaError(f"{where or 'the file'} must be {described}, got {_shown(value)}")
    return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
