"""The label-free estimate: neighbour overlap and rank correlation against the full model."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest

from demitasse.compress import make_quantizer
from demitasse.errors import DataError
from demitasse.evaluation.label_free import NeighbourhoodAgreement, neighbourhood_agreement
from demitasse.search import QuantizedIndex

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss-cpu (the eval extra) is absent"
)


def clustered(n: int, d: int, seed: int, centres: int = 30) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((centres, d))
    return (means[rng.integers(0, centres, n)] + 0.7 * rng.standard_normal((n, d))).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return clustered(1500, 48, seed=0)


@pytest.fixture(scope="module")
def queries() -> np.ndarray:
    return clustered(200, 48, seed=1)


def float_index(vectors: np.ndarray) -> QuantizedIndex:
    return QuantizedIndex.from_vectors(vectors, make_quantizer("float32"))


@pytest.mark.parametrize("with_queries", [True, False], ids=["queries", "corpus-as-queries"])
def test_the_identity_configuration_scores_one(
    corpus: np.ndarray, queries: np.ndarray, with_queries: bool
) -> None:
    estimate = neighbourhood_agreement(
        corpus,
        float_index(corpus),
        queries if with_queries else corpus,
        reference_queries=queries if with_queries else None,
        sample=150,
    )
    assert estimate.overlap == 1.0
    # 1 up to float32 rounding: the reference and the index compute the same scores by
    # differently shaped matrix products.
    assert estimate.rank_correlation == pytest.approx(1.0, abs=1e-6)
    assert (estimate.n_queries, estimate.k, estimate.depth) == (150, 10, 100)
    assert estimate.queries_from == ("queries" if with_queries else "corpus")


@pytest.mark.parametrize("with_queries", [True, False], ids=["queries", "corpus-as-queries"])
def test_noise_lowers_both_estimates_monotonically(
    corpus: np.ndarray, queries: np.ndarray, with_queries: bool
) -> None:
    rng = np.random.default_rng(7)
    corpus_noise = rng.standard_normal(corpus.shape).astype(np.float32)
    query_noise = rng.standard_normal(queries.shape).astype(np.float32)
    estimates = []
    for level in (0.0, 0.1, 0.3, 0.6, 1.2):
        noisy_corpus = corpus + level * corpus_noise
        noisy_queries = queries + level * query_noise
        estimates.append(
            neighbourhood_agreement(
                corpus,
                float_index(noisy_corpus),
                noisy_queries if with_queries else noisy_corpus,
                reference_queries=queries if with_queries else None,
                sample=100,
            )
        )
    overlaps = [e.overlap for e in estimates]
    correlations = [e.rank_correlation for e in estimates]
    assert overlaps[0] == 1.0 and correlations[0] == pytest.approx(1.0)
    assert all(a > b for a, b in itertools.pairwise(overlaps)), overlaps
    assert all(a > b for a, b in itertools.pairwise(correlations)), correlations


def test_quantised_and_rescored_search_is_what_gets_scored(
    corpus: np.ndarray, queries: np.ndarray
) -> None:
    binary = QuantizedIndex.from_vectors(corpus, make_quantizer("binary"), rescore="float32")

    def estimate(factor: float | None) -> NeighbourhoodAgreement:
        return neighbourhood_agreement(
            corpus, binary, queries, reference_queries=queries, rescore_multiplier=factor
        )

    plain, some, everything = estimate(None), estimate(4), estimate(len(corpus) / 10)
    assert plain.overlap < some.overlap < 1.0
    assert plain.rank_correlation < some.rank_correlation < 1.0
    # Rescoring every document against float vectors is exact search: the identity.
    assert everything.overlap == 1.0
    assert everything.rank_correlation == pytest.approx(1.0, abs=1e-6)


def test_rotations_keep_more_than_plain_signs_of_pca_dims() -> None:
    """Embedding-like data (a decaying spectrum): sign bits of PCA dims spend most bits on
    the weak dims; a random rotation spreads the variance, ITQ more so, and the estimate
    sees it."""
    rng = np.random.default_rng(0)
    d = 64
    mixing = np.linalg.qr(rng.standard_normal((d, d)))[0]
    spectrum = np.geomspace(3, 0.1, d)
    corpus = (rng.standard_normal((2000, d)) * spectrum @ mixing).astype(np.float32)
    noise = 0.3 * rng.standard_normal((200, d)) * spectrum @ mixing
    queries = (corpus[:200] + noise).astype(np.float32)
    mean = corpus.mean(axis=0)
    basis = np.linalg.svd(corpus - mean, full_matrices=False)[2][:32].T
    docs, asked = ((x - mean) @ basis for x in (corpus, queries))
    estimates = [
        neighbourhood_agreement(
            corpus,
            QuantizedIndex.from_vectors(
                docs.astype(np.float32), make_quantizer("binary", rotation=rotation).fit(docs)
            ),
            asked.astype(np.float32),
            reference_queries=queries,
        )
        for rotation in ("none", "random", "itq")
    ]
    overlaps = [e.overlap for e in estimates]
    correlations = [e.rank_correlation for e in estimates]
    assert overlaps == sorted(overlaps) and len(set(overlaps)) == 3, overlaps
    assert correlations == sorted(correlations) and len(set(correlations)) == 3, correlations


def test_the_estimate_is_deterministic_and_sampled(corpus: np.ndarray) -> None:
    index = QuantizedIndex.from_vectors(corpus, make_quantizer("binary"))
    first = neighbourhood_agreement(corpus, index, corpus, sample=60, seed=3)
    again = neighbourhood_agreement(corpus, index, corpus, sample=60, seed=3)
    other = neighbourhood_agreement(corpus, index, corpus, sample=60, seed=4)
    assert first == again and first.n_queries == 60
    assert first != other
    scores = first.scores("SciFact", {"rescore": 1})
    assert [(s.metric, s.score) for s in scores] == [
        ("overlap@10", 100 * first.overlap),
        ("rank_correlation@100", 100 * first.rank_correlation),
    ]
    assert scores[0].extra == {
        "label_free": True, "sampled_queries": 60, "queries_from": "corpus", "rescore": 1
    }  # fmt: skip


def test_bad_inputs_fail_in_one_line(corpus: np.ndarray, queries: np.ndarray) -> None:
    index = float_index(corpus)
    cases = [
        (lambda: neighbourhood_agreement(corpus[:10], index, corpus[:10]), "1500"),
        (lambda: neighbourhood_agreement(corpus, index, queries), "200 rows; the reference corpus"),
        (lambda: neighbourhood_agreement(corpus, index, corpus, k=0), "k must be a positive"),
        (lambda: neighbourhood_agreement(corpus, index, corpus, sample=0), "sample must be"),
        (
            lambda: neighbourhood_agreement(corpus[:1], float_index(corpus[:1]), corpus[:1]),
            "at least 2 documents",
        ),
    ]
    for call, message in cases:
        with pytest.raises(DataError, match=message) as caught:
            call()
        assert "\n" not in str(caught.value)
