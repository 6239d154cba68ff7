"""Tests for demitasse.data: real SentEval files, synthetic user files, embeddings, hub."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse.data import (
    HUB_REPOS,
    STS_SUITE,
    ScoredPairs,
    canonical_sts_name,
    check_finite,
    concat_pairs,
    load_embeddings,
    load_hf_sts,
    load_scored_pairs,
    load_senteval_sts,
    load_sickr,
    load_sts,
    load_sts_path,
    load_sts_set,
    load_sts_suite,
    load_stsb,
    perturb_sentence,
    perturb_sentences,
    read_texts,
    resolve_data_dir,
)
from demitasse.errors import DataError

EXPECTED_COUNTS = {
    "STS12": 3108,
    "STS13": 1500,
    "STS14": 3750,
    "STS15": 3000,
    "STS16": 1186,
    "STS-B": 1379,
    "SICK-R": 4927,
}


def one_line_error(excinfo: pytest.ExceptionInfo[DataError], *fragments: str) -> str:
    """The error message, checked to be one line containing every fragment."""
    message = str(excinfo.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def write_gz(path: Path, text: str) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


# --------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def suite(data_dir: Path) -> dict[str, ScoredPairs]:
    return load_sts_suite(data_dir)


def test_suite_counts_and_order(suite: dict[str, ScoredPairs]) -> None:
    assert list(suite) == list(STS_SUITE)
    assert {name: len(pairs) for name, pairs in suite.items()} == EXPECTED_COUNTS
    for name, pairs in suite.items():
        assert pairs.name == name
        assert pairs.scores.dtype == np.float64
        assert len(pairs.sentences1) == len(pairs.sentences2) == len(pairs)
        assert np.isfinite(pairs.scores).all()


@pytest.mark.parametrize(
    ("split", "expected_name", "count"),
    [("train", "STS-B/train", 5749), ("dev", "STS-B/dev", 1500), ("test", "STS-B", 1379)],
)
def test_stsb_splits(data_dir: Path, split: str, expected_name: str, count: int) -> None:
    pairs = load_stsb(split, data_dir)
    assert (pairs.name, len(pairs)) == (expected_name, count)
    assert pairs.scores.min() >= 0 and pairs.scores.max() <= 5


@pytest.mark.parametrize(
    ("split", "expected_name", "count"),
    [("train", "SICK-R/train", 4500), ("trial", "SICK-R/trial", 500), ("test", "SICK-R", 4927)],
)
def test_sickr_splits(data_dir: Path, split: str, expected_name: str, count: int) -> None:
    pairs = load_sickr(split, data_dir)
    assert (pairs.name, len(pairs)) == (expected_name, count)
    assert pairs.scores.min() >= 1 and pairs.scores.max() <= 5


def test_first_pairs(suite: dict[str, ScoredPairs], data_dir: Path) -> None:
    sts12 = suite["STS12"]
    assert sts12.sentences1[0].startswith("the problem likely will mean corrective changes")
    assert sts12.sentences2[0].startswith("he said the problem needs to be corrected")
    assert sts12.scores[0] == 4.4
    stsb = suite["STS-B"]
    assert (stsb.sentences1[0], stsb.sentences2[0], stsb.scores[0]) == (
        "a girl is styling her hair .",
        "a girl is brushing her hair .",
        2.5,
    )
    sick = suite["SICK-R"]
    assert sick.sentences1[0] == "There is no boy playing outdoors and there is no man smiling"
    assert sick.scores[0] == 3.3
    train = load_stsb("train", data_dir)
    assert (train.sentences1[0], train.scores[0]) == ("a plane is taking off .", 5.0)


def test_goldless_pairs_are_skipped(suite: dict[str, ScoredPairs]) -> None:
    # Line 1 of STS15 belief and STS16 answer-answer have an empty gold line.
    sts15 = set(zip(suite["STS15"].sentences1, suite["STS15"].sentences2, strict=True))
    assert (
        "what i said was that he was working for someone else when his father died .",
        "he was the first speaker of the house in history to be fined .",
    ) not in sts15
    sts16 = suite["STS16"]
    assert sts16.sentences1[0].startswith("i remained under the banyan tree")
    assert sts16.scores[0] == 3.0


def test_quotes_inside_sentences_are_kept(suite: dict[str, ScoredPairs]) -> None:
    # STS15 answers-students has sentences that start with '"'; csv quoting would merge lines.
    assert any(s.startswith('" ') for s in suite["STS15"].sentences1)
    assert all("\t" not in s and "\n" not in s for s in suite["STS15"].texts())


def test_load_sts_aliases(data_dir: Path) -> None:
    assert load_sts("sts2013", data_dir).name == "STS13"
    assert len(load_senteval_sts(2013, data_dir)) == 1500
    assert load_sts("stsb", data_dir, split="validation").name == "STS-B/dev"
    assert load_sts("sick-r", data_dir, split="dev").name == "SICK-R/trial"
    # the senteval/ subfolder works as a data dir too
    assert len(load_sts("STS-B", data_dir / "senteval")) == 1379


def test_data_dir_from_environment(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMITASSE_DATA", str(data_dir))
    assert resolve_data_dir() == data_dir
    assert len(load_sts("sts16")) == 1186


def test_texts_and_head(suite: dict[str, ScoredPairs]) -> None:
    pairs = suite["STS-B"]
    texts = pairs.texts()
    assert len(texts) == len(set(texts))
    assert set(texts) == set(pairs.sentences1) | set(pairs.sentences2)
    assert texts[:2] == [pairs.sentences1[0], pairs.sentences2[0]]
    head = pairs.head(5)
    assert (head.name, len(head)) == ("STS-B", 5)
    assert head.sentences1 == pairs.sentences1[:5]
    np.testing.assert_array_equal(head.scores, pairs.scores[:5])


# --------------------------------------------------------------------------- ScoredPairs


def test_scored_pairs_basics() -> None:
    pairs = ScoredPairs("x", ["a", "b", "a"], ["b", "c", "d"], [1, 2, 3])
    assert pairs.texts() == ["a", "b", "c", "d"]
    assert pairs.scores.dtype == np.float64
    assert not pairs.scores.flags.writeable
    assert repr(pairs) == "ScoredPairs(name='x', pairs=3)"
    both = concat_pairs("both", [pairs, pairs.head(1)])
    assert (both.name, len(both), both.sentences2[-1]) == ("both", 4, "b")
    with pytest.raises(ValueError, match="must be equal"):
        ScoredPairs("x", ["a"], ["b", "c"], [1.0])


# --------------------------------------------------------------------------- synthetic STS


def make_sts_dir(root: Path, year: int, subsets: dict[str, tuple[str, str]]) -> Path:
    """``subsets``: name -> (input text, gold text)."""
    folder = root / "senteval" / "STS" / f"STS{year}-en-test"
    folder.mkdir(parents=True)
    for name, (inputs, gold) in subsets.items():
        (folder / f"STS.input.{name}.txt").write_text(inputs, encoding="utf-8")
        if gold is not None:
            (folder / f"STS.gs.{name}.txt").write_text(gold, encoding="utf-8")
    return folder


def test_synthetic_sts_subsets_sorted_and_goldless_skipped(tmp_path: Path) -> None:
    make_sts_dir(
        tmp_path,
        12,
        {
            "b": ('"quoted start\tx\n', "1.5\n"),
            "a": ("s1\tt1\ns2\tt2\ns3\tt3\n", "4\n\n2.25\n"),
        },
    )
    pairs = load_senteval_sts(12, tmp_path)
    assert pairs.sentences1 == ["s1", "s3", '"quoted start']
    np.testing.assert_array_equal(pairs.scores, [4.0, 2.25, 1.5])


def test_resolve_data_dir_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEMITASSE_DATA", raising=False)
    with pytest.raises(DataError) as err:
        resolve_data_dir()
    one_line_error(err, "no data directory: pass --data-dir or set DEMITASSE_DATA")
    with pytest.raises(DataError) as err:
        resolve_data_dir(tmp_path / "nope")
    one_line_error(err, "nope", "does not exist")
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError) as err:
        resolve_data_dir(tmp_path / "f")
    one_line_error(err, "not a directory")


def test_missing_sts_files(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_sts_suite(tmp_path)
    one_line_error(
        err,
        f"no STS12 files in {tmp_path / 'senteval' / 'STS' / 'STS12-en-test'}",
        "(expected STS.input.*.txt); is --data-dir the shared data folder?",
    )
    with pytest.raises(DataError) as err:
        load_stsb("test", tmp_path)
    one_line_error(err, "sts-test.csv", "is --data-dir the shared data folder?")
    with pytest.raises(DataError) as err:
        load_sickr("test", tmp_path)
    one_line_error(err, "SICK_test_annotated.txt", "is --data-dir the shared data folder?")


@pytest.mark.parametrize(
    ("inputs", "gold", "fragments"),
    [
        ("a\tb\n", None, ("STS.input.x.txt", "gold file STS.gs.x.txt is missing")),
        ("a\tb\nc\td\n", "1\n", ("STS.input.x.txt", "has 2 lines", "has 1")),
        ("a\tb\nc\td\n", "1\nhigh\n", ("STS.gs.x.txt", "line 2", "'high' is not a number")),
        ("a\tb\nc\td\n", "1\nnan\n", ("STS.gs.x.txt", "line 2", "not finite")),
        ("a\tb\nc d\n", "1\n2\n", ("STS.input.x.txt", "line 2", "expected 2 tab-separated")),
    ],
)
def test_sts_file_errors(
    tmp_path: Path, inputs: str, gold: str | None, fragments: tuple[str, ...]
) -> None:
    make_sts_dir(tmp_path, 14, {"x": (inputs, gold)})
    with pytest.raises(DataError) as err:
        load_senteval_sts(14, tmp_path)
    one_line_error(err, *fragments)


def test_sts_non_utf8(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Invalid UTF-8 is replaced with U+FFFD and counted, as everywhere (docs/data-and-models.md).
    folder = make_sts_dir(tmp_path, 13, {"x": ("a\tb\n", "1\n")})
    (folder / "STS.input.x.txt").write_bytes(b"a\tb\nc\xe9\td\n")
    (folder / "STS.gs.x.txt").write_text("1\n2\n")
    loaded = load_senteval_sts(13, tmp_path)
    assert "c\ufffd" in str(loaded) or any("c\ufffd" in repr(v) for v in vars(loaded).values())
    assert "replaced 1 character" in caplog.text


def test_bad_names_and_splits(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        canonical_sts_name("sts17")
    one_line_error(err, "unknown STS set 'sts17'", "STS12", "SICK-R")
    with pytest.raises(DataError) as err:
        load_senteval_sts(17, tmp_path)
    one_line_error(err, "year 17")
    with pytest.raises(DataError) as err:
        load_sts("sts12", tmp_path, split="train")
    one_line_error(err, "STS12 has no split 'train'", "test")
    with pytest.raises(DataError) as err:
        load_stsb("trial", tmp_path)
    one_line_error(err, "STS-B has no split 'trial'", "train, dev, test")


def test_stsb_extra_columns_and_quotes(tmp_path: Path) -> None:
    folder = tmp_path / "senteval" / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    (folder / "sts-test.csv").write_text(
        'main-news\tMSRpar\t2012test\t0001\t3.200\t"a quote" begins\tplain\n'
        "main-news\theadlines\t2013\t0002\t1.0\tone\ttwo\tsource-a\tsource-b\n",
        encoding="utf-8",
    )
    pairs = load_stsb("test", tmp_path)
    assert pairs.sentences1 == ['"a quote" begins', "one"]
    assert pairs.sentences2 == ["plain", "two"]
    np.testing.assert_array_equal(pairs.scores, [3.2, 1.0])
    (folder / "sts-dev.csv").write_text("g\tf\t2012\t1\tx\ta\tb\n")
    with pytest.raises(DataError) as err:
        load_stsb("dev", tmp_path)
    one_line_error(err, "sts-dev.csv", "line 1", "'x' is not a number")
    (folder / "sts-train.csv").write_text("g\tf\t2012\t1\t2.0\ta\n")
    with pytest.raises(DataError) as err:
        load_stsb("train", tmp_path)
    one_line_error(err, "sts-train.csv", "line 1", "at least 7")


def test_sts_sets_given_as_paths_in_their_published_layouts(tmp_path: Path) -> None:
    # A SemEval folder that is not in the suite (say STS17), one of its subsets, an STS-B
    # style file and a SICK style file under names of the user's choosing, and folders.
    folder = make_sts_dir(tmp_path, 17, {"b": ("x\ty\n", "1\n"), "a": ("s\tt\nu\tv\n", "5\n\n")})
    whole = load_sts_path(folder)
    assert whole.name == "STS17"
    assert (whole.sentences1, list(whole.scores)) == (["s", "x"], [5.0, 1.0])
    subset = load_sts_set(str(folder / "STS.input.b.txt"))
    assert (subset.name, subset.sentences2) == ("b", ["y"])
    stsb = tmp_path / "my-pairs.tsv"
    stsb.write_text("main-news\tMSRpar\t2012test\t0001\t3.200\tone\ttwo\textra\n")
    pairs = load_sts_path(stsb)
    assert (pairs.name, pairs.sentences1, list(pairs.scores)) == ("my-pairs", ["one"], [3.2])
    sick = tmp_path / "SICK" / "SICK_test_annotated.txt"
    sick.parent.mkdir()
    sick.write_text(
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment\n7\ta\tb\t4.5\tX\n"
    )
    for source, name in ((sick, "SICK_test_annotated"), (sick.parent, "SICK")):
        pairs = load_sts_path(source)
        assert (pairs.name, pairs.sentences1, list(pairs.scores)) == (name, ["a"], [4.5])
    # A header-named table still reads by its columns; a suite name still means the suite.
    table = tmp_path / "table.tsv"
    table.write_text("sentence1\tsentence2\tscore\np\tq\t0.5\n")
    assert load_sts_path(table).sentences2 == ["q"]
    with pytest.raises(DataError) as err:
        load_sts_set("sts18", tmp_path)
    one_line_error(err, "unknown STS set 'sts18'")
    # A SemEval folder in the data folder answers to its name, as the suite's do.
    assert load_sts_set("sts17", tmp_path).sentences1 == whole.sentences1
    with pytest.raises(DataError) as err:
        load_sts_path(tmp_path / "SICK" / "..")
    one_line_error(err, "no STS files in this folder", "STS.input.*.txt")


def test_the_suite_loads_the_same_from_its_folder(data_dir: Path) -> None:
    by_name = load_sts("sts16", data_dir)
    by_path = load_sts_set(str(data_dir / "senteval" / "STS" / "STS16-en-test"))
    assert by_path.name == by_name.name == "STS16"
    assert by_path.sentences1 == by_name.sentences1
    np.testing.assert_array_equal(by_path.scores, by_name.scores)


def test_sick_header_error(tmp_path: Path) -> None:
    folder = tmp_path / "SICK"  # a senteval-level folder is accepted as data dir
    folder.mkdir()
    (folder / "SICK_trial.txt").write_text("pair_ID\tsentence_A\tsentence_B\tscore\n1\ta\tb\t3\n")
    with pytest.raises(DataError) as err:
        load_sickr("trial", tmp_path)
    one_line_error(err, "SICK_trial.txt", "relatedness_score")


# --------------------------------------------------------------------------- user pair files

ROWS = [("a cat", "a dog", 1.5), ('he said "hi"', "x", 4.0)]


def write_pairs(path: Path, columns: tuple[str, str, str] = ("sentence1", "sentence2", "score")):
    c1, c2, c3 = columns
    kind = path.name.removesuffix(".gz").rsplit(".", 1)[-1]
    if kind == "parquet":
        table = pa.table(
            {c1: [r[0] for r in ROWS], c2: [r[1] for r in ROWS], c3: [r[2] for r in ROWS]}
        )
        pq.write_table(table, path)
        return path
    if kind == "jsonl":
        text = "".join(json.dumps({c1: a, c2: b, c3: s}) + "\n" for a, b, s in ROWS)
    elif kind == "csv":
        text = f"{c1},{c2},{c3}\n" + 'a cat,a dog,1.5\n"he said ""hi""",x,4\n'
    else:  # tsv, unquoted as most TSV writers produce
        text = f"{c1}\t{c2}\t{c3}\n" + 'a cat\ta dog\t1.5\nhe said "hi"\tx\t4\n'
    if path.name.endswith(".gz"):
        return write_gz(path, text)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "filename", ["p.csv", "p.tsv", "p.jsonl", "p.jsonl.gz", "p.parquet", "p.csv.gz"]
)
def test_load_scored_pairs_formats(tmp_path: Path, filename: str) -> None:
    pairs = load_scored_pairs(write_pairs(tmp_path / filename))
    assert pairs.name == "p"
    assert pairs.sentences1 == ["a cat", 'he said "hi"']
    assert pairs.sentences2 == ["a dog", "x"]
    np.testing.assert_array_equal(pairs.scores, [1.5, 4.0])


