"""``demitasse eval --vectors``: the encoder's vectors of the retrieval corpus, computed
already, stand for its output on the corpus documents, in a sweep and for a model directory:
the same scores as encoding them, without the encoder ever seeing a document; and every
vectors file that cannot be that output is refused in one line before anything is written."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import demitasse.loading
from demitasse import CompressedModel
from demitasse.cli import main
from demitasse.data.beir import load_beir
from demitasse.encoders.transformer import TransformerEncoder
from demitasse.loading import load_encoder
from tests.helpers import random_documents, write_beir

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss-cpu (the eval extra) is absent"
)

HIDDEN = 32  # the tiny model's width
LAYERS = 3


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=LAYERS, hidden=HIDDEN)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DEMITASSE_DATA", raising=False)


@pytest.fixture
def requested(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text a transformer encoder is asked for (cached or not)."""
    asked: list[str] = []
    original = TransformerEncoder.encode_layers

    def spy(self: TransformerEncoder, texts: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        asked.extend(texts)
        return original(self, texts, *args, **kwargs)

    monkeypatch.setattr(TransformerEncoder, "encode_layers", spy)
    return asked


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every encoder load, by name."""
    loaded: list[str] = []
    original = demitasse.loading.load_encoder

    def spy(name: Any, **kwargs: Any) -> Any:
        loaded.append(str(name))
        return original(name, **kwargs)

    monkeypatch.setattr(demitasse.loading, "load_encoder", spy)
    return loaded


def _corpus(folder: Path) -> list[str]:
    return load_beir(folder).corpus_texts


def _scores(out: Path) -> dict[tuple[Any, ...], float]:
    """Each figure by what it measures (not where the vectors came from)."""
    records = json.loads((out / "results.json").read_text())
    return {
        (r["task"], r["dataset"], r["metric"], r["layer"], r["method"], r["dim"],
         r["precision"], r["extra"].get("rescore"), r["extra"].get("reference")): r["score"]
        for r in records
    }  # fmt: skip


def _fit_file(tmp_path: Path) -> Path:
    texts = tmp_path / "fit.txt"
    texts.write_text("\n".join(random_documents(80, seed=7)) + "\n")
    return texts


def test_a_sweep_at_one_layer_scores_given_vectors_as_encoded_ones(
    tiny_model: Path, tmp_path: Path, requested: list[str]
) -> None:
    beir = write_beir(tmp_path / "beir")
    corpus = _corpus(beir)
    argv = ["eval", "--model", str(tiny_model), "--beir", str(beir), "--layers", "2",
            "--compressor", "none,pca", "--dims", "8", "--precision", "float32,int8",
            "--rescore", "2", "--fit-data", str(_fit_file(tmp_path))]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path / "encoded")]) == 0
    vectors = tmp_path / "corpus.npy"  # the encoder's own output at layer 2, as published
    np.save(vectors, load_encoder(tiny_model).encode(corpus, layer=2))
    requested.clear()

    assert main([*argv, "--vectors", str(vectors), "--out", str(tmp_path / "given")]) == 0
    assert not set(corpus) & set(requested)  # not one document reached the encoder
    assert requested  # the queries and fit texts did
    encoded, given = _scores(tmp_path / "encoded"), _scores(tmp_path / "given")
    assert given == encoded
    records = json.loads((tmp_path / "given" / "results.json").read_text())
    assert {r["extra"]["corpus_vectors"] for r in records} == {str(vectors)}
    sha256 = hashlib.sha256(vectors.read_bytes()).hexdigest()
    assert {r["extra"]["corpus_vectors_sha256"] for r in records} == {sha256}


def test_a_model_directory_scores_given_vectors_as_it_encodes_them(
    tiny_model: Path, tmp_path: Path, requested: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    beir = write_beir(tmp_path / "beir")
    corpus = _corpus(beir)
    model_dir = tmp_path / "model"
    CompressedModel(tiny_model, compressor="pca", dim=8, precision="int8",
                    rescore_factor=2).fit(random_documents(80, seed=3)).save(model_dir)  # fmt: skip
    argv = ["eval", "--model", str(model_dir), "--beir", str(beir), "--tasks", "retrieval,sts",
            "--datasets", str(_sts_file(tmp_path)), "--data-dir", str(tmp_path)]  # fmt: skip
    assert main([*argv, "--out", str(tmp_path / "encoded")]) == 0
    table = tmp_path / "corpus.parquet"  # a Parquet list column, named as the user likes
    rows = load_encoder(tiny_model).encode(corpus).astype(np.float64)  # float64: read as float32
    pq.write_table(pa.table({"vec": list(rows)}), table)
    requested.clear()
    capsys.readouterr()

    given = [*argv, "--vectors", str(table), "--vector-column", "vec"]
    assert main([*given, "--out", str(tmp_path / "given")]) == 0
    # Neither the model nor the full model it is compared with encoded a document.
    assert not set(corpus) & set(requested)
    encoded, scored = _scores(tmp_path / "encoded"), _scores(tmp_path / "given")
    assert scored == encoded
    assert any(key[-1] == "full model" for key in scored)
    records = json.loads((tmp_path / "given" / "results.json").read_text())
    tagged = {r["task"] for r in records if "corpus_vectors" in r["extra"]}
    assert tagged == {"retrieval"}  # STS never saw the file's vectors


def _sts_file(tmp_path: Path) -> Path:
    pairs = tmp_path / "pairs.tsv"
    texts = random_documents(30, seed=11)
    rows = [f"{texts[i]}\t{texts[i + 1]}\t{i % 5}" for i in range(0, 28, 2)]
    pairs.write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n")
    return pairs


def test_vectors_that_cannot_be_the_corpus_output_are_refused_in_one_line(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[str]
) -> None:
    beir = write_beir(tmp_path / "beir")
    other = write_beir(tmp_path / "other", seed=1)
    documents = len(_corpus(beir))
    files = {
        "narrow": np.ones((documents, 5), np.float32),
        "short": np.ones((10, HIDDEN), np.float32),
        "codes": np.ones((documents, HIDDEN), np.int8),
        "nan": np.full((documents, HIDDEN), np.nan, np.float32),
        "ok": np.ones((documents, HIDDEN), np.float32),
    }
    for name, array in files.items():
        np.save(tmp_path / f"{name}.npy", array)
    model_dir = tmp_path / "model"
    CompressedModel(tiny_model, compressor="pca", dim=8).fit(random_documents(40)).save(model_dir)
    loads.clear()
    out = tmp_path / "out"
    sweep = ["eval", "--model", str(tiny_model), "--fit-data", str(_fit_file(tmp_path)),
             "--out", str(out), "--vectors"]  # fmt: skip
    on_dir = ["eval", "--model", str(model_dir), "--out", str(out), "--vectors"]
    at = ["--beir", str(beir)]
    cases = [  # (argv, message, whether the encoder may load before the refusal)
        ([*sweep, f"{tmp_path}/ok.npy"], "name it with --beir", False),
        ([*sweep, f"{tmp_path}/ok.npy", *at, "--tasks", "sts"], "add retrieval to", False),
        ([*sweep, f"{tmp_path}/ok.npy", "--beir", f"{beir},{other}"], "one corpus's", False),
        ([*sweep, f"{tmp_path}/short.npy", *at], f"10 vectors for the {documents}", False),
        ([*on_dir, f"{tmp_path}/short.npy", *at], f"10 vectors for the {documents}", False),
        ([*sweep, f"{tmp_path}/codes.npy", *at], "int8 values, not float vectors", False),
        ([*sweep, f"{tmp_path}/nan.npy", *at], "row 0 contains NaN or inf", False),
        ([*sweep, f"{tmp_path}/none.npy", *at], "none.npy", False),
        ([*sweep, f"{tmp_path}/ok.npy", *at, "--layers", "1,2"], "at one layer", False),
        ([*sweep, f"{tmp_path}/ok.npy", *at, "--layers", "all"], "at one layer", False),
        ([*on_dir, f"{tmp_path}/narrow.npy", *at], "vectors 5 wide, but", False),
        ([*sweep, f"{tmp_path}/narrow.npy", *at], f"takes the encoder's {HIDDEN}-dim", True),
        ([*sweep, f"{tmp_path}/ok.npy", *at, "--layers", "9"], "layer 9 does not exist", True),
    ]
    for argv, message, may_load in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("demitasse: error:") and "\n" not in err, err
        assert message in err and "Traceback" not in err, err
        assert bool(loads) == may_load, (argv, loads)
        assert not out.exists()
        loads.clear()
