"""The on-disk format shared by every saved part: compressors, quantisers, exit heads, static
models and the composed model.

A saved object is a directory holding ``config.json`` (readable metadata and hyperparameters)
and ``state.safetensors`` (learned arrays). No pickle anywhere: loading a file never runs code.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from demitasse.arrays import is_int, non_finite_array
from demitasse.errors import CompressorError, SavedStateError, one_line
from demitasse.io import atomic_directory, check_directory_target, read_json

CONFIG_FILE = "config.json"
STATE_FILE = "state.safetensors"


def demitasse_version() -> str:
    try:
        return importlib.metadata.version("demitasse")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _json_default(obj: Any) -> Any:
    # numpy scalars sneak into params (e.g. dim=np.int64(128)); store them as plain numbers.
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _saved_kind(config: dict[str, Any]) -> str:
    return str(config.get("kind", config.get("method", "saved object")))


def check_saved_target(
    path: str | Path, kind: str, inputs: Iterable[str | Path | None] = ()
) -> Path:
    """``path`` as a Path if :func:`write_saved` may save a ``kind`` there (the ``kind`` or
    ``method`` of its config; none of ``inputs``, inside or holding one), else a one-line
    error: for callers that check before working."""
    return check_directory_target(path, kind=kind, inputs=inputs)


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
    with atomic_directory(path, kind=kind) as tmp:
        (tmp / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / STATE_FILE))
        for name, content in (text_files or {}).items():
            (tmp / name).write_text(content, encoding="utf-8")


def read_config(path: str | Path, what: str) -> dict[str, Any]:
    """``path/config.json`` of a saved ``what``, parsed strictly (no NaN, no integer too large
    for a float, no nesting deep enough to crash), or a one-line SavedStateError."""
    path = Path(path)
    if not path.exists():
        raise SavedStateError(f"no saved {what} at {path}")
    if not path.is_dir():
        raise SavedStateError(f"{path} is not a directory; a saved {what} is a directory")
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise SavedStateError(f"{path} has no {CONFIG_FILE}; it is not a saved {what}")
    try:
        config = read_json(config_path)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: {one_line(exc)}") from None
    if not isinstance(config, dict):
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: expected a JSON object")
    return config


def read_saved(path: str | Path, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a saved directory, raising a one-line SavedStateError for anything wrong."""
    path = Path(path)
    config = read_config(path, what)
    state_path = path / STATE_FILE
    if not state_path.is_file():
        raise SavedStateError(f"{path} has no {STATE_FILE}; the save is incomplete")
    try:
        # Copy out of the memory map so the directory can be replaced while we hold the arrays.
        arrays = {k: np.array(v) for k, v in load_file(str(state_path)).items()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise SavedStateError(f"corrupt {STATE_FILE} in {path}: {one_line(exc)}") from None
    bad = non_finite_array(arrays)
    if bad is not None:
        raise SavedStateError(f"corrupt {STATE_FILE} in {path}: {bad} holds NaN or inf")
    return config, arrays


def require(config: dict[str, Any], key: str, kind: str, path: str | Path) -> Any:
    """Fetch ``config[key]`` checking its JSON type: 'str', 'int', 'dict', 'str?', 'int?'."""
    optional = kind.endswith("?")
    base = kind.rstrip("?")
    if key not in config:
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: missing key {key!r}")
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
        raise SavedStateError(
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
        raise SavedStateError(f"{STATE_FILE} in {path} does not match {CONFIG_FILE}: {detail}")
    for name, shape in expected.items():
        if arrays[name].shape != tuple(shape):
            raise SavedStateError(
                f"{STATE_FILE} in {path} does not match {CONFIG_FILE}: {name} has shape "
                f"{arrays[name].shape}, expected {tuple(shape)}"
            )
        if arrays[name].dtype.kind not in "fiu":
            raise SavedStateError(
                f"{STATE_FILE} in {path}: {name} has non-numeric dtype {arrays[name].dtype}"
            )


def check_version(saved: int, supported: int, name: str, path: str | Path) -> None:
    """Refuse, in one line, a part saved in another format version than this demitasse's."""
    if saved > supported:
        raise SavedStateError(
            f"{path} was saved by a newer demitasse ({name} format version {saved}; "
            f"this one reads {supported}); upgrade demitasse"
        )
    if saved < 1:
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: version {saved} < 1")
    if saved != supported:
        raise SavedStateError(
            f"{path} was saved in {name} format version {saved}; this demitasse reads "
            f"version {supported}: fit it again"
        )