def test_load_scored_pairs_custom_columns(tmp_path: Path) -> None:
    path = write_pairs(tmp_path / "q.jsonl", ("s1", "s2", "label"))
    pairs = load_scored_pairs(path, "s1", "s2", "label", name="mine")
    assert (pairs.name, len(pairs)) == ("mine", 2)


def test_csv_crlf_bom_and_malformed(tmp_path: Path) -> None:
    crlf = tmp_path / "crlf.csv"
    crlf.write_bytes(b"\xef\xbb\xbfsentence1,sentence2,score\r\na,b,1\r\nc,d,2\r\n")
    pairs = load_scored_pairs(crlf)
    assert (pairs.sentences1, pairs.sentences2) == (["a", "c"], ["b", "d"])
    bad = tmp_path / "bad.csv"
    bad.write_text('sentence1,sentence2,score\n"a" b,c,1\n')
    with pytest.raises(DataError) as err:
        load_scored_pairs(bad)
    one_line_error(err, "bad.csv", "malformed CSV")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"sentence1,sentence2,score\ncaf\xe9,b,1\n")
    assert load_scored_pairs(latin).sentences1 == ["caf\ufffd"]  # replaced, and counted


def test_tsv_quoted_and_raw_quotes(tmp_path: Path) -> None:
    quoted = tmp_path / "quoted.tsv"  # as pandas writes it
    quoted.write_text('sentence1\tsentence2\tscore\n"tab\there"\tb\t1\n')
    assert load_scored_pairs(quoted).sentences1 == ["tab\there"]
    raw = tmp_path / "raw.tsv"  # a raw field that starts with a quote but is not quoted
    raw.write_text('sentence1\tsentence2\tscore\n" the battery " s state\tb\t2\nc\td\t3\n')
    pairs = load_scored_pairs(raw)
    assert pairs.sentences1 == ['" the battery " s state', "c"]
    np.testing.assert_array_equal(pairs.scores, [2.0, 3.0])


