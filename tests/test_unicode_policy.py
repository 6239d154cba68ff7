"""Text in, always: invalid UTF-8 and lone surrogates become U+FFFD, with one warning that counts
them, in every reader, command and request (demitasse.data.unicode); never a traceback or a 500.
A text with a replaced character gives the vectors of the same text written with U+FFFD."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse import CompressedModel
from demitasse.cli.main import main
from demitasse.data import (
    argument_text,
    check_texts,
    decode_utf8,
    load_retrieval,
    load_scored_pairs,
    read_documents,
    read_texts,
    replace_in_texts,
)
from tests.helpers import SENTENCES, assert_close32, build_tiny_model, random_documents

pytestmark = pytest.mark.usefixtures("one_torch_thread")

R = "\ufffd"
#: Texts as they should come out, and the same texts with the character that is replaced.
CLEAN = ["a man is playing guitar", f"a {R} dog is running", "the cat sits on mat"]
SURROGATE = CLEAN[1].replace(R, "\ud800")  # a JSON "\ud800" escape, or a string built so
BAD_BYTES = CLEAN[1].replace(R, "\udcff").encode("utf-8", "surrogateescape")  # b"... \xff ..."


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("unicode-tiny"), layers=2)


@pytest.fixture(scope="module")
def model_dir(encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = CompressedModel(str(encoder), compressor="pca", dim=8)
    model.fit(random_documents(60), data_label="unicode-test")
    return model.save(tmp_path_factory.mktemp("unicode-model") / "m")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # main() points the "demitasse" logger at the stderr of its test; a later library call
    # must not write to that closed capture.
    logging.getLogger("demitasse").handlers.clear()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def _warned(err: str, count: int, source: str = "") -> None:
    """One warning line that names the count (and the source)."""
    lines = [line for line in err.splitlines() if "not valid Unicode" in line]
    assert lines, err
    noun = "character" if count == 1 else "characters"
    assert any(f"replaced {count} {noun}" in line and source in line for line in lines), lines


def _jsonl(path: Path, records: list[dict[str, str]]) -> Path:
    # json.dumps escapes a lone surrogate as "\ud800": the file itself is valid UTF-8.
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="ascii")
    return path


# ---- the policy -------------------------------------------------------------------------------


def test_bytes_arguments_and_strings_are_replaced_and_counted_alike() -> None:
    assert decode_utf8(b"ok") == ("ok", 0)
    assert decode_utf8(BAD_BYTES) == (CLEAN[1], 1)
    # U+FFFD already written in the data is no replacement; a truncated sequence is one.
    assert decode_utf8(R.encode() + b"\xe2\x82") == (R + R, 1)
    # An encoded surrogate is invalid UTF-8: one U+FFFD per maximal invalid subsequence.
    assert decode_utf8(b"\xed\xa0\x80") == (R * 3, 3)
    # argv hands invalid bytes over as surrogate escapes; they decode as the file's bytes do.
    assert argument_text(os.fsdecode(BAD_BYTES)) == (CLEAN[1], 1)
    assert argument_text(os.fsdecode(b"x\xed\xa0\x80")) == decode_utf8(b"x\xed\xa0\x80")
    assert argument_text(SURROGATE) == (CLEAN[1], 1)  # a surrogate that is no escaped byte
    texts = list(CLEAN)
    assert replace_in_texts(texts) is texts  # valid texts: no copy
    assert replace_in_texts([CLEAN[0], SURROGATE, "\udfff\ud800"]) == [CLEAN[0], CLEAN[1], R + R]


def test_check_texts_replaces_lone_surrogates_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="demitasse"):
        assert check_texts([CLEAN[0], SURROGATE, "\ud800\udfff!"], "queries") == [
            CLEAN[0],
            CLEAN[1],
            R + R + "!",
        ]
    (message,) = [r.getMessage() for r in caplog.records if "not valid Unicode" in r.getMessage()]
    assert message.startswith("queries: replaced 3 characters") and "in 2 texts" in message
    assert "item 1" in message


def test_every_file_reader_replaces_invalid_utf8_and_json_surrogates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    txt = tmp_path / "t.txt"
    txt.write_bytes(b"\n".join([CLEAN[0].encode(), BAD_BYTES, CLEAN[2].encode()]) + b"\n")
    jsonl = _jsonl(
        tmp_path / "t.jsonl",
        [{"_id": str(i), "text": t} for i, t in enumerate([CLEAN[0], SURROGATE, CLEAN[2]])],
    )
    csv = tmp_path / "t.csv"
    csv.write_bytes(b"id,text\n0,x\n1," + BAD_BYTES + b"\n")
    with caplog.at_level(logging.WARNING, logger="demitasse"):
        assert read_texts(txt) == CLEAN
        assert read_texts(jsonl, aligned=True) == CLEAN
        assert read_texts(csv) == ["x", CLEAN[1]]
        assert read_documents(jsonl) == (["0", "1", "2"], CLEAN)
        assert read_documents(txt) == (["1", "2", "3"], CLEAN)
    warnings = [r.getMessage() for r in caplog.records if "not valid Unicode" in r.getMessage()]
    assert len(warnings) == 5, warnings  # one per file read
    assert all("replaced 1 character" in w for w in warnings), warnings
    assert all(("line 3" if w.startswith(str(csv)) else "line 2") in w for w in warnings)
    pairs = tmp_path / "p.jsonl"
    _jsonl(pairs, [{"sentence1": SURROGATE, "sentence2": CLEAN[0], "score": "1"}])
    loaded = load_scored_pairs(pairs)
    assert (loaded.sentences1, loaded.sentences2) == ([CLEAN[1]], [CLEAN[0]])


def test_a_parquet_string_column_of_invalid_utf8_is_read_under_the_policy(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Arrow does not check UTF-8 when it reads a Parquet file: such a column is possible.
    column = pa.array([CLEAN[0].encode(), BAD_BYTES]).view(pa.string())
    pq.write_table(pa.table({"text": column}), tmp_path / "t.parquet")
    argv = ["embed", str(model_dir), "--input", str(tmp_path / "t.parquet"), "--out"]
    code, _, err = _run(capsys, *argv, str(tmp_path / "out"))
    assert code == 0, err
    _warned(err, 1, "row 1")
    model = CompressedModel.load(model_dir)
    assert np.array_equal(_embedded(tmp_path / "out"), model.encode(CLEAN[:2]))  # one batch


# ---- the library and the commands -------------------------------------------------------------


def test_the_python_api_encodes_a_lone_surrogate_as_u_fffd(
    model_dir: Path, encoder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = CompressedModel.load(model_dir)
    with caplog.at_level(logging.WARNING, logger="demitasse"):
        replaced = model.encode(["a\ud800b", *SENTENCES[:2]])
    assert any("replaced 1 character" in r.getMessage() for r in caplog.records)
    assert np.array_equal(replaced, model.encode([f"a{R}b", *SENTENCES[:2]]))
    fitted = CompressedModel(str(encoder), compressor="pca", dim=4)
    fitted.fit([*random_documents(20), SURROGATE])  # no tokenizer error, no hash error
    assert fitted.is_fitted


def test_encode_and_fit_read_files_with_invalid_text(
    model_dir: Path, encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _jsonl(tmp_path / "bad.jsonl", [{"text": t} for t in (CLEAN[0], SURROGATE, CLEAN[2])])
    raw = tmp_path / "raw.txt"
    raw.write_bytes(b"\n".join([CLEAN[0].encode(), BAD_BYTES, CLEAN[2].encode()]))
    clean = _jsonl(tmp_path / "clean.jsonl", [{"text": t} for t in CLEAN])
    outputs = {}
    for source in (bad, raw, clean):
        out = tmp_path / f"{source.stem}.npy"
        code, _, err = _run(
            capsys, "encode", str(model_dir), "--input", str(source), "--out", str(out)
        )
        assert code == 0, err
        if source is not clean:
            _warned(err, 1, f"{source.name}: replaced")
        outputs[source.stem] = np.load(out)
    assert np.array_equal(outputs["bad"], outputs["clean"])
    assert np.array_equal(outputs["raw"], outputs["clean"])
    texts = tmp_path / "fit.jsonl"
    _jsonl(texts, [{"text": t} for t in [*random_documents(30), SURROGATE]])
    code, _, err = _run(
        capsys,
        "fit",
        "--model",
        str(encoder),
        "--texts",
        str(texts),
        "--compressor",
        "pca",
        "--dim",
        "4",
        "--out",
        str(tmp_path / "fitted"),
    )
    assert code == 0, err
    _warned(err, 1, "fit.jsonl")


def _embedded(out: Path) -> np.ndarray:
    shards = sorted((out / "shards").glob("*.parquet"))
    table = pa.concat_tables(pq.read_table(p) for p in shards)
    return np.array(table.column("embedding").to_pylist(), dtype=np.float32)


def test_embed_embeds_every_record_of_invalid_text(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_bytes(b"\n".join([CLEAN[0].encode(), BAD_BYTES]) + b"\n")
    _jsonl(inputs / "b.jsonl", [{"text": SURROGATE, "id": "x\ud800"}])
    argv = ["embed", str(model_dir), "--input", f"{inputs}/*", "--out", str(tmp_path / "out")]
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    assert "3 rows" in out, out
    _warned(err, 1, "a.txt")
    _warned(err, 1, "b.jsonl")
    model = CompressedModel.load(model_dir)
    # One batch a file: a.txt's two texts, then b.jsonl's one.
    expected = np.concatenate([model.encode(CLEAN[:2]), model.encode(CLEAN[1:2])])
    assert_close32(_embedded(tmp_path / "out"), expected)


def test_index_and_search_take_invalid_text_and_queries(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lancedb")
    docs = random_documents(12)
    corpus = _jsonl(
        tmp_path / "corpus.jsonl",
        [{"_id": f"d{i}", "text": t} for i, t in enumerate([*docs, SURROGATE])],
    )
    db = str(tmp_path / "db")
    code, out, err = _run(capsys, "index", str(model_dir), "--input", str(corpus), "--db", db)
    assert code == 0, err
    assert "added 13 documents" in out
    _warned(err, 1, "corpus.jsonl")
    query = os.fsdecode(BAD_BYTES)  # how Python hands over an argument with the byte 0xff
    code, out, err = _run(
        capsys,
        "search",
        str(model_dir),
        "--db",
        db,
        "--json",
        "--k",
        "1",
        "--query",
        query,
        "--query",
        "\ud800",
    )
    assert code == 0, err
    _warned(err, 2, "--query")
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["query"] for a in answers] == [CLEAN[1], R]
    assert answers[0]["hits"][0] == {
        "id": "d12",
        "score": answers[0]["hits"][0]["score"],
        "text": CLEAN[1],
    }


def _retrieval_files(folder: Path, bad_query: bytes) -> list[str]:
    folder.mkdir()
    docs = random_documents(20)
    _jsonl(
        folder / "corpus.jsonl",
        [{"_id": f"d{i}", "title": "", "text": t} for i, t in enumerate([*docs[:-1], SURROGATE])],
    )
    queries = [" ".join(d.split()[:4]).encode() for d in docs[:5]] + [bad_query]
    (folder / "queries.tsv").write_bytes(
        b"id\ttext\n" + b"".join(b"q%d\t%s\n" % (i, q) for i, q in enumerate(queries))
    )
    qrels = ["query-id\tcorpus-id\tscore", *(f"q{i}\td{i}\t1" for i in range(5)), "q5\td19\t1"]
    (folder / "qrels.tsv").write_text("\n".join(qrels) + "\n")
    return [
        "--corpus",
        str(folder / "corpus.jsonl"),
        "--queries",
        str(folder / "queries.tsv"),
        "--qrels",
        str(folder / "qrels.tsv"),
    ]


def test_eval_and_tune_read_retrieval_files_with_invalid_text(
    model_dir: Path, encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _retrieval_files(tmp_path / "data", BAD_BYTES)
    dataset = load_retrieval(*files[1::2])
    assert dataset.corpus_texts[-1] == CLEAN[1] and dataset.query_texts[-1] == CLEAN[1]
    code, _, err = _run(
        capsys, "eval", "--model", str(model_dir), *files, "--out", str(tmp_path / "eval")
    )
    assert code == 0, err
    _warned(err, 1, "corpus.jsonl")
    _warned(err, 1, "queries.tsv")
    code, _, err = _run(
        capsys,
        "tune",
        "--model",
        str(encoder),
        "--corpus",
        files[1],
        "--queries",
        files[3],
        "--compressors",
        "pca",
        "--codes",
        "none",
        "--min-retention",
        "0.5",
        "--quiet",
        "--out",
        str(tmp_path / "tuned"),
    )
    assert code == 0, err
    _warned(err, 1, "corpus.jsonl")


# ---- the server -------------------------------------------------------------------------------


def test_the_server_embeds_a_lone_surrogate_and_invalid_utf8_as_u_fffd(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from demitasse.serve import load_served_model
    from tests.serve.servers import post, running

    model = load_served_model(model_dir)
    escaped = json.dumps({"model": "tiny", "input": [CLEAN[0], SURROGATE]}).encode()
    assert b"\\ud800" in escaped
    raw = b'{"model": "tiny", "input": ["' + BAD_BYTES + b'"]}'
    with caplog.at_level(logging.WARNING, logger="demitasse"), running(model) as url:
        answers = [post(url, "/embeddings", body) for body in (escaped, raw)]
        status, expected = post(url, "/embeddings", {"model": "tiny", "input": CLEAN[:2]})
    assert status == 200
    (status, surrogate), (status_raw, invalid) = answers
    assert status == status_raw == 200, answers
    vectors = np.array([d["embedding"] for d in expected["data"]], dtype=np.float32)
    assert_close32(np.array([d["embedding"] for d in surrogate["data"]], np.float32), vectors)
    assert_close32(np.array([d["embedding"] for d in invalid["data"]], np.float32), vectors[1:])
    warnings = [r.getMessage() for r in caplog.records if "not valid Unicode" in r.getMessage()]
    assert any(w.startswith("request: replaced 1 character") for w in warnings), warnings
