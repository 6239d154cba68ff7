"""Where the benchmark data lives."""

from __future__ import annotations

import os
from pathlib import Path

from demitasse.errors import DataError

DATA_ENV = "DEMITASSE_DATA"


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data folder: ``data_dir`` if given, else ``$DEMITASSE_DATA``; it must exist."""
    if data_dir is None or str(data_dir) == "":
        data_dir = os.environ.get(DATA_ENV) or None
    if data_dir is None:
        raise DataError(f"no data directory: pass --data-dir or set {DATA_ENV}")
    path = Path(data_dir).expanduser()
    if not path.exists():
        raise DataError(f"data directory {path} does not exist")
    if not path.is_dir():
        raise DataError(f"data directory {path} is not a directory")
    return path
