"""Kill -9 and resume: the CLI really runs in a subprocess, is killed mid-run (twice), then
resumed; the output must equal an uninterrupted run's — same ids in the same order, the same
codes, no duplicate, no loss, no leftover file."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse.bulk import load_manifest
from tests.bulk.conftest import Models, cli_env, run_cli, sentences


def _shards_written(out: Path) -> tuple[int, bool]:
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return 0, False
    return len(manifest["shards"]), manifest["complete"]


def _kill_mid_run(argv: list[str], out: Path, after_shards: int, extra_delay: float) -> None:
    """Start the CLI, wait until ``after_shards`` more shards are durable (plus a random
    delay), kill -9 it; it must not have finished."""
    before = _shards_written(out)[0]
    process = subprocess.Popen([sys.executable, "-m", "demitasse", *argv], env=cli_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while _shards_written(out)[0] < before + after_shards:
            assert process.poll() is None, process.stderr.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.002)
        time.sleep(extra_delay)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not _shards_written(out)[1], "the run finished before it was killed"


def _output(out: Path) -> pa.Table:
    manifest = load_manifest(out)
    assert manifest is not None and manifest.complete
    names = [s["name"] for s in sorted(manifest.shards, key=lambda s: (s["file"], s["shard"]))]
    on_disk = sorted(p.name for p in (out / "shards").iterdir())
    assert names == on_disk  # no orphan shard, no temporary file left behind
    return pa.concat_tables(pq.read_table(out / "shards" / name) for name in names)


def _kill_twice_and_resume(argv: list[str], out: Path, seed: int) -> pa.Table:
    rng = random.Random(seed)
    _kill_mid_run(argv, out, after_shards=1, extra_delay=rng.uniform(0, 0.05))
    _kill_mid_run([*argv, "--resume"], out, after_shards=2, extra_delay=rng.uniform(0, 0.05))
    done = subprocess.run([sys.executable, "-m", "demitasse", *argv, "--resume"], env=cli_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return _output(out)


def _assert_same(resumed: pa.Table, uninterrupted: pa.Table) -> None:
    ids = resumed.column("id").to_pylist()
    assert len(ids) == len(set(ids)) == uninterrupted.num_rows
    assert ids == uninterrupted.column("id").to_pylist()
    np.testing.assert_array_equal(
        np.array(resumed.column("embedding").to_pylist()),
        np.array(uninterrupted.column("embedding").to_pylist()),
    )
    assert resumed.schema.equals(uninterrupted.schema, check_metadata=True)


def test_embed_killed_twice_then_resumed_equals_an_uninterrupted_run(
    models: Models, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    texts = sentences(3000, seed=3)
    (data / "a.txt").write_text("\n".join(texts[:1700]) + "\n")
    (data / "b.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts[1700:]) + "\n")
    argv = ["embed", str(models.int8), "--input", f"{data}/*", "--shard-rows", "100",
            "--batch-size", "25", "--threads", "1"]  # fmt: skip
    resumed = _kill_twice_and_resume([*argv, "--out", str(tmp_path / "resumed")],
                                     tmp_path / "resumed", seed=0)  # fmt: skip
    assert run_cli([*argv, "--out", str(tmp_path / "whole")], capsys)[0] == 0
    _assert_same(resumed, _output(tmp_path / "whole"))


def test_recompress_killed_twice_then_resumed_equals_an_uninterrupted_run(
    models: Models, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "vectors"
    data.mkdir()
    rng = np.random.default_rng(1)
    for part in range(3):
        x = rng.normal(size=(8000, 32)).astype(np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 32)
        pq.write_table(pa.table({"embedding": column}), data / f"p{part}.parquet",
                       row_group_size=1000)  # fmt: skip
    argv = ["recompress", str(models.int8), "--input", f"{data}/*.parquet", "--shard-rows",
            "150", "--batch-size", "50"]  # fmt: skip
    resumed = _kill_twice_and_resume([*argv, "--out", str(tmp_path / "resumed")],
                                     tmp_path / "resumed", seed=1)  # fmt: skip
    assert run_cli([*argv, "--out", str(tmp_path / "whole")], capsys)[0] == 0
    _assert_same(resumed, _output(tmp_path / "whole"))
    assert resumed.column("id").to_pylist()[:2] == ["p0.parquet:0", "p0.parquet:1"]


def test_a_resume_with_other_inputs_is_refused(
    models: Models, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("\n".join(sentences(50)) + "\n")
    argv = ["embed", str(models.int8), "--input", f"{data}/*", "--out", str(tmp_path / "out"),
            "--shard-rows", "20"]  # fmt: skip
    assert run_cli(argv, capsys)[0] == 0
    (data / "b.txt").write_text("more\n")
    code, _, err = run_cli([*argv, "--resume"], capsys)
    assert code == 2 and err.count("\n") == 1 and "same --input" in err
    (data / "b.txt").unlink()
    (data / "a.txt").write_text("changed\n")
    code, _, err = run_cli([*argv, "--resume"], capsys)
    assert code == 2 and "changed since the run started" in err
