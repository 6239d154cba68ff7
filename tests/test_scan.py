"""Search without faiss: the numpy flat index answers as faiss's flat indexes do, with the same
hits, scores up to float32 rounding, and the same tie rule (equal scores by corpus row)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from demitasse import scan
from demitasse.compress import make_quantizer
from demitasse.scan import FlatIndex, top_k
from demitasse.search import QuantizedIndex, build_index, exact_search, faiss_or_none

needs_faiss = pytest.mark.skipif(
    faiss_or_none() is None, reason="faiss-cpu (the eval extra) is absent"
)


@pytest.fixture
def without_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # as in the core install
    assert faiss_or_none() is None


def tied_corpus(rng: np.random.Generator, metric: str) -> np.ndarray:
    """Rows with many exact ties in ``metric``: duplicates and values every sum keeps exact
    (±1 over 16 columns: unit vectors of ±1/4; small integers for L2; bits for Hamming)."""
    if metric == "hamming":
        rows = rng.integers(0, 256, (300, 2), dtype=np.uint8)
    elif metric == "cosine":
        rows = rng.choice([-1.0, 1.0], (300, 16)).astype(np.float32)
    else:
        rows = rng.integers(-2, 3, (300, 6)).astype(np.float32)
    return np.concatenate([rows, rows[:100], rows[50:80]])  # duplicates further down


def stable_top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


def above_the_cut(scores: np.ndarray, rows: np.ndarray) -> list[list[int]]:
    """Each query's rows scored above its last (k-th) score: the same for any top k."""
    return [r[s > s[-1]].tolist() for s, r in zip(scores, rows, strict=True)]


@pytest.mark.parametrize("n_queries", [7, 45])  # faiss: one by one below 20 queries, BLAS above
@pytest.mark.parametrize("metric", ["cosine", "l2", "hamming"])
@needs_faiss
def test_exact_search_without_faiss_equals_faiss_including_ties(
    metric: str, n_queries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(n_queries)
    corpus = tied_corpus(rng, metric)
    queries = corpus[rng.integers(0, len(corpus), n_queries)]
    with_faiss = exact_search(queries, corpus, k=25, metric=metric)
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert isinstance(build_index(corpus, metric), FlatIndex)
    without = exact_search(queries, corpus, k=25, metric=metric)
    np.testing.assert_array_equal(without[0], with_faiss[0])
    # The numpy index keeps the earlier rows of a tie that straddles the 25th place ...
    expected = stable_top_k(-_distances(queries, corpus, metric), 25)[1]
    np.testing.assert_array_equal(without[1], expected)
    if metric == "cosine":  # ... as faiss does but for IndexFlatIP, which keeps the later ones
        assert above_the_cut(*without) == above_the_cut(*with_faiss)
    else:
        np.testing.assert_array_equal(without[1], with_faiss[1])


def _distances(queries: np.ndarray, corpus: np.ndarray, metric: str) -> np.ndarray:
    if metric == "hamming":
        return scan.POPCOUNT[queries[:, None, :] ^ corpus[None, :, :]].sum(axis=2)
    if metric == "l2":
        return ((queries[:, None, :] - corpus[None, :, :]) ** 2).sum(axis=2)
    return -(queries @ corpus.T)


@pytest.mark.parametrize("metric", ["cosine", "l2"])
@needs_faiss
def test_random_float_search_without_faiss_finds_the_same_hits(
    metric: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    corpus = rng.standard_normal((2000, 24)).astype(np.float32)
    queries = rng.standard_normal((30, 24)).astype(np.float32)
    scores, rows = exact_search(queries, corpus, k=50, metric=metric)
    monkeypatch.setitem(sys.modules, "faiss", None)
    numpy_scores, numpy_rows = exact_search(queries, corpus, k=50, metric=metric)
    np.testing.assert_array_equal(numpy_rows, rows)
    np.testing.assert_allclose(numpy_scores, scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision", ["float32", "int8", "binary"])
@needs_faiss
def test_quantized_index_without_faiss_answers_as_with_it(
    precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(9)
    base = rng.standard_normal((150, 32)).astype(np.float32)
    documents = np.concatenate([base, base[:40]])  # duplicated documents tie exactly
    queries = base[:12] + 0.1 * rng.standard_normal((12, 32)).astype(np.float32)
    quantizer = make_quantizer(precision).fit(documents)
    rescore = None if precision == "float32" else "float32"

    def answers() -> list[tuple[np.ndarray, np.ndarray]]:
        index = QuantizedIndex.from_vectors(documents, quantizer, rescore=rescore)
        found = [index.search(queries, 20)]
        if rescore is not None:
            found.append(index.search(queries, 10, rescore_multiplier=4))
        return found

    with_faiss = answers()
    monkeypatch.setitem(sys.modules, "faiss", None)
    for (scores, rows), (faiss_scores, faiss_rows) in zip(answers(), with_faiss, strict=True):
        np.testing.assert_allclose(scores, faiss_scores, rtol=1e-6, atol=1e-6)
        if precision == "binary":  # exact integer scores: every tie breaks alike
            np.testing.assert_array_equal(rows, faiss_rows)
        else:  # duplicates tied at the cut: faiss's IndexFlatIP keeps the later one
            assert above_the_cut(scores, rows) == above_the_cut(faiss_scores, faiss_rows)
        assert (np.diff(rows[:, :-1], axis=1)[np.diff(scores[:, :-1], axis=1) == 0] > 0).all()


def test_the_flat_index_works_in_blocks_of_queries(
    without_faiss: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(2)
    corpus = tied_corpus(rng, "hamming")
    queries = corpus[:40]
    whole = exact_search(queries, corpus, k=30, metric="hamming")
    monkeypatch.setattr(scan, "_BLOCK_ENTRIES", 3 * corpus.size)  # three queries a block
    blocked = exact_search(queries, corpus, k=30, metric="hamming")
    np.testing.assert_array_equal(blocked[0], whole[0])
    np.testing.assert_array_equal(blocked[1], whole[1])
    distances, rows = build_index(corpus, "hamming").search(queries, 5)
    assert distances.dtype == np.int32 and rows.dtype == np.int64
    assert (distances[:, 0] == 0).all()


def test_top_k_keeps_the_earlier_rows_of_a_tie_at_the_cut() -> None:
    scores = np.array([[1, 3, 2, 3, 2, 2, 0, 2]], np.float32)
    best, rows = top_k(scores, 4)
    assert rows.tolist() == [[1, 3, 2, 4]] and best.tolist() == [[3, 3, 2, 2]]
    assert top_k(scores, 20)[1].tolist() == [[1, 3, 2, 4, 5, 7, 0, 6]]
    rng = np.random.default_rng(0)
    many = rng.integers(0, 5, (50, 200)).astype(np.float32)
    for k in (1, 7, 100, 200):
        np.testing.assert_array_equal(top_k(many, k)[1], stable_top_k(many, k)[1])
