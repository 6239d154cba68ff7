"""Issue #26, "Nothing lost, whatever the user types": one regression test per defect found.

Each test names its defect (``test_<n>_...`` follows the issue's numbering) and failed on the
code the issue was filed against. Every command-line failure is checked the same way: exit
code 2, one line on stderr starting ``demitasse: error:``, nothing under the output's name and
no hidden temporary (``.dt-*``) left beside it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.errors import DemitasseError
from demitasse.io import Interrupted, atomic_directory, atomic_path, remove_temporaries
from tests.helpers import SCORED_PAIRS as PAIRS
from tests.helpers import write_cli_inputs

REPO = Path(__file__).resolve().parents[1]


# ---- shared inputs and checks ----------------------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_cli_inputs(tmp_path_factory.mktemp("inputs"))


@pytest.fixture(scope="module")
def earlier_run(files: dict[str, Path], data_dir: Path) -> Path:
    """An evaluation folder (results.json, plot, report/) of an earlier, successful run."""
    out = files["root"] / "earlier"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMITASSE_CACHE", str(files["root"] / "cache"))
        assert main([*_eval(files, data_dir), "--out", str(out)]) == 0
    return out


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DEMITASSE_DATA", raising=False)


def _eval(files: dict[str, Path], data_dir: Path, pairs: Path | None = None) -> list[str]:
    """An eval of the tiny model on a few local pairs: seconds, not minutes."""
    return ["eval", "--model", str(files["tiny"]), "--datasets", str(pairs or files["pairs"]),
            "--fit-data", str(files["texts"]), "--data-dir", str(data_dir)]  # fmt: skip


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str = "") -> str:
    """Run ``argv``: exit code 2 and exactly one line on stderr, holding ``needle``."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert len(err.splitlines()) == 1 and err.startswith("demitasse: error:"), err
    assert needle in err, err
    assert ".dt-" not in err, err  # the user's name, never the hidden temporary's
    return err.strip()


def _tree(folder: Path) -> dict[str, bytes | str | None]:
    """Every entry under ``folder``, hidden ones too: file bytes, link targets, None for folders."""

    def entry(path: Path) -> bytes | str | None:
        if path.is_symlink():
            return f"-> {path.readlink()}"
        return path.read_bytes() if path.is_file() else None

    return {str(p.relative_to(folder)): entry(p) for p in sorted(folder.rglob("*"))}


def _no_temporaries(folder: Path) -> None:
    assert not list(folder.rglob(".dt-*")), list(folder.rglob(".dt-*"))


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy, symlinks=True)
    return copy


# ---- 1. outputs replace only what is theirs --------------------------------------------------


