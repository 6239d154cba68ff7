"""LanceDB tables written by ``LanceStore`` / ``demitasse index`` and searched by
``LanceStore.search`` / ``demitasse search``: a real LanceDB directory in tmp_path, the tiny
random transformer, and the in-memory search of the same model as the reference."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse import CompressedModel
from demitasse.cli import main
from demitasse.errors import DataError
from demitasse.model import encoder_vectors
from demitasse.provenance import ProvenanceError, provenance_json
from tests.helpers import WORDS, build_tiny_model, synthetic_beir

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("lancedb") is None, reason="lancedb (the vectordb extra) is absent"
    ),
    # The store encodes documents in batches of its own, the in-memory search all at once;
    # equal vectors then need one torch thread, since multi-threaded kernels round differently
    # for different batch shapes (with 2 threads the scores differ in the last bit).
    pytest.mark.usefixtures("one_torch_thread"),
]

N_DOCS, N_QUERIES = 240, 12


def _sentences(n: int, seed: int, words: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, words)) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str], list[str]]:
    """Ids, texts and query texts of a synthetic BEIR set, worded from the tiny vocabulary."""
    beir = synthetic_beir({f"q{i}": {f"d{i}": 1} for i in range(N_QUERIES)}, N_DOCS, N_QUERIES)
    beir = dataclasses.replace(
        beir,
        corpus_texts=_sentences(N_DOCS, seed=0, words=7),
        query_texts=_sentences(N_QUERIES, seed=1, words=4),
    )
    return beir.corpus_ids, beir.corpus_texts, beir.query_texts


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


#: Binary codes go through LanceDB's Hamming search, the others through a scan.
CONFIGS: dict[str, dict] = {
    "binary-itq-rescored": {"compressor": "pca", "dim": 16, "precision": "binary",
                            "quantizer_params": {"rotation": "itq"}, "rescore_factor": 4,
                            "rescore_precision": "int8"},
    "binary": {"compressor": "truncate", "dim": 16, "precision": "binary"},
    "int8-rescored-float32": {"compressor": "pca", "dim": 8, "precision": "int8",
                              "rescore_factor": 3, "rescore_precision": "float32"},
    "float32": {"compressor": "pca", "dim": 12},
    # Codebook codes: stored as fixed-size uint8 lists, scanned, scored asymmetrically.
    "rq-codes": {"compressor": "pca", "dim": 16, "precision": "rq6",
                 "quantizer_params": {"iterations": 5}},
}  # fmt: skip


def _model(encoder: Path, texts: list[str], **settings: object) -> CompressedModel:
    return CompressedModel(encoder, cache=False, **settings).fit(texts)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def models(encoder: Path, corpus: tuple) -> dict[str, CompressedModel]:
    _, texts, _ = corpus
    return {name: _model(encoder, texts, **config) for name, config in CONFIGS.items()}


def _store(path: Path, table: str = "documents"):
    from demitasse.store import LanceStore

    return LanceStore(path, table)


def _in_memory(model: CompressedModel, ids: list[str], texts: list[str], queries: list[str], k):
    scores, rows = model.search(model.search_index(texts), queries, k)
    return [
        [(ids[r], float(s)) for r, s in zip(rs, ss, strict=True)]
        for rs, ss in zip(rows, scores, strict=True)
    ]


def _pairs(results) -> list[list[tuple[str, float]]]:
    return [[(hit.id, hit.score) for hit in hits] for hits in results]


def _assert_same_hits(got: list, expected: list) -> None:
    """Same ids in the same order; the same scores up to float32 rounding (the store encodes
    its documents in batches, the in-memory index all at once)."""
    assert [[i for i, _ in hits] for hits in got] == [[i for i, _ in hits] for hits in expected]
    np.testing.assert_allclose(
        [s for hits in got for _, s in hits], [s for hits in expected for _, s in hits], atol=1e-5
    )


@pytest.mark.parametrize("name", list(CONFIGS))
def test_index_then_search_equals_the_models_in_memory_search(
    name: str, models: dict, corpus: tuple, tmp_path: Path
) -> None:
    ids, texts, queries = corpus
    model = models[name]
    store = _store(tmp_path / "db")
    assert store.add(model, ids, texts, batch_size=50) == N_DOCS
    assert len(store) == N_DOCS
    for k in (1, 10):
        _assert_same_hits(
            _pairs(store.search(model, queries, k)), _in_memory(model, ids, texts, queries, k)
        )


@pytest.mark.parametrize("name", ["binary-itq-rescored", "binary"])
def test_ties_beyond_the_first_query_are_fetched(
    name: str, models: dict, corpus: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a margin, the first LanceDB query rarely shows where the ties of the last
    candidate end: the second query must fetch them all, or ids and scores would differ."""
    from demitasse.store import lance

    monkeypatch.setattr(lance, "TIE_MARGIN", 0)
    ids, texts, queries = corpus
    model = models[name]
    store = _store(tmp_path / "db")
    store.add(model, ids, texts)
    for k in (1, 3, 10, N_DOCS):
        assert _pairs(store.search(model, queries, k)) == _in_memory(model, ids, texts, queries, k)