@pytest.mark.parametrize(
    ("filename", "content", "fragments"),
    [
        ("e.csv", "", ("e.csv", "file is empty")),
        ("h.csv", "sentence1,sentence2,score\n", ("h.csv", "no rows")),
        ("b.jsonl", "\n\n", ("b.jsonl", "file is empty")),
        (
            "m.csv",
            "sentence1,text2,score\na,b,1\n",
            (
                "m.csv",
                "missing column(s) 'sentence2'",
                "the file has 'sentence1', 'text2', 'score'",
            ),
        ),
        ("n.csv", "sentence1,sentence2,score\na,b,1\nc,d,high\n", ("n.csv", "line 3", "'high'")),
        ("f.tsv", "sentence1\tsentence2\tscore\na\tb\tnan\n", ("f.tsv", "line 2", "not a finite")),
        ("i.jsonl", '{"sentence1": "a", "sentence2": "b", "score": "inf"}\n', ("line 1", "finite")),
        (
            "j.jsonl",
            '{"sentence1": "a", "sentence2": "b", "score": 1}\n{oops\n',
            ("line 2", "JSON"),
        ),
        ("k.jsonl", '{"sentence1": "a", "sentence2": "b"}\n', ("missing column(s) 'score'",)),
        (
            "s.jsonl",
            '{"sentence1": "a", "sentence2": "b", "score": null}\n',
            ("'score' is missing",),
        ),
        ("u.xlsx", "whatever", ("u.xlsx", "unsupported file type")),
        ("short.csv", "sentence1,sentence2,score\na,b\n", ("line 2", "2 fields")),
    ],
)
def test_load_scored_pairs_errors(
    tmp_path: Path, filename: str, content: str, fragments: tuple[str, ...]
) -> None:
    path = tmp_path / filename
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_scored_pairs(path)
    one_line_error(err, *fragments)


