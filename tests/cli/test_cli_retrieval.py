"""``demitasse eval`` retrieval on any data: BEIR folders, the user's own files, quantised
search with rescoring against the encoder's full output, rotated binary codes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse import CompressedModel
from demitasse.cli import main
from tests.helpers import WORDS, build_tiny_model

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss-cpu (the eval extra) is absent"
)

HIDDEN = 32  # the tiny model's width


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden=HIDDEN)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DEMITASSE_DATA", raising=False)


def _sentence(i: int) -> str:
    return " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11))


def _beir_folder(folder: Path, offset: int = 0, unknown: int = 0) -> Path:
    """A BEIR folder as published: metadata fields, CRLF qrels with a header; ``unknown``
    judgements name documents missing from the corpus."""
    (folder / "qrels").mkdir(parents=True)
    docs = [
        {"_id": f"d{i}", "title": "", "text": _sentence(i + offset), "metadata": {"n": i}}
        for i in range(60)
    ]
    queries = [{"_id": str(i), "text": _sentence(i + offset)} for i in range(12)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    rows = [f"{i}\td{i}\t1" for i in range(12)] + [f"{i}\td{i + 12}\t1" for i in range(12)]
    rows += [f"0\tgone{i}\t1" for i in range(unknown)]
    (folder / "qrels" / "test.tsv").write_bytes(
        "\r\n".join(["query-id\tcorpus-id\tscore", *rows, ""]).encode()
    )
    return folder


def _records(out: Path) -> list[dict]:
    """The evaluated model's records (eval --model also scores the full model beside it)."""
    records = json.loads((out / "results.json").read_text())
    return [r for r in records if r["extra"].get("reference") != "full model"]