def test_the_table_holds_codes_rescoring_vectors_texts_and_provenance(
    models: dict, corpus: tuple, tmp_path: Path
) -> None:
    import lancedb

    ids, texts, _ = corpus
    model = models["binary-itq-rescored"]
    _store(tmp_path / "db").add(model, ids, texts)
    table = lancedb.connect(str(tmp_path / "db")).open_table("documents")
    schema = table.schema
    assert schema.names == ["row", "id", "text", "codes", "rescore"]
    assert schema.field("codes").type == pa.list_(pa.uint8(), 2)  # 16 bits
    assert schema.field("rescore").type == pa.list_(pa.int8(), 32)  # the encoder's full output
    assert schema.metadata[b"demitasse.provenance"].decode() == provenance_json(model.provenance())
    stored = table.search().select(["id", "text", "codes", "rescore"]).limit(N_DOCS).to_arrow()
    first = stored.to_pylist()[0]
    assert first["id"] == ids[0] and first["text"] == texts[0]
    np.testing.assert_array_equal(first["codes"], model.encode(texts[:1], precision="binary")[0])
    kept = model.stages().rescore_store.keep(encoder_vectors(model, texts[:1]))
    np.testing.assert_array_equal(first["rescore"], kept[0])


def test_texts_can_be_left_out_and_come_back_with_hits(
    models: dict, corpus: tuple, tmp_path: Path
) -> None:
    ids, texts, queries = corpus
    model = models["binary"]
    kept, dropped = _store(tmp_path / "db", "kept"), _store(tmp_path / "db", "dropped")
    kept.add(model, ids, texts)
    dropped.add(model, ids, texts, store_text=False)
    with_text = kept.search(model, queries[:2], 3, with_text=True)
    assert all(hit.text == texts[ids.index(hit.id)] for hits in with_text for hit in hits)
    without = dropped.search(model, queries, 3, with_text=True)
    assert all(hit.text is None for hits in without for hit in hits)


