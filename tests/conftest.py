"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared benchmark data: ``$DEMITASSE_DATA`` or ``<repo>/../shared/data``."""
    path = Path(os.environ.get("DEMITASSE_DATA") or REPO.parent / "shared" / "data")
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path
