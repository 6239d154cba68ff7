"""BEIR retrieval: the loader, exact faiss search, ranking metrics and the retrieval task."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli.specs import parse_compressor_specs
from demitasse.compress import make_quantizer
from demitasse.data.beir import BeirDataset, load_beir
from demitasse.errors import DataError, UnknownNameError
from demitasse.evaluation.grid import evaluate_grid
from demitasse.evaluation.ranking_metrics import (
    evaluate_run,
    ndcg_at_k,
    parse_metric,
    per_query,
    recall_at_k,
    reciprocal_rank_at_k,
    search_depth,
)
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.evaluation.tasks import EmbeddedTexts
from demitasse.search import QuantizedIndex, exact_search
from tests.helpers import FakeEncoder

# ---- loader ---------------------------------------------------------------------------------


def test_loads_real_scifact(data_dir: Path) -> None:
    folder = data_dir / "beir" / "scifact"
    test = load_beir(folder)
    assert test.name == "SciFact"
    assert len(test.corpus_ids) == len(test.corpus_texts) == 5183
    assert len(test.query_ids) == len(test.query_texts) == 300
    assert sum(len(docs) for docs in test.qrels.values()) == 339
    assert set(test.qrels) == set(test.query_ids)
    first = test.corpus_ids.index("4983")
    assert test.corpus_texts[first].startswith("Microstructural development of human newborn")
    assert "magnetic resonance imaging. Alterations of the architecture" in test.corpus_texts[first]
    train = load_beir(folder, split="train")
    assert train.name == "SciFact/train"
    assert len(train.query_ids) == 809
    assert sum(len(docs) for docs in train.qrels.values()) == 919


def _write_beir(
    folder: Path,
    corpus: list[dict] | None = None,
    queries: list[dict] | None = None,
    qrels: str = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n",
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if corpus is None:
        corpus = [
            {"_id": "d1", "title": "Cats", "text": "Cats purr. "},
            {"_id": "d2", "title": "", "text": " Dogs bark."},
            {"_id": "d3", "title": "Fish", "text": "Fish swim."},
        ]
    if queries is None:
        queries = [
            {"_id": "q1", "text": "what purrs"},
            {"_id": "q2", "text": "what barks"},
            {"_id": "q3", "text": "unjudged"},
        ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_text(qrels)
    return folder


def test_loader_joins_titles_and_keeps_judged_queries(tmp_path: Path) -> None:
    data = load_beir(_write_beir(tmp_path / "toy"))
    assert data.name == "toy"
    assert data.corpus_ids == ["d1", "d2", "d3"]
    assert data.corpus_texts == ["Cats Cats purr.", "Dogs bark.", "Fish Fish swim."]
    assert data.query_ids == ["q1", "q2"]
    assert data.query_texts == ["what purrs", "what barks"]
    assert data.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    plain = tmp_path / "toy" / "corpus.jsonl"
    (tmp_path / "toy" / "corpus.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    assert load_beir(tmp_path / "toy", name="Toy").corpus_texts == data.corpus_texts


HEADER = "query-id\tcorpus-id\tscore\n"


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("corpus.jsonl", None, "no corpus.jsonl or corpus.jsonl.gz"),
        ("queries.jsonl", None, "no queries.jsonl"),
        ("corpus.jsonl", "\n", r"corpus.jsonl: no records"),
        ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": \n', r"corpus.jsonl:2: invalid JSON"),
        ("queries.jsonl", '{"_id": "q1"}\n', r"queries.jsonl:1: missing field 'text'"),
        ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n' * 2, r"corpus.jsonl:2: duplicate _id 'd1'"),
        (
            "qrels/test.tsv",
            HEADER + "q9\td1\t1\n",
            r"test.tsv:2: query id 'q9' is not in \S*queries",
        ),
        (
            "qrels/test.tsv",
            HEADER + "q1\td9\t1\n",
            r"test.tsv:2: corpus id 'd9' is not in \S*corpus",
        ),
        (
            "qrels/test.tsv",
            HEADER + "q1\td1\thigh\n",
            r"test.tsv:2: score 'high' is not an integer",
        ),
        ("qrels/test.tsv", HEADER + "q1 d1 1\n", r"test.tsv:2: expected 3 tab-separated fields"),
        ("qrels/test.tsv", HEADER, r"test.tsv: no relevance judgements"),
    ],
)
def test_loader_errors_name_the_file_and_line(
    tmp_path: Path, file: str, content: str | None, message: str
) -> None:
    folder = _write_beir(tmp_path / "toy")
    if content is None:
        (folder / file).unlink()
    else:
        (folder / file).write_text(content)
    with pytest.raises(DataError, match=message) as caught:
        load_beir(folder)
    assert "\n" not in str(caught.value)


def test_loader_rejects_unknown_split_and_folder(tmp_path: Path) -> None:
    folder = _write_beir(tmp_path / "toy")
    with pytest.raises(DataError, match=r"unknown split 'dev' \(no qrels/dev.tsv\); have: test"):
        load_beir(folder, split="dev")
    with pytest.raises(DataError, match="does not exist"):
        load_beir(tmp_path / "nowhere")


# ---- metrics --------------------------------------------------------------------------------


def test_metrics_on_a_hand_computed_example() -> None:
    judged = {"d1": 1, "d2": 2, "d4": 0}
    ranking = ["d3", "d2", "d1", "d4"]
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(ranking, judged, 10) == pytest.approx(dcg / ideal)
    assert ndcg_at_k(ranking, judged, 2) == pytest.approx((2 / math.log2(3)) / ideal)
    assert ndcg_at_k(["d2", "d1"], judged, 10) == pytest.approx(1.0)
    assert recall_at_k(ranking, judged, 2) == 0.5
    assert recall_at_k(ranking, judged, 100) == 1.0
    assert reciprocal_rank_at_k(ranking, judged, 10) == 0.5
    assert reciprocal_rank_at_k(ranking, judged, 1) == 0.0
    # A query judged only non-relevant counts, with 0, as BEIR averages it.
    qrels = {"a": judged, "b": {"d4": 0}}
    means = evaluate_run({"a": ranking, "b": ranking}, qrels)
    assert means["ndcg@10"] == pytest.approx(100 * dcg / ideal / 2)
    assert means["recall@100"] == pytest.approx(50.0)
    assert means["mrr@10"] == pytest.approx(25.0)
    with pytest.raises(DataError, match="unknown ranking metric"):
        parse_metric("map@10")


def test_a_query_does_not_score_by_finding_itself() -> None:
    # ArguAna and Quora: each query is also a document under its own id. BEIR and MTEB drop
    # that hit before scoring (ignore_identical_ids); so do we, unless asked not to.
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    run = {"q1": ["q1", "d1", "q2"], "q2": ["q2", "d2", "q1"]}
    assert evaluate_run(run, qrels)["mrr@10"] == pytest.approx(100.0)
    assert per_query(run, qrels, "ndcg@1") == [1.0, 1.0]
    kept = evaluate_run(run, qrels, ignore_identical_ids=False)
    assert kept["mrr@10"] == pytest.approx(50.0)
    assert per_query(run, qrels, "ndcg@1", ignore_identical_ids=False) == [0.0, 0.0]
    # The search asks for one hit more only where a query id also names a document.
    assert search_depth(10, ["q1", "q2"], ["q1", "d1"]) == 11
    assert search_depth(10, ["q1", "q2"], ["d1", "d2"]) == 10


def test_metrics_match_pytrec_eval_on_random_runs() -> None:
    pytrec_eval = pytest.importorskip(
        "pytrec_eval", reason="pytrec-eval-terrier is not installed (independent cross-check)"
    )
    rng = np.random.default_rng(7)
    docs = [f"d{i}" for i in range(300)]
    qrels: dict[str, dict[str, int]] = {}
    run_scores: dict[str, dict[str, float]] = {}
    for q in range(60):
        judged = rng.choice(len(docs), size=int(rng.integers(1, 15)), replace=False)
        qrels[f"q{q}"] = {docs[i]: int(rng.integers(0, 3)) for i in judged}
        retrieved = rng.choice(len(docs), size=150, replace=False)
        run_scores[f"q{q}"] = {docs[i]: float(rng.random()) for i in retrieved}
    ranked = {q: sorted(s, key=s.__getitem__, reverse=True) for q, s in run_scores.items()}
    ours = evaluate_run(ranked, qrels)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    theirs = evaluator.evaluate(run_scores)
    top10 = {q: {d: run_scores[q][d] for d in r[:10]} for q, r in ranked.items()}
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    assert set(theirs) == set(qrels)
    for metric, key, table in (
        ("ndcg@10", "ndcg_cut_10", theirs),
        ("recall@100", "recall_100", theirs),
        ("mrr@10", "recip_rank", mrr),
    ):
        reference = 100 * np.mean([table[q][key] for q in qrels])
        assert ours[metric] == pytest.approx(reference, abs=1e-6)


# ---- exact search ---------------------------------------------------------------------------

needs_faiss = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss-cpu (the eval extra) is absent"
)


def _stable_top_k(similarity: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


@needs_faiss
@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_float_search_equals_numpy_top_k(metric: str) -> None:
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((40, 24)).astype(np.float32)
    corpus = rng.standard_normal((700, 24)) * rng.uniform(0.5, 2, (700, 1))
    corpus = corpus.astype(np.float32)
    q, c = queries.astype(np.float64), corpus.astype(np.float64)
    if metric == "cosine":
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        similarity = q @ c.T
    else:
        similarity = -((q[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)
    scores, rows = exact_search(queries, corpus, k=25, metric=metric)
    expected = _stable_top_k(similarity, 25)
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(similarity, expected, 1), atol=1e-4)


@needs_faiss
def test_int8_search_scores_the_float_query_against_bucket_centres() -> None:
    rng = np.random.default_rng(1)
    quantizer = make_quantizer("int8").fit(rng.standard_normal((200, 32)))
    queries = rng.standard_normal((30, 32)).astype(np.float32)
    corpus = quantizer.quantize(rng.standard_normal((500, 32)))
    scores, rows = QuantizedIndex(corpus, quantizer).search(queries, 20)
    # Reference: the cosine of each float query and each code's bucket centres.
    decoded = quantizer.dequantize(corpus)
    similarity = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (
        decoded / np.linalg.norm(decoded, axis=1, keepdims=True)
    ).T
    np.testing.assert_array_equal(rows, _stable_top_k(similarity, 20))
    np.testing.assert_allclose(scores, np.take_along_axis(similarity, rows, 1), atol=1e-5)
    # Paired codes compare the same way: the cosine of their bucket centres.
    paired = quantizer.similarity(corpus[:10], corpus[10:20])
    expected = (decoded[:10] * decoded[10:20]).sum(1) / (
        np.linalg.norm(decoded[:10], axis=1) * np.linalg.norm(decoded[10:20], axis=1)
    )
    np.testing.assert_allclose(paired, expected, atol=1e-6)


@needs_faiss
@pytest.mark.parametrize("bits", [8, 20, 64])
def test_binary_search_equals_numpy_top_k_with_ties_by_row(bits: int) -> None:
    rng = np.random.default_rng(bits)
    quantizer = make_quantizer("binary")
    queries = quantizer.quantize(rng.standard_normal((50, bits)))
    corpus = quantizer.quantize(rng.standard_normal((400, bits)))
    corpus[100:110] = corpus[3]  # exact duplicates tie everywhere
    similarity = np.stack(
        [
            quantizer.similarity(np.repeat(q[None], len(corpus), 0), corpus, dim=bits)
            for q in queries
        ]
    )
    scores, rows = exact_search(queries, corpus, k=30, metric="hamming", dim=bits)
    expected = _stable_top_k(similarity, 30)
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_array_equal(scores, np.take_along_axis(similarity, expected, 1))


@needs_faiss
def test_search_rejects_mismatched_inputs() -> None:
    floats = np.zeros((2, 8), np.float32)
    with pytest.raises(DataError, match="columns"):
        exact_search(floats, np.zeros((3, 4), np.float32))
    with pytest.raises(DataError, match="packed binary codes"):
        exact_search(floats, floats, metric="hamming")
    with pytest.raises(UnknownNameError, match="unknown search metric"):
        exact_search(floats, floats, metric="dot")
    with pytest.raises(DataError, match="k must be"):
        exact_search(floats, floats, k=0)
    assert exact_search(floats, floats, k=100)[1].shape == (2, 2)


# ---- the task -------------------------------------------------------------------------------


def _toy_dataset(name: str, n_docs: int = 40, n_queries: int = 8) -> BeirDataset:
    """Each query's text is its relevant document's text, so a sound pipeline ranks it first."""
    docs = [f"{name} document {i}" for i in range(n_docs)]
    relevant = list(range(0, n_docs, n_docs // n_queries))[:n_queries]
    return BeirDataset(
        name=name,
        corpus_ids=[f"d{i}" for i in range(n_docs)],
        corpus_texts=docs,
        query_ids=[f"q{i}" for i in range(n_queries)],
        query_texts=[docs[r] for r in relevant],
        qrels={f"q{i}": {f"d{r}": 1} for i, r in enumerate(relevant)},
    )


@needs_faiss
def test_task_scores_a_hand_built_configuration() -> None:
    data = BeirDataset(
        name="Tiny",
        corpus_ids=["a", "b", "c"],
        corpus_texts=["doc a", "doc b", "doc c"],
        query_ids=["q"],
        query_texts=["query"],
        qrels={"q": {"b": 1, "c": 1}},
    )
    task = RetrievalTask(data)
    texts = task.texts()
    assert texts == ["query", "doc a", "doc b", "doc c"]
    vectors = np.array([[1, 0], [1, 0.1], [0.5, 1], [-1, 0]], np.float32)
    embedded = EmbeddedTexts(texts, vectors, make_quantizer("float32"), dim=2)
    scores = {s.metric: s.score for s in task.evaluate(embedded)}
    # ranking a, b, c: relevant at ranks 2 and 3
    ideal = 1 + 1 / math.log2(3)
    assert scores["ndcg@10"] == pytest.approx(100 * (1 / math.log2(3) + 1 / 2) / ideal)
    assert scores["recall@100"] == pytest.approx(100.0)
    assert scores["mrr@10"] == pytest.approx(50.0)
    assert all(s.dataset == "Tiny" for s in task.evaluate(embedded))
    with pytest.raises(DataError, match="metric_space"):
        RetrievalTask(data, metric_space="dot")


@needs_faiss
@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_task_searches_past_a_query_that_is_its_own_document(precision: str) -> None:
    # ArguAna-like: the query text is a corpus document under the query's id, so every
    # search finds it first. Its relevant document is the next nearest, and recall@2 must
    # still see two hits besides the query itself.
    data = BeirDataset(
        name="SelfHits",
        corpus_ids=["q", "good", "also", "far"],
        corpus_texts=["the query", "good doc", "also good", "far doc"],
        query_ids=["q"],
        query_texts=["the query"],
        qrels={"q": {"good": 1, "also": 1}},
    )
    task = RetrievalTask(data, metrics=["ndcg@1", "recall@2"])
    assert task.depth(data) == 3
    texts = task.texts()
    row = {"the query": [1, 0], "good doc": [0.9, 0.3], "also good": [0.7, 0.7], "far doc": [-1, 0]}
    vectors = np.array([row[t] for t in texts], np.float32)
    quantizer = make_quantizer(precision).fit(vectors)
    embedded = EmbeddedTexts(texts, quantizer.quantize(vectors), quantizer, dim=2, vectors=vectors)
    scores = {s.metric: s.score for s in task.evaluate(embedded) if s.dataset == "SelfHits"}
    assert scores["ndcg@1"] == pytest.approx(100.0)
    assert scores["recall@2"] == pytest.approx(100.0)


@needs_faiss
def test_task_runs_in_the_grid_for_every_precision() -> None:
    task = RetrievalTask([_toy_dataset("Toy"), _toy_dataset("Toy2", 30, 5)], metric_space="l2")
    records = evaluate_grid(
        FakeEncoder(dim=32),
        [task],
        specs=parse_compressor_specs("none,truncate"),
        dims=[16],
        precisions=["float32", "int8", "binary"],
        fit_texts=[f"calibration {i}" for i in range(50)],
    )
    assert {(r.method, r.precision) for r in records} == {
        (m, p) for m in ("none", "truncate") for p in ("float32", "int8", "binary")
    }
    assert {r.metric for r in records} == {"ndcg@10", "recall@100", "mrr@10"}
    assert {r.dataset for r in records} == {"Toy", "Toy2", "avg"}
    assert all(r.task == "retrieval" for r in records)
    # Identical texts have identical codes at every precision: perfect retrieval.
    assert all(r.score == pytest.approx(100.0) for r in records)
    binary = next(r for r in records if r.precision == "binary")
    assert binary.extra["search"] == "hamming"