def test_1_outputs_never_replace_a_foreign_folder_or_a_file(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("precious")
    (victim / "figures").mkdir()
    (victim / "figures" / "plot.png").write_bytes(b"\x89PNG")
    notes = tmp_path / "some-existing-file.txt"
    notes.write_text("mine")
    saved = tmp_path / "D"  # a config.json among other files is no demitasse model
    saved.mkdir()
    (saved / "config.json").write_text('{"model_type": "bert", "hidden_size": 32}')
    (saved / "weights.bin").write_bytes(b"\x00" * 16)
    copied = tmp_path / "copied"  # a model saved before outputs had markers, and the user's notes
    shutil.copytree(files["pca"], copied)
    for marker in copied.rglob(".demitasse-output.json"):
        marker.unlink()
    (copied / "README.md").write_text("my notes")
    before = _tree(tmp_path)
    tiny = str(files["tiny"])
    _fails(capsys, ["export", tiny, "--layer", "2", "--dim", "64", "--out", str(victim)])
    _fails(capsys, ["export", tiny, "--layer", "1", "--out", str(victim)], "refusing to replace")
    _fails(capsys, ["export", tiny, "--layer", "1", "--out", str(notes)], "refusing")
    fit = ["fit", "--vectors", str(files["vectors"]), "--compressor", "pca", "--out"]
    _fails(capsys, [*fit, str(saved)], "refusing to replace")
    _fails(capsys, [*fit, str(copied)], "refusing to replace")
    _fails(capsys, [*fit, str(notes)], "refusing")
    assert _tree(tmp_path) == before
    # What is theirs they do replace: an empty folder, then the earlier output of the same kind.
    (tmp_path / "empty").mkdir()
    assert main([*fit, str(tmp_path / "empty")]) == 0
    assert main([*fit, str(tmp_path / "empty")]) == 0
    assert (tmp_path / "empty" / "compressor" / "state.safetensors").is_file()
    _no_temporaries(tmp_path)


# ---- 2. a bad batch size never reaches the embedding cache -----------------------------------


def test_2_a_bad_batch_size_never_poisons_the_cache(
    files: dict[str, Path], data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    from demitasse.encoders.cache import EmbeddingCache

    cache, out = tmp_path / "cache", tmp_path / "R"
    for size in ("-3", "0"):
        _fails(capsys, [*_eval(files, data_dir), "--out", str(out), "--batch-size", size],
               "--batch-size")  # fmt: skip
    assert not cache.exists() and not out.exists()
    # The cache itself stores only finite vectors of the expected width.
    EmbeddingCache(cache / "direct", dim=4).store(["a", "b"], {1: np.full((2, 4), np.inf)})
    EmbeddingCache(cache / "direct", dim=4).store(["a"], {1: np.ones((1, 3), np.float32)})
    assert not list(cache.rglob("*.safetensors"))
    # Later runs are unaffected: real, unit-length vectors are cached, the score is a number.
    assert main([*_eval(files, data_dir), "--out", str(out), "--batch-size", "2"]) == 0
    (record,) = json.loads((out / "results.json").read_text())
    assert math.isfinite(record["score"])
    shards = list(cache.rglob("shard-*.safetensors"))
    assert shards
    for shard in shards:
        for name, vectors in load_file(shard).items():
            if name != "hashes":
                np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-4)


# ---- 3. an interrupted save leaves the old output or the new one, and no temporaries ----------


def _output(target: Path, text: str) -> None:
    with atomic_directory(target, kind="test output") as tmp:
        (tmp / "data.txt").write_text(text)


def test_3_an_interrupted_save_keeps_the_old_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out"
    _output(target, "old")
    for interruption in (KeyboardInterrupt(), Interrupted(signal.SIGTERM),
                         Interrupted(signal.SIGHUP)):  # fmt: skip
        with pytest.raises(KeyboardInterrupt), atomic_directory(target, kind="test output") as tmp:
            (tmp / "data.txt").write_text("half of the new")
            raise interruption
        with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "file.txt") as tmp:
            tmp.write_text("half")
            raise interruption
        assert (target / "data.txt").read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # Ctrl-C between the two renames of the swap takes effect after it: the new output is
    # complete, the old one gone, nothing is left aside. With another thread running (torch and
    # tokenizers start some), which the kernel hands the signal to if the main thread blocks it.
    rename = Path.replace
    sent: list[int] = []

    def rename_then_ctrl_c(self: Path, destination: str | Path) -> Path:
        moved = rename(self, destination)
        if not sent:  # the old output has just been moved aside
            sent.append(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return moved

    done = threading.Event()
    helper = threading.Thread(target=done.wait)
    helper.start()
    try:
        for number in range(2):
            sent.clear()
            with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
                patch.setattr(Path, "replace", rename_then_ctrl_c)
                _output(target, f"new {number}")
            assert sent and (target / "data.txt").read_text() == f"new {number}"
            assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
            done.set()  # the second round runs without the helper thread
            helper.join()
    finally:
        done.set()


def test_3_a_failed_swap_puts_the_old_output_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out"
    _output(target, "old")
    rename = Path.replace

    def second_rename_fails(self: Path, destination: str | Path) -> Path:
        if self.name.endswith(".tmp"):  # the new output moving in: the disk says no
            raise OSError(errno.EIO, "Input/output error", str(self))
        return rename(self, destination)

    with monkeypatch.context() as patch, pytest.raises(OSError):
        patch.setattr(Path, "replace", second_rename_fails)
        _output(target, "new")
    assert (target / "data.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_3_a_signal_before_the_cleanup_holds_signals_still_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python runs a handler between any two bytecodes, so a signal can land while the cleanup
    # is still swapping the handlers: the cleanup then runs anyway, every handler is put back,
    # and the interruption is raised once the temporaries are gone.
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.getsignal(signum) for signum in held}
    folder, file = tmp_path / ".dt-x.tmp", tmp_path / ".dt-y.tmp"
    folder.mkdir()
    (folder / "part").write_text("half")
    file.write_text("half")
    getsignal = signal.getsignal
    calls: list[int] = []

    def signal_lands_midway(signum: int) -> object:
        calls.append(signum)
        if len(calls) == 2:  # SIGINT's handler is already swapped, SIGTERM's not yet
            raise Interrupted(signal.SIGTERM)
        return getsignal(signum)

    with monkeypatch.context() as patch, pytest.raises(Interrupted):
        patch.setattr(signal, "getsignal", signal_lands_midway)
        remove_temporaries(folder, None, file)
    assert list(tmp_path.iterdir()) == []
    assert {signum: signal.getsignal(signum) for signum in held} == before


def test_3_an_interrupted_command_says_so_in_one_line(
    earlier_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import demitasse.report.render as render

    runs = _copy(earlier_run, tmp_path)
    before = _tree(runs)
    for interruption, code in ((KeyboardInterrupt(), 130),
                               (Interrupted(signal.SIGTERM), 143)):  # fmt: skip

        def interrupted(*_: object, interruption: BaseException = interruption) -> str:
            raise interruption

        monkeypatch.setattr(render, "to_html", interrupted)  # mid-way through writing
        capsys.readouterr()
        assert main(["report", str(runs), "--out", str(runs / "report")]) == code
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1, err
        assert err.startswith(f"demitasse: interrupted ({signal.Signals(code - 128).name})"), err
        assert _tree(runs) == before
        _no_temporaries(tmp_path)


# ---- 4. finite in, finite out ---------------------------------------------------------------


def _strict_json(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} in JSON")

    return json.loads(text, parse_constant=refuse)


def test_4_huge_values_are_refused_and_large_ones_fit_finite(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    rng = np.random.default_rng(1)
    np.save(tmp_path / "huge.npy", rng.standard_normal((40, 8)) * 1e300)  # finite float64
    fit = ["fit", "--vectors", str(tmp_path / "huge.npy"), "--compressor", "pca", "--out"]
    _fails(capsys, [*fit, str(tmp_path / "huge")], "too large")
    _fails(capsys, ["transform", str(files["pca"]), "--input", str(tmp_path / "huge.npy"),
                    "--out", str(tmp_path / "o.npy")], "too large")  # fmt: skip
    assert not (tmp_path / "huge").exists() and not (tmp_path / "o.npy").exists()
    # Large but float32-representable values fit to finite state and strict JSON.
    np.save(tmp_path / "large.npy", (rng.standard_normal((40, 6)) * 1e36).astype(np.float32))
    for method in ("pca", "pca-abtt", "pca:whiten=true"):
        model = tmp_path / method.replace(":", "-")
        assert main(["fit", "--vectors", str(tmp_path / "large.npy"), "--compressor", method,
                     "--precision", "int8", "--out", str(model)]) == 0  # fmt: skip
        for config in model.rglob("config.json"):
            _strict_json(config.read_text())
        for state in model.rglob("*.safetensors"):
            assert all(np.isfinite(a).all() for a in load_file(state).values()), state
        out = tmp_path / "codes.npy"
        assert main(["transform", str(model), "--input", str(tmp_path / "large.npy"),
                     "--out", str(out), "--overwrite"]) == 0  # fmt: skip
        assert np.isfinite(np.load(out)).all()


def test_4_saved_state_edited_to_hold_nan_or_inf_does_not_load(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file, save_file

    def state_holds(value: float) -> object:
        def damage(model: Path) -> None:
            path = model / "compressor" / "state.safetensors"
            arrays = {k: v.copy() for k, v in load_file(path).items()}
            arrays["components_"][0, 0] = value
            save_file(arrays, str(path))

        return damage

    def config_holds(token: str) -> object:
        def damage(model: Path) -> None:
            path = model / "compressor" / "config.json"
            config = json.loads(path.read_text())
            config["learned"]["total_variance_"] = "TOKEN"
            path.write_text(json.dumps(config).replace('"TOKEN"', token))

        return damage

    out = tmp_path / "out.npy"
    damages = [state_holds(math.nan), state_holds(math.inf), config_holds("NaN"),
               config_holds("Infinity"), config_holds("-Infinity"),
               config_holds("1e999")]  # fmt: skip
    for number, damage in enumerate(damages):
        model = tmp_path / f"damaged-{number}"
        shutil.copytree(files["pca"], model)
        damage(model)
        for target in (model, model / "compressor"):  # the model, or its bare compressor
            _fails(capsys, ["transform", str(target), "--input", str(files["vectors"]),
                            "--out", str(out)], str(model))  # fmt: skip
    assert not out.exists()


def test_4_an_undefined_score_is_null_with_its_reason(
    files: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    constant = tmp_path / "constant.csv"
    constant.write_text(
        "sentence1,sentence2,score\n" + "".join(f"{a},{b},3\n" for a, b, _ in PAIRS)
    )
    out = tmp_path / "R"
    assert main([*_eval(files, data_dir, constant), "--out", str(out)]) == 0
    records = _strict_json((out / "results.json").read_text())
    assert isinstance(records, list) and len(records) == 1
    assert records[0]["score"] is None
    assert "undefined" in records[0]["extra"]["undefined"]
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0  # reads it back


# ---- 5. a failed run leaves earlier results as they were ---------------------------------


def test_5_a_failed_eval_leaves_the_earlier_results(
    files: dict[str, Path],
    data_dir: Path,
    earlier_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = _copy(earlier_run, tmp_path)
    before = _tree(runs)
    argv = [*_eval(files, data_dir), "--out", str(runs), "--compressor", "pca"]
    _fails(capsys, [*argv, "--dims", "1000"], "nothing was evaluated")
    assert _tree(runs) == before
    _no_temporaries(tmp_path)


def test_5_a_crashed_report_leaves_the_earlier_report(
    earlier_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import demitasse.report.render as render

    runs = _copy(earlier_run, tmp_path)
    before = _tree(runs)

    def crash(*_: object) -> str:  # after the figures are drawn, before the page is written
        raise RuntimeError("a bug in the report")

    monkeypatch.setattr(render, "to_html", crash)
    with pytest.raises(RuntimeError):
        main(["report", str(runs), "--out", str(runs / "report")])
    assert _tree(runs) == before
    _no_temporaries(tmp_path)


# ---- 6. one line, never a traceback --------------------------------------------------------


def test_6_reports_of_bad_result_records_fail_in_one_line(
    earlier_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.loads((earlier_run / "results.json").read_text())[0]
    huge = "1" + "0" * 400
    bad_files = {
        "dim-text": [good | {"dim": "x"}],
        "score-text": [good | {"score": "high"}],
        "score-bool": [good | {"score": True}],
        "layer-negative": [good | {"layer": -1}],
        "extra-list": [good | {"extra": [1]}],
        "model-number": [good | {"model": 7}],
        "record-list": [[1, 2]],
        "not-a-list": {"records": [good]},
        "missing-fields": [{"model": "m"}],
    }
    out = tmp_path / "report"
    for name, content in bad_files.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(content))
        _fails(capsys, ["report", str(path), "--out", str(out)], name)
    text = json.dumps([good | {"dim": 7}]).replace('"dim": 7', f'"dim": {huge}')
    (tmp_path / "huge.json").write_text(text)
    _fails(capsys, ["report", str(tmp_path / "huge.json"), "--out", str(out)], "too large")
    (tmp_path / "nan.json").write_text(
        json.dumps([good]).replace('"score": ', '"score": NaN, "x": ')
    )
    _fails(capsys, ["report", str(tmp_path / "nan.json"), "--out", str(out)], "NaN")
    (tmp_path / "inf.json").write_text(json.dumps([good | {"score": 7.0}]).replace("7.0", "1e999"))
    _fails(capsys, ["report", str(tmp_path / "inf.json"), "--out", str(out)], "1e999")
    assert not out.exists()


def test_6_bad_flags_and_specs_fail_in_one_line(
    files: dict[str, Path], data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    _fails(capsys, [*_eval(files, data_dir), "--out", str(out), "--limit", "-1"], "--limit")
    _fails(capsys, [*_eval(files, data_dir), "--out", str(out), "--compressor", "pca:dim=4"],
           "--dim")  # fmt: skip
    _fails(capsys, ["fit", "--vectors", str(files["vectors"]), "--compressor", "pca:dim=4",
                    "--out", str(out)], "--dim")  # fmt: skip
    assert not out.exists()


def test_6_damaged_compressor_configs_fail_in_one_line(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.npy"
    huge, digits, deep = "1" + "0" * 400, "9" * 5000, "[" * 100_000 + "]" * 100_000
    damages = [  # in the compressor's config.json, and in the model's own
        ("compressor/config.json", '"input_dim": 8', f'"input_dim": {huge}'),
        ("compressor/config.json", '"input_dim": 8', f'"input_dim": {digits}'),
        ("compressor/config.json", '"input_dim": 8', '"input_dim": 1e999'),
        ("compressor/config.json", '"abtt": 0', f'"abtt": {deep}'),
        ("config.json", '"batch_size": 64', f'"batch_size": {huge}'),
        ("config.json", '"batch_size": 64', f'"batch_size": {digits}'),
        ("config.json", '"batch_size": 64', f'"batch_size": {deep}'),
    ]
    for number, (name, old, new) in enumerate(damages):
        model = tmp_path / f"damaged-{number}"
        shutil.copytree(files["pca"], model)
        config = model / name
        text = config.read_text()
        assert old in text
        config.write_text(text.replace(old, new))
        _fails(capsys, ["transform", str(model), "--input", str(files["vectors"]),
                        "--out", str(out)], str(config.parent))  # fmt: skip
    assert not out.exists()


def test_6_a_corrupt_training_checkpoint_fails_in_one_line(
    files: dict[str, Path], data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "RUN"
    state = run / "checkpoint" / "state.json"
    state.parent.mkdir(parents=True)
    argv = ["train", "--model", str(files["tiny"]), "--data", "stsb-train", "--data-dir",
            str(data_dir), "--max-steps", "1", "--out", str(run)]  # fmt: skip
    for garbage in ("garbage", "", "[1, 2]", '{"step": "x"}', '{"step": 1e999}',
                    '{"step": 1, "history": [], "stale": 0, "seconds": 1, "best": "x"}',
                    '{"step": 1, "history": [], "stale": 0, "seconds": 1e999}',
                    "[" * 100_000):  # fmt: skip
        state.write_text(garbage)
        _fails(capsys, argv, str(state))
        assert sorted(p.name for p in run.rglob("*")) == ["checkpoint", "state.json"]


def test_6_a_corrupt_cache_shard_is_a_miss(
    files: dict[str, Path],
    data_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from safetensors.numpy import load_file, save_file

    argv = _eval(files, data_dir)
    assert main([*argv, "--out", str(tmp_path / "first")]) == 0
    score = json.loads((tmp_path / "first" / "results.json").read_text())[0]["score"]
    (shard,) = (tmp_path / "cache").rglob("shard-*.safetensors")
    arrays = load_file(shard)
    poisoned = {k: (v if k == "hashes" else np.full_like(v, np.nan)) for k, v in arrays.items()}
    for number, damage in enumerate([
        lambda: shard.write_bytes(b"not a safetensors file"),
        lambda: shard.write_bytes(shard.read_bytes()[:40]),
        lambda: save_file(poisoned, str(shard)),
    ]):  # fmt: skip
        for old in (tmp_path / "cache").rglob("shard-*.safetensors"):
            if old != shard:
                old.unlink()  # the previous round's fresh shard: this round must miss
        damage()
        caplog.clear()
        assert main([*argv, "--out", str(tmp_path / f"run-{number}")]) == 0
        again = json.loads((tmp_path / f"run-{number}" / "results.json").read_text())
        assert again[0]["score"] == pytest.approx(score)
        assert any("ignoring embedding cache shard" in r.message for r in caplog.records)


# Ctrl-C arrives the instant the work is done, outside main()'s own handler: in the moment
# before `run` sets the signals aside (a real Ctrl-C hits that moment only by chance, so the
# script sends it there). Then SIGINT, SIGTERM and SIGHUP arrive after `run` returned. None of
# them may turn the finished run into a traceback or undo its output.
_CTRL_C_AFTER_THE_WORK = """
import os, signal, sys

import demitasse.cli

cli = sys.modules["demitasse.cli.main"]
work = cli.main


def work_then_ctrl_c():
    code = work()
    print("work done with", code, flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    return code


cli.main = work_then_ctrl_c
sys.argv = ["demitasse", *sys.argv[1:]]
code = cli.run()
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    os.kill(os.getpid(), signum)
print("run returned", code, flush=True)
sys.exit(code)
"""


def test_6_ctrl_c_just_after_the_work_finished(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "model"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", _CTRL_C_AFTER_THE_WORK, "fit", "--vectors",
         str(files["vectors"]), "--compressor", "pca", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in completed.stderr, completed.stderr
    assert "work done with 0" in completed.stdout
    # The interruption is reported as one (exit code 130), or not at all: the work was done.
    assert (completed.returncode, completed.stderr.count("\n")) in ((0, 0), (130, 0), (130, 1))
    # An interrupted run() leaves through os._exit (CPython would otherwise kill itself with
    # SIGINT at exit), so only a run that finished cleanly gets back to the caller.
    if completed.returncode == 0:
        assert "run returned 0" in completed.stdout
    assert (out / "compressor" / "state.safetensors").is_file()
    assert (out / ".demitasse-output.json").is_file()


# ---- 7. smaller ones ------------------------------------------------------------------------


def test_7_zero_means_zero_not_all(
    files: dict[str, Path], data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from demitasse.model import CompressedModel

    out = tmp_path / "out.npy"
    _fails(capsys, ["transform", str(files["pca"]), "--input", str(files["vectors"]),
                    "--out", str(out), "--dim", "0"], "--dim")  # fmt: skip
    _fails(capsys, [*_eval(files, data_dir), "--out", str(tmp_path / "R"), "--limit", "0"],
           "--limit")  # fmt: skip
    model = CompressedModel.load(files["pca"])
    with pytest.raises(DemitasseError, match="dim"):
        model.transform(np.load(files["vectors"]), dim=0)
    assert not list(tmp_path.iterdir())


def test_7_two_pair_files_with_one_stem(
    files: dict[str, Path], data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(files["pairs"], tmp_path / folder / "pairs.csv")
    both = f"{tmp_path / 'a' / 'pairs.csv'},{tmp_path / 'b' / 'pairs.csv'}"
    argv = _eval(files, data_dir, Path(both))
    _fails(capsys, [*argv, "--out", str(tmp_path / "R")], "both named 'pairs'")
    assert not (tmp_path / "R").exists()


def test_7_sentences_that_are_not_text(
    files: dict[str, Path], data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from demitasse.model import CompressedModel

    out = tmp_path / "out"
    for kind, value in (("dict", {"text": "a man"}), ("list", ["a", "man"]), ("int", 7)):
        pairs = tmp_path / f"{kind}-pairs.jsonl"
        pairs.write_text(json.dumps({"sentence1": value, "sentence2": "a dog", "score": 1}))
        _fails(capsys, [*_eval(files, data_dir, pairs), "--out", str(out)], kind)
        texts = tmp_path / f"{kind}-texts.jsonl"
        texts.write_text(json.dumps({"text": "a dog"}) + "\n" + json.dumps({"text": value}))
        _fails(capsys, ["fit", "--model", str(files["tiny"]), "--texts", str(texts),
                        "--out", str(out)], kind)  # fmt: skip
    raw = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({"text": pa.array([b"a man", b"a dog"], pa.binary())}), raw)
    _fails(capsys, ["fit", "--model", str(files["tiny"]), "--texts", str(raw), "--out",
                    str(out)], "bytes")  # fmt: skip
    with pytest.raises(DemitasseError, match="bytes"):
        CompressedModel(str(files["tiny"])).fit([b"a man", b"a dog"])  # type: ignore[list-item]
    assert not out.exists()


def test_7_links_and_devices_are_refused_untouched(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "target.npy").write_bytes(b"theirs")
    (tmp_path / "link.npy").symlink_to("target.npy")
    (tmp_path / "model-target").mkdir()
    (tmp_path / "model-link").symlink_to("model-target")
    os.mkfifo(tmp_path / "fifo.npy")
    # A device node of our own (root only): a test must not risk /dev/null itself.
    with contextlib.suppress(PermissionError):
        os.mknod(tmp_path / "device.npy", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    before = _tree(tmp_path)
    transform = ["transform", str(files["pca"]), "--input", str(files["vectors"]), "--out"]
    _fails(capsys, [*transform, str(tmp_path / "link.npy")], "symbolic link")
    _fails(capsys, [*transform, str(tmp_path / "fifo.npy")], "not a regular file")
    if (tmp_path / "device.npy").exists():
        _fails(capsys, [*transform, str(tmp_path / "device.npy")], "not a regular file")
    _fails(capsys, [*transform, "/dev/null"], "/dev/null")
    fit = ["fit", "--vectors", str(files["vectors"]), "--compressor", "pca", "--out"]
    _fails(capsys, [*fit, str(tmp_path / "model-link")], "symbolic link")
    assert _tree(tmp_path) == before
    assert stat.S_ISFIFO((tmp_path / "fifo.npy").lstat().st_mode)
    assert stat.S_ISCHR(Path("/dev/null").stat().st_mode)


def test_7_the_longest_names_work(files: dict[str, Path], tmp_path: Path) -> None:
    vectors = tmp_path / ("v" * 245 + ".npy")  # 249 characters
    assert main(["transform", str(files["pca"]), "--input", str(files["vectors"]),
                 "--out", str(vectors)]) == 0  # fmt: skip
    model = tmp_path / ("m" * 249)
    assert main(["fit", "--vectors", str(vectors), "--compressor", "pca", "--out", str(model)]) == 0
    assert main(["fit", "--vectors", str(vectors), "--compressor", "pca", "--out", str(model)]) == 0
    export = tmp_path / ("e" * 249)
    assert main(["export", str(files["tiny"]), "--layer", "1", "--out", str(export)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [vectors.name, model.name, export.name]
    )


def test_7_errors_name_the_users_file_not_the_temporary(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyarrow.parquet as pq

    import demitasse.persistence as persist
    from demitasse.model import CompressedModel

    def disk_full(_: object, where: str | Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where))

    model = tmp_path / "model"
    with monkeypatch.context() as patch:
        patch.setattr(persist, "save_file", disk_full)
        err = _fails(capsys, ["fit", "--vectors", str(files["vectors"]), "--compressor", "pca",
                              "--out", str(model)], str(model / "compressor"))  # fmt: skip
    assert "No space left" in err
    table = tmp_path / "vectors.parquet"
    with monkeypatch.context() as patch:
        patch.setattr(pq, "write_table", disk_full)
        _fails(capsys, ["transform", str(files["pca"]), "--input", str(files["vectors"]),
                        "--out", str(table)], str(table))  # fmt: skip
    # A library error raised while the output is being written names the output, too.
    fitted = CompressedModel.load(files["pca"])
    fitted.compressor.components_[0, 0] = np.nan  # type: ignore[union-attr]
    with pytest.raises(DemitasseError) as raised:
        fitted.save(model)
    assert str(model / "compressor") in str(raised.value) and ".dt-" not in str(raised.value)
    assert not list(tmp_path.iterdir())


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_7_outputs_get_the_usual_permissions(
    files: dict[str, Path], data_dir: Path, tmp_path: Path, umask_022: None
) -> None:
    vectors = ["--vectors", str(files["vectors"])]
    assert main(["fit", *vectors, "--compressor", "pca", "--precision", "int8",
                 "--out", str(tmp_path / "model")]) == 0  # fmt: skip
    assert main(["export", str(files["tiny"]), "--layer", "1", "--out",
                 str(tmp_path / "export")]) == 0  # fmt: skip
    assert main(["transform", str(tmp_path / "model"), "--input", str(files["vectors"]),
                 "--out", str(tmp_path / "codes.parquet")]) == 0  # fmt: skip
    assert main([*_eval(files, data_dir), "--out", str(tmp_path / "results")]) == 0
    modes = {
        str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*")
    }
    assert "model/compressor/state.safetensors" in modes and "export/model.safetensors" in modes
    wrong = {
        name: oct(mode)
        for name, mode in modes.items()
        if mode != (0o755 if (tmp_path / name).is_dir() else 0o644)
    }
    assert not wrong