def _fails_cleanly(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("demitasse: error:") and "\n" not in err, err
    assert expected in err, err


def test_a_sweep_over_beir_folders_with_rotation_and_rescoring(
    tiny_model: Path, tmp_path: Path
) -> None:
    first = _beir_folder(tmp_path / "scifact")
    second = _beir_folder(tmp_path / "arguana", offset=5, unknown=1)  # 1 of 25: loads
    texts = tmp_path / "fit.txt"
    texts.write_text("\n".join(_sentence(i) for i in range(100, 180)) + "\n")
    out = tmp_path / "out"
    argv = [
        "eval", "--model", str(tiny_model), "--beir", f"{first},{second}",
        "--compressor", "pca", "--dims", "8", "--precision", "float32,binary",
        "--rotation", "itq", "--rescore", "2,4", "--fit-data", str(texts), "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    records = _records(out)
    assert {r["task"] for r in records} == {"retrieval"}  # --beir implies --tasks retrieval
    assert {r["dataset"] for r in records} == {"SciFact", "ArguAna", "avg"}
    seen = {
        (r["precision"], r["extra"]["rescore"], r["extra"]["rescore_source"],
         r["extra"]["index_bytes"], r["extra"]["store_bytes"])
        for r in records
    }  # fmt: skip
    assert seen == {
        ("float32", 1, None, 32, 0),
        ("binary", 1, None, 1, 0),
        ("binary", 2, "encoder", 1, HIDDEN),  # int8 of the full 32-d output
        ("binary", 4, "encoder", 1, HIDDEN),
    }
    assert {r["extra"].get("rotation") for r in records if r["precision"] == "binary"} == {"itq"}
    # every byte a document costs: the codes and, where it rescores, the int8 copy
    assert all(
        r["bytes_per_vector"] == 1 + r["extra"]["store_bytes"]
        for r in records
        if r["precision"] == "binary"
    )


def test_own_files_in_any_format_and_a_rescoring_model_directory(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _beir_folder(tmp_path / "mine")
    queries = tmp_path / "questions.tsv"
    lines = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    queries.write_text("id\ttext\n" + "".join(f"{q['_id']}\t{q['text']}\n" for q in lines))
    qrels = tmp_path / "judged.parquet"
    pq.write_table(
        pa.table({"query_id": [str(i) for i in range(12)], "doc_id": [f"d{i}" for i in range(12)],
                  "score": [1] * 12}),
        qrels,
    )  # fmt: skip
    corpus = folder / "corpus.jsonl"
    files = ["--corpus", str(corpus), "--queries", str(queries), "--qrels", str(qrels)]
    model_dir = tmp_path / "model"
    texts = [_sentence(i) for i in range(100, 180)]
    model = CompressedModel(tiny_model, compressor="pca", dim=8, precision="binary",
                            quantizer_params={"rotation": "random"}, rescore_factor=3)  # fmt: skip
    model.fit(texts).save(model_dir)

    capsys.readouterr()
    assert main(["eval", "--model", str(model_dir), *files, "--out", str(tmp_path / "a")]) == 0
    records = _records(tmp_path / "a")
    # Beside the full model: its scores, each one's retention, the bytes with their split.
    everything = json.loads((tmp_path / "a" / "results.json").read_text())
    full = [r for r in everything if r["extra"].get("reference") == "full model"]
    assert {(r["method"], r["precision"], r["dim"]) for r in full} == {("none", "float32", HIDDEN)}
    printed = capsys.readouterr().out
    assert "against the full model" in printed and "% kept" in printed
    assert f"{1 + HIDDEN} bytes a document (1 codes + {HIDDEN} rescoring copy)" in printed
    assert {r["dataset"] for r in records} == {"mine"}  # named after the corpus's folder
    assert {(r["extra"]["rescore"], r["extra"]["rescore_precision"]) for r in records} == {
        (3, "int8")
    }
    # --rescore replaces the model's factor; float32 vectors need no fitted ranges.
    argv = ["eval", "--model", str(model_dir), *files, "--rescore", "10",
            "--rescore-precision", "float32", "--out", str(tmp_path / "b")]  # fmt: skip
    assert main(argv) == 0
    extra = {json.dumps(r["extra"], sort_keys=True) for r in _records(tmp_path / "b")}
    assert len(extra) == 1
    (only,) = extra
    assert json.loads(only)["rescore"] == 10
    assert json.loads(only)["store_bytes"] == 4 * HIDDEN


def test_retrieval_mistakes_are_one_line(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _beir_folder(tmp_path / "scifact")
    broken = _beir_folder(tmp_path / "broken", unknown=3)  # 3 of 27 judgements: 11 %
    base = ["eval", "--model", str(tiny_model), "--out", str(tmp_path / "out")]
    cases = [
        (["--beir", str(broken)], "11.1 % of the judgements name unknown ids"),
        (["--beir", str(folder), "--corpus", "c.jsonl"], "not both"),
        (["--corpus", str(folder / "corpus.jsonl")], "go together"),
        (["--beir", str(folder), "--tasks", "sts"], "add retrieval to --tasks"),
        (["--beir", str(folder), "--rescore", "0.5"], "--rescore takes factors ≥ 1"),
        (["--beir", str(folder), "--rescore", "4"], "add int8 or binary to --precision"),
        (["--rescore-precision", "int8"], "--rescore-precision needs --rescore"),
        (["--beir", str(folder), "--rotation", "itq"], "add binary to --precision"),
        (["--split", "train"], "--split applies to --beir"),
        (["--beir", str(folder), "--split", "dev"], "unknown split 'dev'"),
    ]
    for arguments, message in cases:
        _fails_cleanly(capsys, [*base, *arguments], message)
    assert not (tmp_path / "out").exists()
    model_dir = tmp_path / "plain"
    CompressedModel(tiny_model, compressor="pca", dim=8).fit(
        [_sentence(i) for i in range(40)]
    ).save(model_dir)
    on_model = ["eval", "--model", str(model_dir), "--beir", str(folder)]
    _fails_cleanly(capsys, [*on_model, "--rescore", "4"], "keeps no int8 ranges")
    _fails_cleanly(capsys, [*on_model, "--rescore", "2,4"], "give one --rescore factor")
    _fails_cleanly(capsys, [*on_model, "--rotation", "itq"], "carries its own quantiser")


def test_eval_sweeps_codebook_codes_searched_asymmetrically(
    tiny_model: Path, tmp_path: Path
) -> None:
    folder = _beir_folder(tmp_path / "scifact")
    texts = tmp_path / "fit.txt"
    texts.write_text("\n".join(_sentence(i) for i in range(100, 400)) + "\n")
    out = tmp_path / "out"
    argv = [
        "eval", "--model", str(tiny_model), "--beir", str(folder), "--compressor", "none",
        "--precision", "float32,int8,rq4,pq6", "--fit-data", str(texts), "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    records = [r for r in _records(out) if r["metric"] == "ndcg@10"]
    seen = {
        (r["precision"], r["extra"]["search"], r["bytes_per_vector"], r["extra"]["index_bytes"])
        for r in records
    }
    assert seen == {
        ("float32", "cosine", 4 * HIDDEN, 4 * HIDDEN),
        ("int8", "asymmetric", HIDDEN, HIDDEN),
        ("rq4", "asymmetric", 4, 4),
        ("pq6", "asymmetric", 6, 6),
    }
    assert all(0 <= r["score"] <= 100 for r in records)
