"""Interruptions never lose an output: real signals, sent to real processes at random moments.

A writer process replaces a folder output over and over; the test kills it with SIGINT,
SIGTERM or SIGHUP at a random moment, many times. Whatever the moment, the folder holds one
complete output (the old or the new one), no temporary file or folder is left beside it, and
the process ends with one line and the signal's exit code. The same holds for the command line
itself (`demitasse fit`), interrupted while it works.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO

WRITER = r"""
import os, sys
from pathlib import Path
from demitasse.io import atomic_directory, handle_termination

handle_termination()
target = Path(sys.argv[1])
generation = 0
try:
    while True:
        generation += 1
        with atomic_directory(target, kind="test output") as tmp:
            (tmp / "payload.bin").write_bytes(os.urandom(1 << 18))
            (tmp / "sub").mkdir()
            (tmp / "sub" / "generation.txt").write_text(str(generation))
        if generation == 1:
            print("ready", flush=True)
except KeyboardInterrupt as exc:
    print(f"interrupted: {getattr(exc, 'signum', 2)}", file=sys.stderr)
    sys.exit(128 + getattr(exc, "signum", 2))
"""
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return env


def _assert_complete(target: Path) -> None:
    assert (target / ".demitasse-output.json").is_file()
    assert (target / "payload.bin").stat().st_size == 1 << 18
    assert int((target / "sub" / "generation.txt").read_text()) >= 1
    leftovers = [p.name for p in target.parent.iterdir() if p.name.startswith(".dt-")]
    assert leftovers == []


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_at_any_moment_leaves_a_complete_output(signum: int, tmp_path: Path) -> None:
    rng = random.Random(signum)  # random moments, the same ones on every run
    for attempt in range(12):
        target = tmp_path / f"out-{attempt}"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
        )
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.05))
        writer.send_signal(signum)
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 128 + signum, err
        assert err.strip() == f"interrupted: {signum}"
        _assert_complete(target)


def test_the_command_line_cleans_up_after_any_signal(tmp_path: Path) -> None:
    """A signal at any moment, start-up included, ends in one line and the signal's exit code:
    imports hold signals back (a KeyboardInterrupt inside an extension module's C++ code would
    abort the process), and the handlers are in place before the command line's modules load
    (demitasse.cli.run). Was a non-strict xfail (#49 item 10)."""
    rng = np.random.default_rng(0)
    vectors = tmp_path / "vectors.npy"
    np.save(vectors, rng.standard_normal((20000, 64)).astype(np.float32))
    out = tmp_path / "model"
    command = [sys.executable, "-m", "demitasse", "fit", "--vectors", str(vectors), "--compressor",
               "pca", "--dim", "16", "--precision", "int8", "--out", str(out)]  # fmt: skip
    env = _environment() | {"DEMITASSE_CACHE": str(tmp_path / "cache")}
    assert subprocess.run(command, env=env, capture_output=True, timeout=120).returncode == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    moments = random.Random(0)
    for signum in SIGNALS * 2:
        started = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        time.sleep(moments.uniform(0.2, 2.0))  # from start-up to the save
        started.send_signal(signum)
        _, err = started.communicate(timeout=120)
        lines = err.strip().splitlines()
        if started.returncode == 0:  # it finished first: the new model replaced the old one
            continue
        assert started.returncode == 128 + signum, err
        assert len(lines) == 1 and lines[0].startswith("demitasse: interrupted"), err
        after = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
        assert after.keys() == before.keys()
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".dt-")] == []