def test_load_scored_pairs_missing_file_and_parquet_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_scored_pairs(tmp_path / "absent.csv")
    one_line_error(err, "absent.csv", "file not found")
    empty = tmp_path / "empty.parquet"
    schema = pa.schema(
        [("sentence1", pa.string()), ("sentence2", pa.string()), ("score", pa.float64())]
    )
    pq.write_table(schema.empty_table(), empty)
    with pytest.raises(DataError) as err:
        load_scored_pairs(empty)
    one_line_error(err, "empty.parquet", "no rows")
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"sentence1": ["a"], "sentence2": ["b"], "score": ["x"]}), bad)
    with pytest.raises(DataError) as err:
        load_scored_pairs(bad)
    one_line_error(err, "bad.parquet", "row 0", "'x', not a number")
    cols = tmp_path / "cols.parquet"
    pq.write_table(pa.table({"a": ["x"], "score": [1.0]}), cols)
    with pytest.raises(DataError) as err:
        load_scored_pairs(cols)
    one_line_error(err, "missing column(s) 'sentence1', 'sentence2'", "the file has 'a', 'score'")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(DataError) as err:
        load_scored_pairs(junk)
    one_line_error(err, "junk.parquet", "not a readable Parquet file")


# --------------------------------------------------------------------------- read_texts


