"""Shared test fixtures."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored in
# every child: the tests that interrupt a process would wait forever. Python's own Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


@pytest.fixture
def isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """demitasse's cache in the test's own folder at its default bound, offline: cache tests
    count hits and misses that no other test's vectors may change."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DEMITASSE_CACHE", str(cache))
    monkeypatch.delenv("DEMITASSE_CACHE_MAX_BYTES", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random transformer of 2 layers, 32 wide, built once per module."""
    from tests.helpers import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=2, hidden=32)


@pytest.fixture(autouse=True)
def _signal_handlers_restored() -> Iterator[None]:
    """Tests that run the CLI in-process change SIGINT/SIGTERM/SIGHUP handling (to raise, or
    to ignore once the work is done); later tests, and processes they fork, must not inherit it."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
