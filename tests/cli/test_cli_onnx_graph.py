"""``fit`` writes a transformer encoder's ONNX graph into the model directory by default
(``--no-onnx`` not), ``export --format onnx`` adds it to a model directory, and ``encode`` runs
it in a process where torch and transformers cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from tests.encoders.test_onnx_graph import BLOCKED
from tests.helpers import WORDS, build_tiny_model


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli-graph")
    build_tiny_model(root / "tiny")
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(3, 10))) for _ in range(80)]
    (root / "texts.txt").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))


def _fit(workspace: Path, out: Path, *extra: str) -> list[str]:
    return ["fit", "--model", str(workspace / "tiny" / "model"), "--layer", "2",
            "--texts", str(workspace / "texts.txt"), "--compressor", "pca", "--dim", "8",
            "--precision", "int8", *extra, "--out", str(out)]  # fmt: skip


def test_fit_writes_the_graph_and_encode_runs_it_without_torch(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m"
    assert main(_fit(workspace, model)) == 0
    assert "its encoder as an ONNX graph in" in capsys.readouterr().out
    assert json.loads((model / "config.json").read_text())["graph"] == "encoder"
    assert (model / "encoder" / "model.onnx").is_file()
    texts = workspace / "texts.txt"
    expected = tmp_path / "torch.npy"
    assert main(["encode", str(model), "--input", str(texts), "--out", str(expected),
                 "--precision", "int8"]) == 0  # fmt: skip
    script = BLOCKED + textwrap.dedent(
        f"""
        from demitasse.cli.main import main
        code = main(["encode", {str(model)!r}, "--input", {str(texts)!r},
                     "--out", {str(tmp_path / "core.npy")!r}, "--precision", "int8"])
        assert code == 0, code
        assert "torch" not in sys.modules
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    torch_codes, core_codes = np.load(expected), np.load(tmp_path / "core.npy")
    assert torch_codes.shape == core_codes.shape == (80, 8)
    assert np.abs(torch_codes.astype(int) - core_codes.astype(int)).max() <= 1
    assert np.mean(torch_codes == core_codes) >= 0.99


def test_no_onnx_writes_none_and_export_adds_it(workspace: Path, tmp_path: Path) -> None:
    model, with_graph = tmp_path / "m", tmp_path / "m-onnx"
    assert main(_fit(workspace, model, "--no-onnx", "--backend", "onnx-int8")) == 0
    assert not (model / "encoder").exists()
    assert json.loads((model / "config.json").read_text())["graph"] is None
    assert main(["export", str(model), "--format", "onnx", "--out", str(with_graph)]) == 0
    assert sorted(p.name for p in (with_graph / "encoder").iterdir()) == [
        "config.json", "model.onnx", "model_qint8.onnx", "tokenizer.json",
    ]  # fmt: skip
    before = json.loads((model / "config.json").read_text())
    after = json.loads((with_graph / "config.json").read_text())
    # The same parts (the same hashes), and the graph's hash beside theirs.
    hashes = {**before["part_hashes"], "encoder/": after["part_hashes"]["encoder/"]}
    assert {**before, "graph": "encoder", "part_hashes": hashes} == after


def test_onnx_needs_a_transformer_encoder(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = tmp_path / "v.npy"
    np.save(vectors, np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32))
    fit = ["fit", "--vectors", str(vectors), "--compressor", "pca", "--dim", "4"]
    assert main([*fit, "--onnx", "--out", str(tmp_path / "v")]) == 2
    assert "a vectors-only model has none" in capsys.readouterr().err
    assert main([*fit, "--out", str(tmp_path / "v")]) == 0  # default: nothing to write
    assert not (tmp_path / "v" / "encoder").exists()
    out = ["--out", str(tmp_path / "x")]
    assert main(["export", str(tmp_path / "v"), "--format", "onnx", *out]) == 2
    assert "none (vectors only)" in capsys.readouterr().err
    assert main(["export", str(workspace / "tiny" / "model"), "--format", "onnx", *out]) == 2
    assert "--format onnx takes a model directory" in capsys.readouterr().err
