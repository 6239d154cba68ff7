"""Atomic file output: write to a temporary sibling, then rename over the target.

An interrupted run therefore leaves either the previous file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(target: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(target: str | Path, text: str) -> None:
    atomic_write_bytes(target, text.encode("utf-8"))


def atomic_write_json(target: str | Path, obj: Any) -> None:
    atomic_write_text(target, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def atomic_directory(target: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces the directory ``target``.

    The previous directory is moved aside first and deleted only after the new one is in
    place, so an interruption leaves a complete directory under ``target``'s name.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        yield tmp
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old."))
            old.rmdir()
            target.replace(old)
        tmp.replace(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_npy(target: str | Path, shape: tuple[int, ...], dtype: str = "float32") -> Iterator[Any]:
    """Yield a memory-mapped ``.npy`` array to fill; it appears at ``target`` only when done."""
    import numpy as np

    with atomic_path(target, suffix=".npy") as tmp:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        yield array
        array.flush()
        del array
