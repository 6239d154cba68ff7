"""Shared test fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny matrices gain nothing from threads, and on a busy machine the spinning threads of
    several processes made small fits 20x slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
