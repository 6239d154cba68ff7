"""``--engine ray`` on a real local Ray (2 CPUs, one per module): the same rows and provenance
as the local engine, for embed and recompress; the public actor classes in a plain pipeline."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from demitasse import CompressedModel
from demitasse.bulk import DemitasseEncoder, load_manifest
from tests.bulk.conftest import Models, rows, run_cli, sentences

pytestmark = pytest.mark.usefixtures("ray_local", "one_torch_thread")


def _both_engines(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for engine in ("local", "ray"):
        out = ["--out", str(tmp_path / engine), "--engine", engine, "--concurrency", "2"]
        code, _, err = run_cli([*argv, *out], capsys)
        assert code == 0, err
    local, ray = rows(tmp_path / "local"), rows(tmp_path / "ray")
    assert local.column("id").to_pylist() == ray.column("id").to_pylist()
    assert local.num_rows == len(set(local.column("id").to_pylist()))
    # Float32 rounding only: the engines cut the rows into different blocks, and BLAS may sum a
    # row in another order depending on where it falls in a block.
    np.testing.assert_allclose(
        np.array(local.column("embedding").to_pylist()),
        np.array(ray.column("embedding").to_pylist()),
        rtol=0,
        atol=1e-5,
    )
    assert local.schema.equals(ray.schema, check_metadata=True)  # provenance included
    local_manifest, ray_manifest = (
        load_manifest(tmp_path / "local"),
        load_manifest(tmp_path / "ray"),
    )
    assert local_manifest is not None and ray_manifest is not None
    assert local_manifest.shards == ray_manifest.shards


def test_embed_on_ray_equals_local(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["embed", str(models.int8), "--input", f"{corpus}/*", "--shard-rows", "32",
            "--batch-size", "10"]  # fmt: skip
    _both_engines(argv, tmp_path, capsys)


def test_recompress_on_ray_equals_local(
    models: Models, vectors: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["recompress", str(models.float32), "--input", f"{vectors}/*.parquet",
            "--shard-rows", "50", "--batch-size", "20"]  # fmt: skip
    _both_engines(argv, tmp_path, capsys)


def test_an_unreadable_file_is_recorded_alike_by_both_engines(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    (data / "b2.parquet").write_bytes(b"PAR1 this is not parquet")
    argv = ["embed", str(models.int8), "--input", f"{data}/*", "--shard-rows", "32",
            "--on-error", "skip"]  # fmt: skip
    _both_engines(argv, tmp_path, capsys)
    errors = [load_manifest(tmp_path / engine).errors for engine in ("local", "ray")]  # type: ignore[union-attr]
    assert errors[0] == errors[1] and len(errors[0]) == 1
    code, _, err = run_cli([*argv[:-2], "--engine", "ray", "--out", str(tmp_path / "stop")],
                           capsys)  # fmt: skip
    # Ray may add its own warnings on stderr; demitasse's error is one line.
    errors = [line for line in err.splitlines() if line.startswith("demitasse: error")]
    assert code == 2 and len(errors) == 1 and "b2.parquet" in errors[0]


def test_the_actor_class_drops_into_a_users_pipeline(models: Models, ray_local) -> None:
    texts = sentences(50)
    ds = ray_local.data.from_items([{"text": t, "n": i} for i, t in enumerate(texts)])
    ds = ds.map_batches(DemitasseEncoder, fn_constructor_kwargs={"model": str(models.int8)},
                        batch_size=16, concurrency=1)  # fmt: skip
    out = sorted(ds.take_all(), key=lambda row: row["n"])
    codes = np.stack([row["embedding"] for row in out])
    assert "text" not in out[0]
    expected = CompressedModel.load(models.int8).encode(texts, precision="int8")
    np.testing.assert_array_equal(codes, expected)


def test_ray_completes_an_output_the_local_engine_left_unfinished(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["embed", str(models.int8), "--input", f"{corpus}/*", "--shard-rows", "32"]
    out = tmp_path / "out"
    assert run_cli([*argv, "--out", str(out)], capsys)[0] == 0
    whole = rows(out)
    # The state a local run killed after its fourth shard leaves: later shards unnamed.
    manifest = json.loads((out / "manifest.json").read_text())
    for shard in manifest["shards"][4:]:
        (out / "shards" / shard["name"]).unlink()
    manifest["shards"], manifest["complete"] = manifest["shards"][:4], False
    (out / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = run_cli([*argv, "--out", str(out), "--resume", "--engine", "ray"], capsys)
    assert code == 0, err
    resumed = rows(out)
    assert resumed.column("id").to_pylist() == whole.column("id").to_pylist()
    assert resumed.column("embedding").to_pylist() == whole.column("embedding").to_pylist()


def test_every_actor_gets_shards(models: Models, corpus: Path, tmp_path: Path) -> None:
    """Pieces are one-row descriptors: fused into the actor stage, whose batch size bundled
    them all into one task, one actor encoded every shard while the others idled."""
    from demitasse.bulk.job import EMBED, BulkJob
    from demitasse.bulk.manifest import Manifest
    from demitasse.bulk.ray_engine import RayOptions, _dataset, pending_pieces
    from demitasse.bulk.sources import Columns, expand_inputs

    inputs = expand_inputs(f"{corpus}/*.txt", ("text",))
    job = BulkJob(EMBED, str(models.int8), inputs, tmp_path / "out",
                  Columns("text", None, "texts", id_required=False), shard_rows=16,
                  batch_size=64)  # fmt: skip
    pieces = pending_pieces(job, Manifest(EMBED, {}, [], {}))
    assert len(pieces) >= 4
    ds = _dataset(job, pieces, RayOptions(concurrency=2)).materialize()
    stats = ds.stats()
    assert "MapBatches(_read_piece)->" not in stats, stats  # a stage of its own
    encoder = stats[stats.index("MapBatches(DemitasseEncoder)") :]
    tasks = int(re.search(r"(\d+) tasks executed", encoder).group(1))  # type: ignore[union-attr]
    assert tasks >= 2, stats


def test_starting_ray_keeps_demitasses_sigterm_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """ray.init puts in a SIGTERM handler of its own (sys.exit(15)): a SIGTERM then ended an
    ``--engine ray`` run with status 15 and without demitasse's line."""
    import signal
    import sys

    import ray

    from demitasse.bulk.ray_engine import RayOptions, _ensure_ray

    def ours(signum, frame) -> None:
        pass

    monkeypatch.delenv("RAY_DATA_LOG_LEVEL", raising=False)  # put back as it was afterwards
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **_: signal.signal(signal.SIGTERM, sys.exit))
    previous = signal.signal(signal.SIGTERM, ours)
    try:
        _ensure_ray(RayOptions())
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
