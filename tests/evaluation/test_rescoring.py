# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Search the way vector databases do: quantised first stage, top k·F rescored with the float
query against int8 or float document vectors; bytes, latency and the records that say so."""

from __future__ import annotations

import importlib.util
import itertools
import math
from typing import Any

import numpy as np
import pytest

from demitasse.cli.specs import parse_compressor_specs
from demitasse.compress import Quantizer, make_quantizer
from demitasse.data.beir import BeirDataset
from demitasse.errors import CompressorError, DataError
from demitasse.evaluation.grid import evaluate_grid
from demitasse.evaluation.ranking_metrics import evaluate_run
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.evaluation.tasks import EmbeddedTexts
from demitasse.latency import measure_search_latency
from demitasse.search import RESCORE_POOL_K, QuantizedIndex, Rescoring, exact_search
from tests.helpers import FakeEncoder, synthetic_beir

Data = tuple[np.ndarray, np.ndarray]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss-cpu (the eval extra) is absent"
)


def clustered(n: int, d: int, seed: int, centres: int = 20) -> np.ndarray:
    """Vectors around a few centres, so neighbourhoods exist and quantisation blurs them."""
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((centres, d))
    return (means[rng.integers(0, centres, n)] + 0.6 * rng.standard_normal((n, d))).astype(
        np.float32
    )


def unit(X: np.ndarray) -> np.ndarray:
    X = X.astype(np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def stable_top(similarity: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def hamming_agreement(quantizer: Quantizer, queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    bits_q = np.unpackbits(quantizer.quantize(queries), axis=1, count=queries.shape[1])
    bits_d = np.unpackbits(quantizer.quantize(docs), axis=1, count=docs.shape[1])
    return (bits_q[:, None, :] == bits_d[None, :, :]).sum(axis=2)


def reference_rescored(first: np.ndarray, final: np.ndarray, k: int, depth: int) -> np.ndarray:
    """Rows of the top ``k`` by ``final`` among the top ``depth`` by ``first``, both
    ordered best first with ties by row: the definition, in numpy."""
    candidates = stable_top(first, depth)
    rescored = np.take_along_axis(final, candidates, axis=1)
    order = np.lexsort((candidates, -rescored), axis=1)[:, :k]
    return np.take_along_axis(candidates, order, axis=1)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    docs = clustered(600, 32, seed=0)
    queries = clustered(40, 32, seed=1)
    return docs, queries


@pytest.mark.parametrize(("k", "factor"), [(10, 1), (10, 4), (7, 2.5), (100, 10)])
def test_binary_search_rescored_with_float_vectors_is_the_definition(
    data: Data, k: int, factor: float
) -> None:
    docs, queries = data
    quantizer = make_quantizer("binary")
    index = QuantizedIndex.from_vectors(docs, quantizer, rescore="float32")
    scores, rows = index.search(queries, k, rescore_multiplier=factor)
    cosine = unit(queries) @ unit(docs).T
    depth = min(len(docs), math.ceil(max(k, RESCORE_POOL_K) * factor))
    expected = reference_rescored(hamming_agreement(quantizer, queries, docs), cosine, k, depth)
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(cosine, rows, 1), atol=1e-5)


@pytest.mark.parametrize("factor", [1.5, 4])
def test_the_top_results_do_not_depend_on_k(data: Data, factor: float) -> None:
    """An application that pages results sees them stay put: the rescoring pool is sized for
    at least the top 10, so every k up to 10 gets a prefix of the top 10 (issue #50)."""
    docs, queries = data
    quantizer = make_quantizer("binary")
    index = QuantizedIndex.from_vectors(docs, quantizer, rescore="float32")
    _, top10 = index.search(queries, 10, rescore_multiplier=factor)
    for k in range(1, 10):
        _, rows = index.search(queries, k, rescore_multiplier=factor)
        np.testing.assert_array_equal(rows, top10[:, :k])
    # A pool of ceil(k·F) alone would move them: the definition with it, for k = 3.
    agreement, cosine = hamming_agreement(quantizer, queries, docs), unit(queries) @ unit(docs).T
    narrow = reference_rescored(agreement, cosine, 3, math.ceil(3 * factor))
    assert (narrow != top10[:, :3]).any()


def test_int8_vectors_rescore_as_their_bucket_centres(data: Data) -> None:
    docs, queries = data
    binary = make_quantizer("binary", rotation="itq").fit(docs)
    int8 = make_quantizer("int8").fit(docs)
    index = QuantizedIndex.from_vectors(docs, binary, rescore="int8", rescore_quantizer=int8)
    _, rows = index.search(queries, 10, rescore_multiplier=4)
    centres = int8.dequantize(int8.quantize(docs))
    first = hamming_agreement_rotated(binary, queries, docs)
    expected = reference_rescored(first, unit(queries) @ unit(centres).T, 10, 40)
    np.testing.assert_array_equal(rows, expected)
    assert (index.index_bytes_per_vector, index.rescore_bytes_per_vector) == (4, 32)


def hamming_agreement_rotated(
    quantizer: Quantizer, queries: np.ndarray, docs: np.ndarray
) -> np.ndarray:
    bits_q = np.unpackbits(quantizer.quantize(queries), axis=1)
    bits_d = np.unpackbits(quantizer.quantize(docs), axis=1)
    return (bits_q[:, None, :] == bits_d[None, :, :]).sum(axis=2)


def test_dequantize_is_within_half_a_step() -> None:
    X = clustered(300, 16, seed=3)
    int8 = make_quantizer("int8").fit(X)
    step = (int8.hi_ - int8.lo_) / 255
    error = np.abs(int8.dequantize(int8.quantize(X)) - X)
    assert (error <= step / 2 + 1e-6).all()
    np.testing.assert_array_equal(
        int8.dequantize(int8.quantize(X[:, :5])), int8.dequantize(int8.quantize(X))[:, :5]
    )
    with pytest.raises(CompressorError, match="2-D int8 array"):
        int8.dequantize(X)


def test_rescoring_every_document_is_exact_float_search(data: Data) -> None:
    docs, queries = data
    for store, quantizer in (
        ("float32", make_quantizer("binary")),
        ("float32", make_quantizer("int8").fit(docs)),
    ):
        index = QuantizedIndex.from_vectors(docs, quantizer, rescore=store)
        _, rows = index.search(queries, 10, rescore_multiplier=len(docs) / 10)
        np.testing.assert_array_equal(rows, exact_search(queries, docs, k=10)[1])


def test_plain_quantised_search_and_its_codes(data: Data) -> None:
    docs, queries = data
    for precision in ("float32", "int8", "binary"):
        quantizer = make_quantizer(precision).fit(docs)
        index = QuantizedIndex.from_vectors(docs, quantizer)
        if precision == "int8":  # the float query against the codes' bucket centres
            decoded = quantizer.dequantize(quantizer.quantize(docs))
            expected = exact_search(queries, decoded, k=15)
        else:
            metric = "hamming" if precision == "binary" else "cosine"
            expected = exact_search(
                quantizer.quantize(queries), quantizer.quantize(docs), k=15, metric=metric, dim=32
            )
        for factor in (None, 1):  # F = 1 without vectors kept: plain quantised search
            scores, rows = index.search(queries, 15, rescore_multiplier=factor)
            np.testing.assert_array_equal(rows, expected[1])
            np.testing.assert_allclose(scores, expected[0], atol=1e-5)
        # The first-stage score of any document is the one the search ranks by.
        np.testing.assert_allclose(index.first_stage_scores(queries, rows), scores, atol=1e-5)
        assert index.rescore_bytes_per_vector == 0
        assert index.index_bytes_per_vector == quantizer.bytes_per_vector(32)


def test_rescoring_in_another_space(data: Data) -> None:
    """PCA-like codes in memory, the full vectors kept for rescoring (as a database keeps the
    original vectors on disk)."""
    docs, queries = data
    narrow = make_quantizer("binary")
    index = QuantizedIndex.from_vectors(
        docs[:, :16], narrow, rescore="float32", rescore_vectors=docs
    )
    _, rows = index.search(queries[:, :16], 10, rescore_multiplier=5, rescore_queries=queries)
    first = hamming_agreement(narrow, queries[:, :16], docs[:, :16])
    expected = reference_rescored(first, unit(queries) @ unit(docs).T, 10, 50)
    np.testing.assert_array_equal(rows, expected)
    assert (index.index_bytes_per_vector, index.rescore_bytes_per_vector) == (2, 128)


def test_rescoring_finds_more_of_the_exact_neighbours(data: Data) -> None:
    docs, queries = data
    index = QuantizedIndex.from_vectors(docs, make_quantizer("binary"), rescore="float32")
    exact = exact_search(queries, docs, k=10)[1]
    found = [
        np.mean(
            [
                len(set(a) & set(b))
                for a, b in zip(
                    index.search(queries, 10, rescore_multiplier=f)[1], exact, strict=True
                )
            ]
        )
        for f in (1, 2, 4, 10)
    ]
    assert found == sorted(found) and found[-1] > found[0]


def test_bad_searches_fail_in_one_line(data: Data) -> None:
    docs, queries = data
    binary = make_quantizer("binary")
    plain = QuantizedIndex.from_vectors(docs, binary)
    kept = QuantizedIndex.from_vectors(docs, binary, rescore="float32")
    cases = [
        (lambda: plain.search(queries, 10, rescore_multiplier=4), "needs document vectors kept"),
        (lambda: kept.search(queries, 10, rescore_multiplier=0.5), "must be a number ≥ 1"),
        (lambda: kept.search(queries, 10, rescore_multiplier=math.nan), "must be a number ≥ 1"),
        (lambda: kept.search(queries, 0), "k must be a positive integer"),
        (lambda: kept.search(queries[:, :8], 10), "the documents' are 4"),
        (lambda: kept.search(queries.astype(np.int8), 10), "must be float vectors"),
        (
            lambda: kept.search(queries, 10, rescore_multiplier=2, rescore_queries=queries[:, :8]),
            "rescore_queries have 8 columns; the kept document vectors have 32",
        ),
        (
            lambda: QuantizedIndex.from_vectors(docs, binary, rescore="int8"),
            "needs a fitted int8 rescore_quantizer",
        ),
        (lambda: QuantizedIndex.from_vectors(docs, binary, rescore="int4"), "rescore must be"),
        (
            lambda: QuantizedIndex(binary.quantize(docs), binary, rescore_vectors=docs[:10]),
            "10 rows for 600 documents",
        ),
        (lambda: QuantizedIndex(docs, binary), "float32, but binary codes are uint8"),
        (lambda: Rescoring(4, "binary"), "rescoring precision must be one of float32, int8"),
    ]
    for call, message in cases:
        with pytest.raises(DataError, match=message) as caught:
            call()
        assert "\n" not in str(caught.value)


def test_latency_is_timed_one_query_per_call(data: Data) -> None:
    docs, queries = data
    index = QuantizedIndex.from_vectors(docs, make_quantizer("binary"), rescore="float32")
    ticks = itertools.count()
    calls: list[int] = []
    original = index.search

    def counted(q: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(q))
        return original(q, *args, **kwargs)

    index.search = counted  # type: ignore[method-assign]
    # A clock that advances 2 ms per reading: every query takes exactly 2 ms.
    latency = measure_search_latency(
        index, queries, 10, rescore_multiplier=4, repeats=2, clock=lambda: 0.002 * next(ticks)
    )
    assert set(calls) == {1} and len(calls) == 3 * len(queries)  # warm-up + 2 timed passes
    assert latency.p50_ms == pytest.approx(2.0) and latency.p99_ms == pytest.approx(2.0)
    assert latency.faiss_threads == 1 and latency.n_queries == len(queries)
    real = measure_search_latency(index, queries, 10, rescore_multiplier=4, repeats=1)
    assert 0 < real.p50_ms <= real.p99_ms


# ---- the retrieval task -------------------------------------------------------------------------


def synthetic_set(
    docs: np.ndarray, queries: np.ndarray, seed: int
) -> tuple[BeirDataset, list[str]]:
    """Random graded judgements over the documents nearest each query, named texts."""
    rng = np.random.default_rng(seed)
    near = exact_search(queries, docs, k=30)[1]
    qrels = {
        f"q{i}": {f"d{j}": int(rng.integers(0, 3)) for j in rng.choice(near[i], 5, replace=False)}
        for i in range(len(queries))
    }
    dataset = synthetic_beir(qrels, len(docs), len(queries))
    return dataset, [*dataset.query_texts, *dataset.corpus_texts]


def test_rescored_metrics_match_pytrec_eval(data: Data) -> None:
    pytrec_eval = pytest.importorskip(
        "pytrec_eval", reason="pytrec-eval-terrier is not installed (independent cross-check)"
    )
    docs, queries = data
    dataset, texts = synthetic_set(docs, queries, seed=5)
    vectors = np.concatenate([queries, docs])
    binary = make_quantizer("binary")
    int8 = make_quantizer("int8").fit(docs)
    embedded = EmbeddedTexts(
        texts, binary.quantize(vectors), binary, 32, vectors=vectors, rescore_quantizer=int8
    )
    task = RetrievalTask(dataset, rescoring=[Rescoring(4, "int8")])
    ours = {
        s.metric: s.score
        for s in task.evaluate(embedded)
        if s.extra["rescore"] == 4 and s.dataset == "Synthetic"
    }
    index = task.index(dataset, embedded, Rescoring(4, "int8"))
    scores, rows = index.search(queries, 100, rescore_multiplier=4)
    run = {
        q: {f"d{r}": float(s) for r, s in zip(hits, values, strict=True)}
        for q, hits, values in zip(dataset.query_ids, rows, scores, strict=True)
    }
    evaluator = pytrec_eval.RelevanceEvaluator(dataset.qrels, {"ndcg_cut.10", "recall.100"})
    theirs = evaluator.evaluate(run)
    top10 = {q: dict(sorted(r.items(), key=lambda kv: -kv[1])[:10]) for q, r in run.items()}
    mrr = pytrec_eval.RelevanceEvaluator(dataset.qrels, {"recip_rank"}).evaluate(top10)
    for metric, key, table in (
        ("ndcg@10", "ndcg_cut_10", theirs),
        ("recall@100", "recall_100", theirs),
        ("mrr@10", "recip_rank", mrr),
    ):
        assert ours[metric] == pytest.approx(100 * np.mean([table[q][key] for q in dataset.qrels]))
    # And rescoring changed the ranking (else this would only re-check the plain path).
    plain = {s.metric: s.score for s in task.evaluate(embedded) if s.extra["rescore"] == 1}
    assert plain["ndcg@10"] != ours["ndcg@10"]


def test_task_records_say_how_they_searched(data: Data) -> None:
    docs, queries = data
    first, texts = synthetic_set(docs[:300], queries[:20], seed=1)
    second = BeirDataset(**{**first.__dict__, "name": "Second"})
    vectors = np.concatenate([queries[:20], docs[:300]])
    binary = make_quantizer("binary")
    int8 = make_quantizer("int8").fit(docs)
    task = RetrievalTask(
        [first, second], rescoring=[4, Rescoring(10, "float32")], latency=True, latency_repeats=1
    )
    embedded = EmbeddedTexts(
        texts, binary.quantize(vectors), binary, 32, vectors=vectors, rescore_quantizer=int8
    )
    scores = task.evaluate(embedded)
    variants = {
        (s.extra["rescore"], s.extra["rescore_precision"], s.extra["index_bytes"],
         s.extra["store_bytes"])
        for s in scores
    }  # fmt: skip
    assert variants == {(1, None, 4, 0), (4, "int8", 4, 32), (10, "float32", 4, 128)}
    metrics = {s.metric for s in scores}
    assert metrics == {"ndcg@10", "recall@100", "mrr@10", "latency_p50_ms", "latency_p99_ms"}
    assert len(scores) == 3 * 5 * 3  # variants × metrics × (two sets + avg)
    latency = next(s for s in scores if s.metric == "latency_p99_ms" and s.dataset == "Second")
    assert latency.extra["faiss_threads"] == 1 and latency.extra["latency_queries"] == 20
    avg = next(s for s in scores if s.dataset == "avg" and s.extra["rescore"] == 4)
    assert avg.extra["rescore_precision"] == "int8" and "latency_queries" not in avg.extra
    # float32 search is exact: nothing to rescore, and its latency is exact search's.
    floats = make_quantizer("float32")
    exact = task.evaluate(EmbeddedTexts(texts, vectors, floats, 32, vectors=vectors))
    assert {s.extra["rescore"] for s in exact} == {1}
    assert {s.extra["index_bytes"] for s in exact} == {128}
    assert any(s.metric == "latency_p50_ms" for s in exact)


def test_the_grid_scores_rescoring_variants_with_int8_ranges_from_the_fit_data() -> None:
    docs = [f"document {i}" for i in range(40)]
    dataset = BeirDataset(
        name="Toy",
        corpus_ids=[f"d{i}" for i in range(40)],
        corpus_texts=docs,
        query_ids=[f"q{i}" for i in range(8)],
        query_texts=docs[:8],
        qrels={f"q{i}": {f"d{i}": 1} for i in range(8)},
    )
    records = evaluate_grid(
        FakeEncoder(dim=32),
        [RetrievalTask(dataset, rescoring=[Rescoring(2, "int8"), Rescoring(2, "float32")])],
        specs=parse_compressor_specs("truncate"),
        dims=[16],
        precisions=["float32", "binary"],
        fit_texts=[f"calibration {i}" for i in range(50)],
    )
    keys = {(r.precision, r.extra["rescore"], r.extra["rescore_precision"]) for r in records}
    assert keys == {("float32", 1, None), ("binary", 1, None), ("binary", 2, "int8"),
                    ("binary", 2, "float32")}  # fmt: skip
    # Queries are documents: every configuration finds each one first.
    assert all(r.score == pytest.approx(100.0) for r in records if r.metric == "recall@100")
    stored = {r.extra["rescore_precision"]: r.extra["store_bytes"] for r in records}
    assert stored == {None: 0, "int8": 16, "float32": 64}


def test_rescoring_needs_float_vectors_and_int8_ranges(data: Data) -> None:
    docs, queries = data
    dataset, texts = synthetic_set(docs[:100], queries[:5], seed=2)
    vectors = np.concatenate([queries[:5], docs[:100]])
    binary = make_quantizer("binary")
    task = RetrievalTask(dataset, rescoring=[4])
    with pytest.raises(DataError, match="carry no float vectors"):
        task.evaluate(EmbeddedTexts(texts, binary.quantize(vectors), binary, 32))
    with pytest.raises(DataError, match="int8 rescoring needs an int8 quantiser"):
        task.evaluate(EmbeddedTexts(texts, binary.quantize(vectors), binary, 32, vectors=vectors))
    assert evaluate_run({}, dataset.qrels)["ndcg@10"] == 0.0
