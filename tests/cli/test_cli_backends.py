"""``--backend`` on the command line: fit saves it, encode and eval use and override it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from tests.helpers import WORDS, build_tiny_model


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli-backends")
    build_tiny_model(root / "tiny")
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(3, 10))) for _ in range(60)]
    (root / "texts.txt").write_text("\n".join(lines) + "\n")
    return root


def test_fit_saves_the_backend_and_encode_uses_or_replaces_it(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    model, texts = tmp_path / "m", workspace / "texts.txt"
    fit = ["fit", "--model", str(workspace / "tiny" / "model"), "--texts", str(texts)]
    assert (
        main([*fit, "--compressor", "pca", "--dim", "8", "--backend", "onnx", "--out", str(model)])
        == 0
    )
    assert json.loads((model / "config.json").read_text())["backend"] == "onnx"
    outputs = {}
    for backend in (None, "torch", "onnx-int8"):
        out = tmp_path / f"{backend}.parquet"
        extra = [] if backend is None else ["--backend", backend]
        encode = ["encode", str(model), "--input", str(texts), "--out", str(out)]
        assert main([*encode, *extra]) == 0
        import pyarrow.parquet as pq

        table = pq.read_table(out)
        provenance = json.loads(table.schema.metadata[b"demitasse"])
        assert provenance["backend"] == (backend or "onnx")
        outputs[backend] = np.stack(table.column(0).to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(outputs[None], outputs["torch"], atol=1e-4)
    assert not np.array_equal(outputs["torch"], outputs["onnx-int8"])


def test_eval_records_say_which_backend_made_them(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    lines = [line.replace(",", " ") for line in (workspace / "texts.txt").read_text().splitlines()]
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sentence1,sentence2,score\n" + "".join(
        f"{a},{b},{i % 5}\n" for i, (a, b) in enumerate(zip(lines[:30], lines[30:], strict=True))
    ))  # fmt: skip
    out = tmp_path / "results"
    args = ["eval", "--model", str(workspace / "tiny" / "model"), "--datasets", str(pairs),
            "--fit-data", str(workspace / "texts.txt"), "--dims", "32", "--out", str(out),
            "--backend", "onnx-int8"]  # fmt: skip
    assert main(args) == 0
    records = json.loads((out / "results.json").read_text())
    assert records and all(r["extra"]["backend"] == "onnx-int8" for r in records)