def test_a_model_of_other_provenance_is_refused(
    encoder: Path, models: dict, corpus: tuple, tmp_path: Path
) -> None:
    ids, texts, queries = corpus
    store = _store(tmp_path / "db")
    store.add(models["binary-itq-rescored"], ids, texts)
    settings = CONFIGS["binary-itq-rescored"]
    other_fit = _model(encoder, texts[: N_DOCS // 2], **settings)
    other_dim = _model(encoder, texts, **{**settings, "dim": 8})
    other_encoder = _model(build_tiny_model(tmp_path / "other", layers=2), texts, **settings)
    no_rescoring = _model(encoder, texts, **{**settings, "rescore_factor": None,
                                             "rescore_precision": None})  # fmt: skip
    for model in (other_fit, other_dim, other_encoder, no_rescoring, models["float32"]):
        with pytest.raises(ProvenanceError, match="different model") as refused:
            store.search(model, queries, 5)
        assert "\n" not in str(refused.value)
        with pytest.raises(ProvenanceError):
            store.add(model, ["new"], ["a new text"])
    assert len(store) == N_DOCS


def test_appending_with_equal_provenance_equals_indexing_once(
    models: dict, corpus: tuple, tmp_path: Path
) -> None:
    ids, texts, queries = corpus
    model = models["binary-itq-rescored"]
    model.save(tmp_path / "M")
    reloaded = CompressedModel.load(tmp_path / "M", cache=False)
    store = _store(tmp_path / "db")
    half = N_DOCS // 2
    store.add(model, ids[:half], texts[:half])
    assert store.add(reloaded, ids[half:], texts[half:]) == N_DOCS - half
    assert _pairs(store.search(reloaded, queries, 10)) == _in_memory(model, ids, texts, queries, 10)
    with pytest.raises(DataError, match="already holds id 'd0'"):
        store.add(model, ids[:3], texts[:3])
    assert store.add(model, [*ids[:3], "extra"], [*texts[:3], "the red car"],
                     skip_existing=True) == 1  # fmt: skip
    assert len(store) == N_DOCS + 1
    with pytest.raises(DataError, match="keeps the texts"):
        store.add(model, ["x"], ["a cat"], store_text=False)


def test_an_interrupted_index_leaves_the_table_as_it_was(
    models: dict, corpus: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, texts, queries = corpus
    model = models["binary"]
    store = _store(tmp_path / "db")
    encoder = model.load_encoder()
    original = encoder.encode
    calls = []

    def interrupted(batch, **options):
        calls.append(len(batch))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(batch, **options)

    monkeypatch.setattr(encoder, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.add(model, ids, texts, batch_size=40)
    assert not store.exists()  # the run created it: dropped again, no half-filled table
    monkeypatch.setattr(encoder, "encode", original)
    store.add(model, ids[:100], texts[:100])
    before = _pairs(store.search(model, queries, 5))
    calls.clear()
    monkeypatch.setattr(encoder, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.add(model, ids[100:], texts[100:], batch_size=40)
    monkeypatch.setattr(encoder, "encode", original)
    assert len(store) == 100 and _pairs(store.search(model, queries, 5)) == before


def test_bad_calls_fail_in_one_line(models: dict, corpus: tuple, tmp_path: Path) -> None:
    ids, texts, queries = corpus
    model = models["binary"]
    store = _store(tmp_path / "db")
    with pytest.raises(DataError, match="no table 'documents'"):
        store.search(model, queries, 5)
    with pytest.raises(DataError, match="duplicate id"):
        store.add(model, ["a", "a"], ["x", "y"])
    with pytest.raises(DataError, match="2 ids for 1 texts"):
        store.add(model, ["a", "b"], ["x"])
    with pytest.raises(DataError, match="no documents"):
        store.add(model, [], [])
    vectors_only = CompressedModel(compressor="pca", dim=4).fit(
        vectors=encoder_vectors(model, texts)
    )
    with pytest.raises(DataError, match="vectors-only"):
        store.add(vectors_only, ["a"], ["x"])
    store.add(model, ids, texts)
    vectors = encoder_vectors(model, queries)
    with pytest.raises(DataError, match="queries must be texts"):  # no way around the model
        store.search(model, vectors, 5)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="k must be a positive integer"):
        store.search(model, queries, 0)
    with pytest.raises(DataError, match="does not rescore"):
        store.search(model, queries, 5, rescore_factor=4)


# ---- the commands ---------------------------------------------------------------------------


@pytest.fixture
def model_dir(models: dict, tmp_path: Path) -> Path:
    return models["binary-itq-rescored"].save(tmp_path / "M")


def _beir_corpus(path: Path, ids: list[str], texts: list[str]) -> Path:
    """BEIR's corpus.jsonl: every other document has a title, one has extra fields."""
    with path.open("w", encoding="utf-8") as f:
        for i, (doc_id, text) in enumerate(zip(ids, texts, strict=True)):
            title, body = (text.split(" ", 1)) if i % 2 else ("", text)
            f.write(
                json.dumps({"_id": doc_id, "title": title, "text": body, "metadata": {}}) + "\n"
            )
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_index_and_search_round_trip(
    model_dir: Path, models: dict, corpus: tuple, tmp_path: Path, capsys
) -> None:
    ids, texts, queries = corpus
    documents = _beir_corpus(tmp_path / "corpus.jsonl", ids, texts)
    db = str(tmp_path / "db")
    code, out, err = _run(capsys, "index", str(model_dir), "--input", str(documents), "--db", db)
    assert code == 0, err
    assert f"added {N_DOCS} documents" in out
    code, out, err = _run(capsys, "search", str(model_dir), "--db", db, "--k", "4", "--json",
                          "--query", queries[0], "--query", queries[1])  # fmt: skip
    assert code == 0, err
    answers = [json.loads(line) for line in out.splitlines()]
    expected = _in_memory(models["binary-itq-rescored"], ids, texts, queries[:2], 4)
    assert [a["query"] for a in answers] == queries[:2]
    assert [[(h["id"], h["score"]) for h in a["hits"]] for a in answers] == expected
    # title + " " + text, as the evaluation embeds BEIR documents
    assert all(h["text"] == texts[ids.index(h["id"])] for a in answers for h in a["hits"])
    code, out, _ = _run(capsys, "search", str(model_dir), "--db", db, "--query", queries[0])
    assert code == 0 and out.startswith(f"query: {queries[0]}") and len(out.splitlines()) == 11


def test_cli_reads_named_columns_of_a_parquet_file(
    model_dir: Path, corpus: tuple, tmp_path: Path, capsys
) -> None:
    ids, texts, _ = corpus
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"key": ids, "body": texts}), path)
    db = str(tmp_path / "db")
    code, _, err = _run(capsys, "index", str(model_dir), "--input", str(path), "--db", db,
                        "--id-column", "key", "--text-column", "body", "--no-text")  # fmt: skip
    assert code == 0, err
    assert len(_store(tmp_path / "db")) == N_DOCS


def test_cli_bad_input_ends_in_one_line_with_exit_code_2(
    model_dir: Path, models: dict, corpus: tuple, tmp_path: Path, capsys
) -> None:
    ids, texts, _ = corpus
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "lines.txt").write_text("\n".join(texts[:3]) + "\n")
    pq.write_table(pa.table({"id": ids[:3], "body": texts[:3]}), tmp_path / "notext.parquet")
    other = models["float32"].save(tmp_path / "other")
    db = str(tmp_path / "db")
    index = ("index", str(model_dir), "--db", db, "--input")
    refusals = [
        ((*index, str(tmp_path / "missing.jsonl")), "file not found"),
        ((*index, str(tmp_path / "notext.parquet")), "no text column"),
        ((*index, str(tmp_path / "empty.jsonl")), "empty"),
        ((*index, str(tmp_path / "lines.txt"), "--text-column", "body"), "is a text file"),
        (("search", str(model_dir), "--db", db, "--query", "a cat"), "no table 'documents'"),
    ]
    for argv, message in refusals:
        code, _, err = _run(capsys, *argv)
        assert code == 2 and message in err and err.count("\n") == 1, (argv, err)
    assert not _store(tmp_path / "db").exists()
    _beir_corpus(tmp_path / "corpus.jsonl", ids, texts)
    assert _run(capsys, *index, str(tmp_path / "corpus.jsonl"))[0] == 0
    for argv, message in [
        (("search", str(other), "--db", db, "--query", "a cat"), "different model"),
        ((*index, str(tmp_path / "corpus.jsonl")), "already holds id"),
        (("search", str(model_dir), "--db", db, "--table", "nope", "--query", "x"), "no table"),
    ]:
        code, _, err = _run(capsys, *argv)
        assert code == 2 and message in err and err.count("\n") == 1, (argv, err)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--dim", "9"), "9"),
        (("--precision", "float16"), "float16"),
        (("--table", "../escape"), "table name"),
        (("--table", "/abs"), "table name"),
        (("--table", ".hidden"), "table name"),
    ],
)
def test_a_refused_index_leaves_no_database_behind(
    model_dir: Path, corpus: tuple, tmp_path: Path, capsys, flags: tuple, message: str
) -> None:
    """A refusal writes nothing: not even the marker of a database it was about to create."""
    ids, texts, _ = corpus
    documents = _beir_corpus(tmp_path / "corpus.jsonl", ids, texts)
    db = tmp_path / "new-db"
    code, _, err = _run(capsys, "index", str(model_dir), "--input", str(documents),
                        "--db", str(db), *flags)  # fmt: skip
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not db.exists() and not (tmp_path / "escape").exists()


def test_a_refitted_model_is_checked_again(encoder: Path, corpus: tuple, tmp_path: Path) -> None:
    ids, texts, queries = corpus
    model = _model(encoder, texts, **CONFIGS["float32"])
    store = _store(tmp_path / "db")
    store.add(model, ids, texts)
    store.search(model, queries, 3)  # checked, and remembered
    model.fit(texts[: N_DOCS // 2])
    with pytest.raises(ProvenanceError, match="different model"):
        store.search(model, queries, 3)