def test_read_texts_formats(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("  first \n\n second\n\t\nthird\n")
    write_gz(tmp_path / "t.txt.gz", "first\nsecond\n")
    (tmp_path / "t.jsonl").write_text('{"text": "first"}\n{"text": " "}\n{"text": "second"}\n')
    write_gz(tmp_path / "t.jsonl.gz", '{"body": "first"}\n')
    pq.write_table(pa.table({"text": ["first", None, "second"]}), tmp_path / "t.parquet")
    (tmp_path / "t.csv").write_text('id,text\n1,"first, with comma"\n2,second\n')
    (tmp_path / "t.tsv").write_text("text\nfirst\n")
    assert read_texts(tmp_path / "t.txt") == ["first", "second", "third"]
    assert read_texts(tmp_path / "t.txt", limit=2) == ["first", "second"]
    assert read_texts(tmp_path / "t.txt.gz") == ["first", "second"]
    assert read_texts(tmp_path / "t.jsonl") == ["first", "second"]
    assert read_texts(tmp_path / "t.jsonl.gz", column="body") == ["first"]
    assert read_texts(tmp_path / "t.parquet") == ["first", "second"]
    assert read_texts(tmp_path / "t.csv") == ["first, with comma", "second"]
    assert read_texts(tmp_path / "t.tsv") == ["first"]


def test_read_texts_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "none.txt")
    one_line_error(err, "none.txt", "file not found")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "empty.txt")
    one_line_error(err, "empty.txt", "file is empty")
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "blank.txt")
    one_line_error(err, "blank.txt", "no text found")
    (tmp_path / "c.jsonl").write_text('{"sentence": "a"}\n')
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "c.jsonl")
    one_line_error(err, "missing column(s) 'text'", "the file has 'sentence'")
    (tmp_path / "c.csv").write_text("sentence\na\n")
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "c.csv")
    one_line_error(err, "missing column(s) 'text'")
    (tmp_path / "lines.txt").write_text("a\nb\n")
    with pytest.raises(DataError) as err:  # one text a line: no column to name
        read_texts(tmp_path / "lines.txt", column="text")
    one_line_error(err, "lines.txt is a text file (one text a line): it has no column 'text'")
    (tmp_path / "doc.pdf").write_text("x")
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "doc.pdf")
    one_line_error(err, "doc.pdf", "unsupported file type")
    (tmp_path / "latin.txt").write_bytes(b"ok\ncaf\xe9\n")
    assert read_texts(tmp_path / "latin.txt") == ["ok", "caf\ufffd"]  # replaced, and counted
    (tmp_path / "fake.txt.gz").write_bytes(b"plain text, not gzip")
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "fake.txt.gz")
    one_line_error(err, "fake.txt.gz", "gzip")
    with pytest.raises(DataError) as err:
        read_texts(tmp_path / "blank.txt", limit=0)
    one_line_error(err, "limit")


