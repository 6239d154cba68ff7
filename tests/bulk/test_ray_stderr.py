"""A successful ``embed --engine ray`` prints no error-level line (issue #50): Ray's core logs one
about every actor of a Ray Data pool (ray-project/ray#57733), which the driver's stderr filter
drops, and nothing else; the filter keeps every other line, even from a driver killed mid-run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from demitasse.bulk.ray_stderr import copy_filtered
from tests.bulk.conftest import Models, cli_env

FALSE_ALARM = (
    b"[2026-11-29 03:45:20,933 E 5129 5129] core_worker.cc:2465: Actor with class name: "
    b"'MapWorker(MapBatches(DemitasseEncoder))' and ID: 'aad89f4c7740538b205d06af01000000' has "
    b"constructor arguments in the object store and max_restarts > 0. If the arguments in the "
    b"object store go out of scope or are lost, the actor restart will fail. See "
    b"https://github.com/ray-project/ray/issues/53727 for more details.\n"
)
# Ray's C++ log lines, any level: "[date time level pid tid] file:line: message".
RAY_CORE_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,.]+ [DIWEF] \d+ \d+\]")


def _filtered(*writes: bytes) -> bytes:
    read_end, write_end = os.pipe()
    with tempfile.TemporaryFile() as out:
        for data in writes:  # small enough for the pipe's buffer
            os.write(write_end, data)
        os.close(write_end)
        copy_filtered(read_end, out.fileno())
        os.close(read_end)
        out.seek(0)
        return out.read()


def test_the_filter_drops_rays_false_alarm_and_nothing_else() -> None:
    users_actor = FALSE_ALARM.replace(b"MapWorker(MapBatches(DemitasseEncoder))", b"Mine")
    other_error = b"[2026-11-29 03:45:21,001 E 5129 5129] core_worker.cc:1: Check failed\n"
    bar = b"\rembed:  50%|#####     | 90/180"
    kept = _filtered(b"before\n", FALSE_ALARM, users_actor, other_error, bar, b"\n", b"end")
    assert kept == b"before\n" + users_actor + other_error + bar + b"\nend"
    # A line of Ray's that arrives in pieces is judged whole.
    assert _filtered(FALSE_ALARM[:40], FALSE_ALARM[40:] + b"after\n") == b"after\n"


def test_a_driver_killed_mid_run_loses_no_line(tmp_path: Path) -> None:
    """The filter is a process of its own, so what the driver wrote before dying still shows."""
    script = (
        "import os, signal\n"
        "from demitasse.bulk.ray_stderr import without_false_alarm\n"
        "with without_false_alarm():\n"
        f"    os.write(2, {FALSE_ALARM!r} + b'last words\\n')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=cli_env(), capture_output=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == -9
    assert done.stderr == b"last words\n"


def test_a_successful_ray_embed_prints_no_error(
    models: Models, corpus: Path, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    argv = ["embed", str(models.int8), "--input", f"{corpus}/*", "--out", str(tmp_path / "o"),
            "--engine", "ray", "--concurrency", "2", "--shard-rows", "32"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "demitasse", *argv], env=cli_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    noise = [line for line in done.stderr.splitlines()
             if RAY_CORE_LINE.match(line) or "error" in line.lower()]  # fmt: skip
    assert not noise, done.stderr
    assert "embed: 240 texts in" in done.stderr
