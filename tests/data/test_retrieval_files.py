"""Retrieval data on any files: BEIR folders as published, the user's own corpus / queries /
qrels in JSON Lines, TSV and Parquet, and the bad inputs each named in one line."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse.data import load_beir, load_beir_folders, load_retrieval
from demitasse.errors import DataError

CORPUS = [
    {"_id": "0042", "title": "Cats", "text": "Cats purr.", "metadata": {"year": 2001}},
    {"_id": "7", "title": "", "text": "Dogs bark.", "metadata": {}},
    {"_id": "d3", "title": "Fish", "text": "Fish swim.", "metadata": {"url": "x"}},
]
QUERIES = [
    {"_id": "1", "text": "what purrs", "metadata": {}},
    {"_id": "2", "text": "what barks"},
    {"_id": "3", "text": "judged in train only"},
]
QRELS = [("1", "0042", 1), ("2", "7", 2), ("2", "d3", 0)]
EXPECTED_QRELS = {"1": {"0042": 1}, "2": {"7": 2, "d3": 0}}


def _jsonl(path: Path, records: list[dict], *, gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _qrels_tsv(path: Path, rows: list[tuple], *, newline: str = "\n", header: bool = True) -> Path:
    lines = (["query-id\tcorpus-id\tscore"] if header else []) + [
        "\t".join(str(v) for v in row) for row in rows
    ]
    path.write_bytes((newline.join(lines) + newline).encode())
    return path


def _published_folder(folder: Path) -> Path:
    """A BEIR folder as the BEIR zips hold them: gzipped corpus with metadata, CRLF qrels
    with a header, a train split that judges a query the test split does not."""
    (folder / "qrels").mkdir(parents=True)
    _jsonl(folder / "corpus.jsonl", CORPUS, gz=True)
    _jsonl(folder / "queries.jsonl", QUERIES)
    _qrels_tsv(folder / "qrels" / "test.tsv", QRELS, newline="\r\n")
    _qrels_tsv(folder / "qrels" / "train.tsv", [("3", "d3", 1)], newline="\r\n")
    return folder


def test_a_published_beir_folder_loads_with_ids_as_strings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        data = load_beir(_published_folder(tmp_path / "scifact"))
    assert data.name == "SciFact"
    assert data.corpus_ids == ["0042", "7", "d3"]  # "0042" is not the number 42
    assert data.corpus_texts == ["Cats Cats purr.", "Dogs bark.", "Fish Fish swim."]
    assert data.query_ids == ["1", "2"]
    assert data.qrels == EXPECTED_QRELS
    # Query 3 is judged in train: leaving it out of test is no news.
    assert not caplog.records
    train = load_beir(tmp_path / "scifact", split="train")
    assert (train.name, train.query_ids, train.qrels) == ("SciFact/train", ["3"], {"3": {"d3": 1}})


def test_gzipped_queries_and_qrels_load(tmp_path: Path) -> None:
    folder = _published_folder(tmp_path / "scifact")
    _jsonl(folder / "queries.jsonl", QUERIES, gz=True)
    (folder / "queries.jsonl").unlink()
    qrels = folder / "qrels" / "test.tsv"
    (folder / "qrels" / "test.tsv.gz").write_bytes(gzip.compress(qrels.read_bytes()))
    qrels.unlink()
    assert load_beir(folder).qrels == EXPECTED_QRELS


def test_integer_ids_in_json_match_the_same_ids_in_the_qrels(tmp_path: Path) -> None:
    corpus = [{**record, "_id": int(record["_id"])} for record in CORPUS[:2]]
    queries = [{"_id": 1, "text": "what purrs"}, {"_id": 2, "text": "what barks"}]
    data = load_retrieval(
        _jsonl(tmp_path / "corpus.jsonl", corpus),
        _jsonl(tmp_path / "queries.jsonl", queries),
        _qrels_tsv(tmp_path / "qrels.tsv", [("1", "42", 1), ("2", "7", 1)]),
    )
    assert data.corpus_ids == ["42", "7"]
    assert data.qrels == {"1": {"42": 1}, "2": {"7": 1}}


def _write_table(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a TSV, JSON Lines or Parquet file, chosen by ``path``'s suffix."""
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".jsonl":
        _jsonl(path, rows)
    else:
        columns = list(rows[0])
        lines = ["\t".join(columns)] + ["\t".join(str(r[c]) for c in columns) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("suffix", [".tsv", ".jsonl", ".parquet"])
def test_own_files_in_every_format_give_the_same_set(tmp_path: Path, suffix: str) -> None:
    corpus = [{"_id": r["_id"], "title": r["title"], "text": r["text"]} for r in CORPUS]
    queries = [{"_id": r["_id"], "text": r["text"]} for r in QUERIES[:2]]
    qrels = [{"query-id": q, "corpus-id": d, "score": s} for q, d, s in QRELS]
    data = load_retrieval(
        _write_table(tmp_path / f"corpus{suffix}", corpus),
        _write_table(tmp_path / f"queries{suffix}", queries),
        _write_table(tmp_path / f"qrels{suffix}", qrels),
        name="own",
    )
    assert data.name == "own"
    assert data.corpus_ids == ["0042", "7", "d3"]
    assert data.corpus_texts == ["Cats Cats purr.", "Dogs bark.", "Fish Fish swim."]
    assert data.query_texts == ["what purrs", "what barks"]
    assert data.qrels == EXPECTED_QRELS


def test_parquet_integer_ids_and_float_grades(tmp_path: Path) -> None:
    corpus = _write_table(
        tmp_path / "c.parquet", [{"id": 10, "text": "a"}, {"id": 11, "text": "b"}]
    )
    queries = _write_table(tmp_path / "q.parquet", [{"id": 5, "text": "query"}])
    qrels = _write_table(tmp_path / "r.parquet", [{"query_id": 5, "doc_id": 11, "score": 1.0}])
    assert load_retrieval(corpus, queries, qrels).qrels == {"5": {"11": 1}}
    float_ids = _write_table(tmp_path / "f.parquet", [{"id": 10.0, "text": "a"}])
    with pytest.raises(DataError, match=r"f\.parquet: row 0: 'id' is a float; ids must be"):
        load_retrieval(float_ids, queries, qrels)


# ---- bad input --------------------------------------------------------------------------------


def _own_files(tmp_path: Path, qrels: list[tuple]) -> tuple[Path, Path, Path]:
    return (
        _jsonl(tmp_path / "corpus.jsonl", CORPUS),
        _jsonl(tmp_path / "queries.jsonl", QUERIES),
        _qrels_tsv(tmp_path / "qrels.tsv", qrels),
    )


def _one_line_error(call, *args, **kwargs) -> str:
    with pytest.raises(DataError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_unknown_query_ids_are_counted_with_an_example(tmp_path: Path) -> None:
    rows = [*QRELS, ("q9", "7", 1), ("q9", "d3", 1), ("q10", "7", 1)]
    message = _one_line_error(load_retrieval, *_own_files(tmp_path, rows))
    assert message.startswith(f"{tmp_path / 'qrels.tsv'}:5: query id 'q9' is not in ")
    assert "queries.jsonl; 2 of the 4 query ids in these qrels are unknown (e.g. 'q9', 'q10')" in (
        message
    )


def test_unknown_corpus_ids_are_counted_with_an_example(tmp_path: Path) -> None:
    rows = [*QRELS, ("1", "42", 1)]  # "42" is not "0042"
    message = _one_line_error(load_retrieval, *_own_files(tmp_path, rows))
    assert "qrels.tsv:5: corpus id '42' is not in " in message
    assert "corpus.jsonl; 1 of the 4 corpus ids in these qrels are unknown (e.g. '42')" in message


def test_unknown_ids_can_be_accepted_as_beir_scores_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [*QRELS, ("q9", "7", 1), ("1", "gone", 1)]
    with caplog.at_level(logging.WARNING, logger="demitasse.data.beir"):
        data = load_retrieval(*_own_files(tmp_path, rows), unknown_ids="warn")
    # The unknown query's judgement is left out; the unknown document stays relevant.
    assert data.qrels == {"1": {"0042": 1, "gone": 1}, "2": {"7": 2, "d3": 0}}
    warnings = [r.getMessage() for r in caplog.records]
    assert any("query id 'q9'" in w and "left out" in w for w in warnings)
    assert any("corpus id 'gone'" in w and "no search can find" in w for w in warnings)
    with pytest.raises(DataError, match="unknown_ids must be one of error, warn"):
        load_retrieval(*_own_files(tmp_path, QRELS), unknown_ids="drop")


def _many_judgements(folder: Path, unknown: list[tuple]) -> Path:
    """A published-like folder with 40 judged documents and the given extra qrels rows."""
    (folder / "qrels").mkdir(parents=True)
    _jsonl(folder / "corpus.jsonl", [{"_id": f"d{i}", "text": f"doc {i}"} for i in range(40)])
    _jsonl(folder / "queries.jsonl", [{"_id": f"q{i}", "text": f"query {i}"} for i in range(4)])
    rows = [(f"q{i % 4}", f"d{i}", 1) for i in range(40)]
    _qrels_tsv(folder / "qrels" / "test.tsv", [*rows, *unknown], newline="\r\n")
    return folder


def test_a_published_set_with_a_few_unknown_ids_loads_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # ArguAna's qrels name documents missing from its corpus, NFCorpus's queries missing from
    # its queries file: two of 42 judgements (4.8 %) here, and the folder loads as published.
    folder = _many_judgements(tmp_path / "arguana", [("q0", "gone", 1), ("q404", "d1", 1)])
    with caplog.at_level(logging.WARNING, logger="demitasse.data.beir"):
        data = load_beir(folder)
    assert data.name == "ArguAna" and len(data.query_ids) == 4
    assert data.qrels["q0"]["gone"] == 1 and "q404" not in data.qrels
    warnings = [r.getMessage() for r in caplog.records]
    assert any(
        "1 of the 5 query ids in these qrels are unknown (e.g. 'q404')" in w for w in warnings
    )
    assert any(
        "1 of the 41 corpus ids in these qrels are unknown (e.g. 'gone')" in w for w in warnings
    )
    # The same files under "error" refuse them.
    with pytest.raises(DataError, match="query id 'q404' is not in"):
        load_beir(folder, unknown_ids="error")


def test_more_than_five_percent_unknown_ids_is_the_users_mistake(tmp_path: Path) -> None:
    unknown = [("q0", "gone", 1), ("q0", "lost", 1), ("q404", "d1", 1)]  # 3 of 43: 7.0 %
    folder = _many_judgements(tmp_path / "mine", unknown)
    message = _one_line_error(load_beir, folder)
    assert "query id 'q404' is not in" in message
    assert "7.0 % of the judgements name unknown ids, more than the 5 %" in message
    # "warn" takes any number, as before.
    assert "q404" not in load_beir(folder, unknown_ids="warn").qrels


def test_queries_without_judgements_are_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="demitasse.data.beir"):
        data = load_retrieval(*_own_files(tmp_path, QRELS))
    assert data.query_ids == ["1", "2"]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "queries.jsonl: 1 of its 3 queries have no relevance judgement" in warning
    assert "(e.g. '3')" in warning


def test_a_beir_folder_warns_about_queries_no_split_judges(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _published_folder(tmp_path / "scifact")
    _jsonl(folder / "queries.jsonl", [*QUERIES, {"_id": "4", "text": "never judged"}])
    with caplog.at_level(logging.WARNING, logger="demitasse.data.beir"):
        load_beir(folder)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "1 of its 4 queries have no relevance judgement" in warning and "'4'" in warning


def test_no_judged_query_at_all_is_an_error(tmp_path: Path) -> None:
    files = _own_files(tmp_path, [("q9", "7", 1)])
    message = _one_line_error(load_retrieval, *files, unknown_ids="warn")
    assert message == f"{files[2]}: no judgement names a query of {files[1]}"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.jsonl", "\n\n"),
        ("empty.tsv", "_id\ttitle\ttext\n"),
        ("empty.parquet", None),
    ],
)
def test_an_empty_corpus_is_named(tmp_path: Path, name: str, content: str | None) -> None:
    corpus = tmp_path / name
    if content is None:
        pq.write_table(
            pa.table({"_id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), corpus
        )
    else:
        corpus.write_text(content)
    _, queries, qrels = _own_files(tmp_path, QRELS)
    message = _one_line_error(load_retrieval, corpus, queries, qrels)
    assert message == f"{corpus}: no records (the corpus is empty)"


def test_table_columns_are_named_when_missing(tmp_path: Path) -> None:
    corpus = _write_table(tmp_path / "c.tsv", [{"doc": "1", "body": "x"}])
    _, queries, qrels = _own_files(tmp_path, QRELS)
    message = _one_line_error(load_retrieval, corpus, queries, qrels)
    assert message == f"{corpus}: no id column (one of '_id', 'id'); the file has 'doc', 'body'"
    bad_qrels = _write_table(tmp_path / "r.jsonl", [{"q": "1", "corpus-id": "7", "score": 1}])
    message = _one_line_error(load_retrieval, tmp_path / "corpus.jsonl", queries, bad_qrels)
    assert "r.jsonl: no query id column" in message
    with pytest.raises(DataError, match=r"unsupported file type"):
        load_retrieval(tmp_path / "corpus.jsonl", queries, _jsonl(tmp_path / "r.txt", []))


# ---- several folders --------------------------------------------------------------------------


def test_several_folders_load_and_their_names_must_differ(tmp_path: Path) -> None:
    first = _published_folder(tmp_path / "a" / "scifact")
    second = _published_folder(tmp_path / "b" / "nfcorpus")
    datasets = load_beir_folders([first, second])
    assert [d.name for d in datasets] == ["SciFact", "NFCorpus"]
    twin = _published_folder(tmp_path / "c" / "scifact")
    message = _one_line_error(load_beir_folders, [first, twin])
    assert message.startswith(f"{twin}: a second data set named 'SciFact' (the first is {first})")


def test_a_folder_of_beir_folders_names_them(tmp_path: Path) -> None:
    for forum in ("android", "gis"):
        _published_folder(tmp_path / "cqadupstack" / forum)
    message = _one_line_error(load_beir, tmp_path / "cqadupstack")
    assert "sub-folders android, gis are BEIR folders: pass one of those" in message
    # eval's list of folders takes the parent and scores each forum, as BEIR averages them.
    datasets = load_beir_folders([tmp_path / "cqadupstack"], "test")
    assert [d.name for d in datasets] == ["CQADupstack/android", "CQADupstack/gis"]
    assert all(d.qrels for d in datasets)


def test_a_folder_without_test_judgements_is_evaluated_on_dev_unless_a_split_is_named(
    tmp_path: Path,
) -> None:
    # BEIR's MS MARCO folder has train and dev judgements only; BEIR and MTEB evaluate on dev.
    marco = _published_folder(tmp_path / "msmarco")
    (marco / "qrels" / "test.tsv").rename(marco / "qrels" / "dev.tsv")
    scifact = _published_folder(tmp_path / "scifact")
    datasets = load_beir_folders([scifact, marco])
    assert [d.name for d in datasets] == ["SciFact", "MSMARCO/dev"]  # the record names it
    assert datasets[1].qrels == EXPECTED_QRELS
    message = _one_line_error(load_beir_folders, [scifact, marco], "test")  # named: strict
    assert "unknown split 'test' (no qrels/test.tsv); have: dev, train" in message
    assert [d.name for d in load_beir_folders([marco], "train")] == ["MSMARCO/train"]


def test_a_tsv_score_written_as_an_integral_float_is_that_integer(tmp_path: Path) -> None:
    # Some exports write grades as floats ("1.0"); tables with float grades were accepted
    # already, TSV text was not. A fraction is no grade.
    folder = _published_folder(tmp_path / "scifact")
    rows = [("1", "0042", "1.0"), ("2", "7", "2"), ("2", "d3", "0.0")]
    _qrels_tsv(folder / "qrels" / "test.tsv", rows, newline="\n")
    assert load_beir(folder).qrels == EXPECTED_QRELS
    _qrels_tsv(folder / "qrels" / "test.tsv", [("1", "0042", "0.5")], newline="\n")
    message = _one_line_error(load_beir, folder)
    assert message.endswith("test.tsv:2: score '0.5' is not an integer")