def test_read_texts_real_unlabeled(data_dir: Path) -> None:
    texts = read_texts(data_dir / "unlabeled" / "en" / "wiki1m_partial.txt.gz", limit=100)
    assert len(texts) == 100
    assert all(t == t.strip() and t for t in texts)


# --------------------------------------------------------------------------- embeddings


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_load_embeddings_npy_is_memmapped(tmp_path: Path, dtype: type) -> None:
    x = np.arange(12, dtype=dtype).reshape(4, 3)
    np.save(tmp_path / "e.npy", x)
    loaded = load_embeddings(tmp_path / "e.npy")
    assert isinstance(loaded, np.memmap)
    assert loaded.dtype == dtype
    np.testing.assert_array_equal(loaded, x)


def test_load_embeddings_npy_errors(tmp_path: Path) -> None:
    np.save(tmp_path / "flat.npy", np.zeros(5, dtype=np.float32))
    with pytest.raises(DataError) as err:
        load_embeddings(tmp_path / "flat.npy")
    one_line_error(err, "flat.npy", "2-D", "(5,)")
    np.save(tmp_path / "words.npy", np.array([["a", "b"]]))
    with pytest.raises(DataError) as err:
        load_embeddings(tmp_path / "words.npy")
    one_line_error(err, "words.npy", "not numeric")
    # An object-dtype header, written by hand: such files need unpickling, which we refuse.
    with (tmp_path / "obj.npy").open("wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "|O", "fortran_order": False, "shape": (2, 2)}
        )
    with pytest.raises(DataError) as err:
        load_embeddings(tmp_path / "obj.npy")
    one_line_error(err, "obj.npy", "Python objects")
    (tmp_path / "junk.npy").write_bytes(b"junk")
    with pytest.raises(DataError) as err:
        load_embeddings(tmp_path / "junk.npy")
    one_line_error(err, "junk.npy", "not a readable .npy")
    np.save(tmp_path / "none.npy", np.zeros((0, 8), dtype=np.float32))
    with pytest.raises(DataError) as err:
        load_embeddings(tmp_path / "none.npy")
    one_line_error(err, "none.npy", "empty")
    with pytest.raises(DataError) as err:
        load_embeddings(tmp_path / "missing.npy")
    one_line_error(err, "missing.npy", "file not found")
    (tmp_path / "e.csv").write_text("x")
    with pytest.raises(DataError) as err:
        load_embeddings(tmp_path / "e.csv")
    one_line_error(err, "e.csv", "unsupported")


