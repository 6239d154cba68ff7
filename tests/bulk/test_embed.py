"""``demitasse embed`` and ``recompress`` on the local engine: ids, codes, shards, provenance,
refusals and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse import CompressedModel
from demitasse.bulk import load_manifest, shard_provenance
from tests.bulk.conftest import Models, folder_state, rows, run_cli, sentences

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _embed(models_dir: Path, corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["embed", str(models_dir), "--input", f"{corpus}/*", "--out", str(out),
            "--shard-rows", "32", "--batch-size", "10", *extra]  # fmt: skip


def test_embed_writes_every_record_once_with_stable_ids_and_the_models_codes(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(_embed(models.int8, corpus, tmp_path / "out"), capsys)
    assert code == 0, err
    assert "240 rows" in out and "1 empty texts" in err
    table = rows(tmp_path / "out")
    ids = set(table.column("id").to_pylist())
    assert len(ids) == table.num_rows == 240
    assert {"a.txt:1", "a.txt:70", "b.txt.gz:50", "c.jsonl:1", "c.jsonl:61", "d.parquet:0",
            "d.parquet:59"} <= ids  # fmt: skip
    assert "c.jsonl:11" not in ids  # the blank line: no record
    assert table.schema.field("embedding").type == pa.list_(pa.int8(), 16)
    # The codes are the model's codes of the texts in file order.
    model = CompressedModel.load(models.int8)
    texts = sentences(240)
    texts[5], texts[7] = "", "alpha\u2028beta"
    ordered = pa.concat_tables(
        pq.read_table(p) for p in sorted((tmp_path / "out/shards").glob("*"))
    )
    codes = np.array(ordered.column("embedding").to_pylist())
    assert np.array_equal(codes, model.encode(texts, precision="int8"))
    manifest = load_manifest(tmp_path / "out")
    assert manifest is not None and manifest.complete and not manifest.errors
    # Shards cut at fixed row ranges of each file: 70 lines → 32, 32, 6.
    assert [s["rows"] for s in manifest.shards if s["file"] == 0] == [32, 32, 6]
    expected = model.provenance(precision="int8")
    for path in (tmp_path / "out/shards").iterdir():
        assert shard_provenance(path) == expected == manifest.provenance


def test_binary_codes_are_fixed_size_binary_and_an_id_column_is_kept(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["embed", str(models.binary), "--input", f"{corpus}/d.parquet", "--out",
            str(tmp_path / "out"), "--id-column", "doc"]  # fmt: skip
    assert run_cli(argv, capsys)[0] == 0
    table = rows(tmp_path / "out")
    assert table.schema.field("embedding").type == pa.binary(4)
    assert table.column("id").to_pylist()[:2] == ["d0", "d1"]
    texts = pq.read_table(corpus / "d.parquet").column("text").to_pylist()
    expected = CompressedModel.load(models.binary).encode(texts, precision="binary")
    got = np.frombuffer(b"".join(table.sort_by("id").column("embedding").to_pylist()), np.uint8)
    order = np.argsort([f"d{i}" for i in range(60)], kind="stable")
    assert np.array_equal(got.reshape(60, 4), expected[order])


def test_recompress_gives_the_models_transform_of_stored_vectors(
    models: Models, vectors: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["recompress", str(models.float32), "--input", f"{vectors}/*.parquet", "--out",
            str(tmp_path / "out"), "--shard-rows", "50"]  # fmt: skip
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    table = pa.concat_tables(pq.read_table(p) for p in sorted((tmp_path / "out/shards").iterdir()))
    stored = pa.concat_tables(pq.read_table(p) for p in sorted(vectors.iterdir()))
    assert table.column("id").to_pylist() == stored.column("id").to_pylist()
    stored_vectors = np.array(stored.column("embedding").to_pylist(), dtype=np.float32)
    expected = CompressedModel.load(models.float32).transform(stored_vectors)
    # Float32 rounding only: BLAS may sum a row in another order depending on where it falls
    # in a block, and the shards are blocks of 50 rows.
    got = np.array(table.column("embedding").to_pylist())
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_another_models_output_is_refused_and_left_untouched(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run_cli(_embed(models.int8, corpus, out), capsys)[0] == 0
    before = folder_state(out)
    for extra in ([], ["--resume"]):
        code, _, err = run_cli(_embed(models.float32, corpus, out, *extra), capsys)
        assert code == 2 and err.count("\n") == 1
        assert "holds vectors of a different model" in err
    assert folder_state(out) == before


def test_an_existing_output_needs_resume_and_a_foreign_folder_is_refused(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run_cli(_embed(models.int8, corpus, out), capsys)[0] == 0
    code, _, err = run_cli(_embed(models.int8, corpus, out), capsys)
    assert code == 2 and "holds a finished run; pass --resume" in err
    code, out_text, _ = run_cli(_embed(models.int8, corpus, out, "--resume"), capsys)
    assert code == 0 and "240 rows" in out_text  # already complete: nothing redone
    code, _, err = run_cli(_embed(models.int8, corpus, out, "--resume", "--shard-rows", "8"),
                           capsys)  # fmt: skip
    assert code == 2 and "shard_rows=32" in err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    code, _, err = run_cli(_embed(models.int8, corpus, foreign), capsys)
    assert code == 2 and "holds no demitasse output" in err
    assert (foreign / "notes.txt").read_text() == "mine"


def test_run_bulk_in_python_never_writes_into_its_inputs(
    models: Models, corpus: Path, tmp_path: Path
) -> None:
    """The CLI's rule lives in run_bulk itself: an output that is, holds or lies inside an
    input (texts or the model) is refused before anything is written."""
    from demitasse.bulk import EMBED, BulkJob, Columns, expand_inputs, run_bulk
    from demitasse.errors import DemitasseError

    texts = tmp_path / "texts"
    shutil.copytree(corpus, texts)
    inputs = expand_inputs(f"{texts}/*.txt", ("text",))
    columns = Columns("text", None, "texts", id_required=False)
    for out in (texts, tmp_path, models.int8 / "codes"):  # holds, holds, inside
        before = folder_state(tmp_path), folder_state(models.int8)
        job = BulkJob(EMBED, str(models.int8), inputs, out, columns)
        with pytest.raises(DemitasseError, match="input"):
            run_bulk(job, progress=False)
        assert (folder_state(tmp_path), folder_state(models.int8)) == before


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: None, "matches no file"),
        (lambda d: (d / "x.jsonl").write_text('{"body": "hi"}\n'), "no 'text' field"),
        (lambda d: (d / "x.jsonl").write_text('{"text": 3}\n'), "holds int, not a string"),
        (lambda d: (d / "x.jsonl").write_text('{"text": null}\n'), "holds null, not a string"),
        (lambda d: pq.write_table(pa.table({"body": ["a"]}), d / "x.parquet"), "no column 'text'"),
        (lambda d: (d / "x.csv").write_text("text\nhi\n"), "unsupported input type"),
    ],
)
def test_bad_input_ends_in_one_line_and_exit_code_2(
    models: Models, tmp_path: Path, capsys: pytest.CaptureFixture[str], make, message: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    make(data)
    code, _, err = run_cli(_embed(models.int8, data, tmp_path / "out"), capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_an_unreadable_file_in_the_middle_stops_or_is_skipped_and_recorded(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    (data / "b2.parquet").write_bytes(b"PAR1 this is not parquet")  # between b.txt.gz and c
    code, _, err = run_cli(_embed(models.int8, data, tmp_path / "stop"), capsys)
    assert code == 2 and err.count("\n") == 1 and "b2.parquet" in err
    stopped = load_manifest(tmp_path / "stop")
    assert stopped is not None and not stopped.complete
    assert {s["file"] for s in stopped.shards} == {0, 1}  # a.txt and b.txt.gz are kept
    assert stopped.errors[0]["path"].endswith("b2.parquet")
    code, _, err = run_cli(_embed(models.int8, data, tmp_path / "skip", "--on-error", "skip"),
                           capsys)  # fmt: skip
    assert code == 0 and "1 shards could not be read and were skipped" in err
    skipped = load_manifest(tmp_path / "skip")
    assert skipped is not None and skipped.complete
    assert [e["skipped"] for e in skipped.errors] == [True]
    assert rows(tmp_path / "skip").num_rows == 240
    manifest = json.loads((tmp_path / "skip/manifest.json").read_text())
    assert manifest["rows"] == 240 and manifest["errors"][0]["error"].startswith(str(data))


def test_a_bad_record_spoils_only_its_shard_with_skip(
    models: Models, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    lines = [json.dumps({"text": t}) for t in sentences(40)]
    lines[15] = '{"text": 7}'
    (data / "x.jsonl").write_text("\n".join(lines) + "\n")
    argv = _embed(models.int8, data, tmp_path / "out", "--on-error", "skip")
    argv[argv.index("--shard-rows") + 1] = "10"
    assert run_cli(argv, capsys)[0] == 0
    manifest = load_manifest(tmp_path / "out")
    assert manifest is not None
    assert [(s["shard"], s["rows"]) for s in manifest.shards] == [(0, 10), (2, 10), (3, 10)]
    assert [(e["shard"], e["skipped"]) for e in manifest.errors] == [(1, True)]
    assert "line 16" in manifest.errors[0]["error"]


def test_what_a_run_killed_before_its_first_manifest_leaves_is_no_obstacle(
    models: Models, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "shards").mkdir(parents=True)
    (out / "manifest.json.tmp").write_text('{"kind": "demitasse bu')
    code, text, err = run_cli(_embed(models.int8, corpus, out, "--resume"), capsys)
    assert code == 0 and "240 rows" in text, err


@pytest.mark.parametrize(
    "extra",
    [
        ["--vector-column", "id", "--id-column", "id"],
        ["--vector-column", "embedding", "--id-column", "embedding"],
    ],
)
def test_the_same_column_named_twice_ends_in_one_line(
    models: Models, vectors: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra
) -> None:
    argv = ["recompress", str(models.float32), "--input", f"{vectors}/*.parquet", "--out",
            str(tmp_path / "out"), *extra]  # fmt: skip
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "name two different columns" in err, err
    assert not (tmp_path / "out").exists()


def _one_record_corpus(tmp_path: Path, record: dict[str, str]) -> Path:
    """A corpus folder holding one JSON Lines file of ``record``."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text(json.dumps(record) + "\n")
    return corpus


def test_embed_refuses_the_text_column_as_the_id_column(
    models: Models, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _one_record_corpus(tmp_path, {"id": "a", "text": "a man plays"})
    code, _, err = run_cli(
        _embed(models.int8, corpus, tmp_path / "out", "--id-column", "text"), capsys
    )
    assert code == 2 and err.count("\n") == 1 and "name two different columns" in err, err


def test_embed_refuses_a_text_column_for_text_files_but_reads_tables_with_it(
    models: Models, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = _one_record_corpus(tmp_path, {"body": "a man plays"})
    code, _, _ = run_cli(_embed(models.int8, corpus, tmp_path / "out", "--text-column", "body"),
                         capsys)  # fmt: skip
    assert code == 0
    (corpus / "b.txt").write_text("a dog runs\n")
    code, _, err = run_cli(
        _embed(models.int8, corpus, tmp_path / "out2", "--text-column", "body"), capsys
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "b.txt is a text file (one text a line): --text-column applies to" in err
    assert not (tmp_path / "out2").exists()
