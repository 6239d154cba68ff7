"""``benchmarks/export_recipe.py``'s outside-demitasse half reads and scores a BEIR split as
demitasse does, so its nDCG@10 and demitasse's are comparable (issue #50's acceptance)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import export_recipe as recipe
from demitasse.data.beir import load_beir
from demitasse.evaluation.ranking_metrics import evaluate_run

pytest.importorskip("pytrec_eval")


def _beir(folder: Path) -> Path:
    """A gzipped corpus (one document without a title), a query no split judges, a grade-0
    judgement, grades above 1, and a query id that is also a document id."""
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"T{i}", "text": f" text {i} "} for i in range(8)]
    docs[3].pop("title")
    docs.append({"_id": "q1", "title": "", "text": "the query's own document"})
    with gzip.open(folder / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(d) + "\n" for d in docs)
    queries = [{"_id": f"q{i}", "text": f"query {i}"} for i in range(5)]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    test = ["query-id\tcorpus-id\tscore", "q0\td0\t2", "q0\td1\t0", "q1\td2\t1", "q2\td3\t1"]
    train = ["query-id\tcorpus-id\tscore", "q3\td4\t1", "q3\td5\t1"]
    (folder / "qrels" / "test.tsv").write_text("\r\n".join(test) + "\r\n")
    (folder / "qrels" / "train.tsv").write_text("\n".join(train) + "\n")
    return folder


def test_the_outside_loader_reads_what_demitasse_reads(tmp_path: Path) -> None:
    folder = _beir(tmp_path / "scifact")
    ids, texts, query_ids, query_texts, qrels = recipe.read_beir_split(str(folder), "test")
    ours = load_beir(folder, split="test")
    assert (ids, texts) == (ours.corpus_ids, ours.corpus_texts)
    assert (query_ids, query_texts) == (ours.query_ids, ours.query_texts)
    assert qrels == ours.qrels and qrels["q0"]["d1"] == 0


def test_the_standard_ndcg_is_demitasses(tmp_path: Path) -> None:
    _, _, _, _, qrels = recipe.read_beir_split(str(_beir(tmp_path / "scifact")), "test")
    runs = [
        {"q0": ["d1", "d0"], "q1": ["q1", "d5", "d2"], "q2": ["d3"]},  # q1 finds itself first
        {"q0": ["d0"], "q1": []},  # q2 unsearched, q1 found nothing: both score 0
        {"q0": [f"d{i}" for i in (7, 6, 5, 4, 3, 2, 1, 0)], "q1": ["d2"], "q2": ["d0", "d3"]},
    ]
    for run in runs:
        expected = evaluate_run(run, qrels, ["ndcg@10"])["ndcg@10"]
        assert recipe.standard_ndcg_at_10(run, qrels) == pytest.approx(expected, abs=1e-9)


def test_a_subset_keeps_every_judged_document(tmp_path: Path) -> None:
    source = _beir(tmp_path / "full")
    subset = recipe.write_subset(source, tmp_path / "sub" / "scifact", max_docs=4, max_queries=2)
    test, train = load_beir(subset, split="test"), load_beir(subset, split="train")
    assert test.query_ids == ["q0", "q1"] and train.query_ids == ["q3"]
    judged = {d for q in (test.qrels | train.qrels).values() for d in q}
    assert judged <= set(test.corpus_ids) and len(test.corpus_ids) == len(judged)


def test_the_recipe_is_the_readmes_code(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(
        "# m\n\n```python\nfirst = 1\n```\n\n## Search with rescoring (as demitasse searches)\n\n"
        'text\n\n```python\nfolder = "path/to/this/folder"\nrows = 1\n```\n'
    )
    assert recipe.recipe_code(tmp_path) == f"folder = {str(tmp_path)!r}\nrows = 1\n"
    (tmp_path / "README.md").write_text("# m\n")
    with pytest.raises(SystemExit, match="no '## Search with rescoring' section"):
        recipe.recipe_code(tmp_path)