@pytest.mark.parametrize(
    "array_type",
    [pa.list_(pa.float64()), pa.large_list(pa.float32()), pa.list_(pa.float32(), 3)],
)
def test_load_embeddings_parquet(tmp_path: Path, array_type: pa.DataType) -> None:
    rows = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    pq.write_table(
        pa.table({"id": [1, 2], "embedding": pa.array(rows, type=array_type)}),
        tmp_path / "e.parquet",
    )
    x = load_embeddings(tmp_path / "e.parquet")
    assert x.dtype == np.float32 and x.shape == (2, 3)
    np.testing.assert_array_equal(x, rows)


def test_load_embeddings_parquet_errors(tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"embedding": [[1.0, 2.0], [1.0, 2.0], [1.0]]}), path)
    with pytest.raises(DataError) as err:
        load_embeddings(path)
    one_line_error(err, "r.parquet", "row 2 has 1 values", "row 0 has 2")
    with pytest.raises(DataError) as err:
        load_embeddings(path, column="vector")
    one_line_error(err, "missing column(s) 'vector'", "the file has 'embedding'")
    pq.write_table(pa.table({"embedding": [[1.0], None]}), path)
    with pytest.raises(DataError) as err:
        load_embeddings(path)
    one_line_error(err, "row 1", "null")
    pq.write_table(pa.table({"embedding": ["1,2"]}), path)
    with pytest.raises(DataError) as err:
        load_embeddings(path)
    one_line_error(err, "type string", "list of numbers")


def test_check_finite(tmp_path: Path) -> None:
    x = np.zeros((3000, 4), dtype=np.float32)
    check_finite(x, chunk_rows=100)
    x[1234, 2] = np.nan
    x[2000, 0] = np.inf
    with pytest.raises(DataError) as err:
        check_finite(x, chunk_rows=100)
    assert one_line_error(err) == "embeddings contain NaN or inf (first at row 1234)"
    np.save(tmp_path / "x.npy", x.astype(np.float16))
    with pytest.raises(DataError) as err:
        check_finite(load_embeddings(tmp_path / "x.npy"), name="corpus vectors", chunk_rows=512)
    one_line_error(err, "corpus vectors contain NaN or inf (first at row 1234)")
    check_finite(np.ones((5, 2), dtype=np.int8))


# --------------------------------------------------------------------------- hub


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Replace snapshot_download: parquet layout for sts12, jsonl.gz layout for the rest."""
    import huggingface_hub

    calls: list[dict] = []

    def snapshot_download(repo_id: str, **kwargs: object) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        root = tmp_path / repo_id.replace("/", "--")
        if not root.exists():
            (root / "data").mkdir(parents=True)
            if repo_id == "mteb/sts12-sts":
                for i, score in enumerate([1.0, 2.0]):
                    table = pa.table(
                        {"sentence1": [f"a{i}"], "sentence2": [f"b{i}"], "score": [score]}
                    )
                    pq.write_table(table, root / "data" / f"test-0000{i}-of-00002.parquet")
            else:
                for split in ("test", "validation"):
                    row = {"sentence1": f"{split} x", "sentence2": "y", "score": 3.5}
                    write_gz(root / f"{split}.jsonl.gz", json.dumps(row) + "\n")
        return str(root)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_hub_parquet_layout(fake_hub: list[dict]) -> None:
    pairs = load_hf_sts("sts12")
    assert pairs.name == "STS12"
    assert pairs.sentences1 == ["a0", "a1"]
    np.testing.assert_array_equal(pairs.scores, [1.0, 2.0])
    assert fake_hub[0]["repo_id"] == "mteb/sts12-sts"
    assert fake_hub[0]["repo_type"] == "dataset"


def test_hub_jsonl_layout(fake_hub: list[dict]) -> None:
    test = load_hf_sts("STS-B")
    assert (test.name, test.sentences1, test.scores.tolist()) == ("STS-B", ["test x"], [3.5])
    dev = load_hf_sts("mteb/stsbenchmark-sts", split="dev")
    assert (dev.name, dev.sentences1) == ("STS-B/dev", ["validation x"])
    assert load_hf_sts("sickr").name == "SICK-R"
    assert set(HUB_REPOS) == set(STS_SUITE)


def test_hub_missing_split(fake_hub: list[dict], tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_hf_sts("sickr", split="train")
    one_line_error(err, "mteb/sickr-sts has no 'train' split")


@pytest.mark.parametrize("error", ["offline", "missing", "oserror", "other"])
def test_hub_offline(monkeypatch: pytest.MonkeyPatch, error: str) -> None:
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    def snapshot_download(repo_id: str, **kwargs: object) -> str:
        raise {
            "offline": OfflineModeIsEnabled("HF_HUB_OFFLINE=1"),
            "missing": LocalEntryNotFoundError("not in cache"),
            "oserror": OSError("network unreachable"),
            "other": RuntimeError("unexpected"),
        }[error]

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(DataError) as err:
        load_hf_sts("sts12")
    assert one_line_error(err) == (
        "cannot download mteb/sts12-sts from the Hugging Face hub (offline?): "
        "use --data-dir with the SentEval files instead"
    )


def test_unlabeled_sentences_are_distinct_long_enough_unexcluded_and_seeded(
    tmp_path: Path,
) -> None:
    from demitasse.data import load_unlabeled

    folder = tmp_path / "unlabeled" / "en"
    folder.mkdir(parents=True)
    lines = [f"sentence number {i} here" for i in range(40)]
    lines += ["too short", "sentence number 3 here"]
    with gzip.open(folder / "a.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    every = load_unlabeled(tmp_path)
    assert sorted(every) == sorted(f"sentence number {i} here" for i in range(40))
    picked = load_unlabeled(tmp_path, n=10, seed=1, exclude={"sentence number 5 here"})
    assert len(picked) == 10 and "sentence number 5 here" not in picked
    assert picked == load_unlabeled(tmp_path, n=10, seed=1, exclude={"sentence number 5 here"})
    assert picked != load_unlabeled(tmp_path, n=10, seed=2)
    with pytest.raises(DataError, match="no unlabeled corpora"):
        load_unlabeled(tmp_path / "unlabeled")


def test_perturbed_copies_are_reproducible_close_variants() -> None:
    sentences = [
        "a man is playing a large guitar on the stage tonight",
        "the quick brown fox jumps over the lazy dog",
        "two dogs run across a green field",
        "hello there",
        "",
    ] * 20
    copies = perturb_sentences(sentences, seed=1)
    assert copies == perturb_sentences(sentences, seed=1)
    assert copies != perturb_sentences(sentences, seed=2)
    assert copies[3::5] == ["hello there"] * 20 and copies[4::5] == [""] * 20
    long_ones = [(s, c) for s, c in zip(sentences, copies, strict=True) if len(s.split()) >= 3]
    # Two swaps of the same neighbours undo each other, so a few copies stay unchanged.
    assert sum(c != s for s, c in long_ones) >= 0.8 * len(long_ones)
    for original, copy in long_ones:
        kept = copy.split()
        assert 2 <= len(kept) <= len(original.split())
        assert set(kept) <= set(original.split())
    rng = random.Random(0)
    assert perturb_sentence("one two three four five", rng, dropout=1.0).split()
