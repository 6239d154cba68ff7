"""Codebook codes searched asymmetrically: the float query against the documents' codes, by the
paired lookup-table scan, ranking as the quantiser's own scores do."""

from __future__ import annotations

import numpy as np
import pytest

from demitasse import scan as scan_module
from demitasse.compress import make_quantizer
from demitasse.scan import AsymmetricScan
from demitasse.search import QuantizedIndex, search_metric_of


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((700, 24)).astype(np.float32) * np.linspace(2, 0.2, 24) + 0.3
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# Rows of 8 and 16 bytes (rq8, pq8 without a norm byte, rq16) take the compiled scan's
# 64-bit word path; the others read byte by byte.
@pytest.fixture(
    scope="module", params=["pq6", "rq5", "pq7:norm=none", "rq2", "rq8", "pq8:norm=none", "rq16"]
)
def quantizer(request, corpus):
    name, *options = request.param.split(":")
    params = dict(option.split("=") for option in options)
    return make_quantizer(name, iterations=6, **params).fit(corpus)


def test_search_metric_of(quantizer):
    assert search_metric_of(quantizer) == "asymmetric"
    assert search_metric_of(make_quantizer("binary")) == "hamming"
    assert search_metric_of(make_quantizer("int8"), "l2") == "asymmetric"
    assert search_metric_of(make_quantizer("float32"), "l2") == "l2"


@pytest.mark.parametrize("kernel", ["compiled", "numpy"])
def test_scan_matches_the_quantizer_scores(quantizer, corpus, kernel, monkeypatch):
    if kernel == "numpy":  # the path taken where numba is not installed
        monkeypatch.setattr("demitasse.scan.compiled_top_k", None)
    elif scan_module.compiled_top_k is None:
        pytest.skip("numba is not installed")
    codes = quantizer.quantize(corpus)
    scan = AsymmetricScan(quantizer, codes, "cosine")
    queries = corpus[:9] + 0.05
    expected = quantizer.score(queries, codes)
    scores, rows = scan.search(queries, 15)
    np.testing.assert_allclose(scores, np.take_along_axis(expected, rows, axis=1), rtol=1e-5)
    # best first, and no unlisted document beats the 15th
    assert (np.diff(scores, axis=1) <= 0).all()
    for query_scores, listed, last in zip(expected, rows, scores[:, -1], strict=True):
        assert np.delete(query_scores, listed).max() <= last + 1e-6
    np.testing.assert_allclose(
        scan.scores_of(queries, rows), np.take_along_axis(expected, rows, axis=1), rtol=1e-5
    )


@pytest.mark.parametrize("rows", [1, 2, 3, 699])
def test_word_scan_covers_every_row(quantizer, corpus, rows):
    """The word path scans rows in pairs: an odd count leaves one row for a last step, and
    the compiled and numpy scans agree on which rows are best."""
    if scan_module.compiled_top_k is None:
        pytest.skip("numba is not installed")
    codes = quantizer.quantize(corpus[:rows])
    queries = corpus[-5:] + 0.05
    depth = min(rows, 7)
    expected = quantizer.score(queries, codes)
    scores, found = AsymmetricScan(quantizer, codes, "cosine").search(queries, depth)
    np.testing.assert_allclose(scores, np.take_along_axis(expected, found, axis=1), rtol=1e-5)
    np.testing.assert_allclose(scores, -np.sort(-expected, axis=1)[:, :depth], rtol=1e-5)


def test_quantized_index_searches_codes_asymmetrically(quantizer, corpus):
    index = QuantizedIndex.from_vectors(corpus, quantizer)
    assert index.search_metric == "asymmetric"
    assert index.index_bytes_per_vector == quantizer.code_bytes
    queries = corpus[10:20]
    scores, rows = index.search(queries, 5)
    assert rows.shape == (10, 5)
    top = quantizer.score(queries, quantizer.quantize(corpus)).argmax(axis=1)
    np.testing.assert_array_equal(rows[:, 0], top)
    np.testing.assert_allclose(index.first_stage_scores(queries, rows), scores, rtol=1e-5)
    # most queries find themselves first, as exact search does
    assert (rows[:, 0] == np.arange(10, 20)).mean() >= 0.6


def test_codebooks_of_fewer_than_256_codewords(corpus):
    quantizer = make_quantizer("rq5", iterations=4).fit(corpus[:90])
    assert quantizer.n_codewords_ == 90
    codes = quantizer.quantize(corpus)
    scores, rows = AsymmetricScan(quantizer, codes, "cosine").search(corpus[:4], 6)
    expected = quantizer.score(corpus[:4], codes)
    np.testing.assert_allclose(scores, np.take_along_axis(expected, rows, axis=1), rtol=1e-5)


def test_asymmetric_codes_rescore_with_kept_vectors(corpus):
    quantizer = make_quantizer("rq3", iterations=6).fit(corpus)
    index = QuantizedIndex.from_vectors(corpus, quantizer, rescore="float32")
    _, rows = index.search(corpus[:10], 1, rescore_multiplier=50)
    np.testing.assert_array_equal(rows[:, 0], np.arange(10))


def test_l2_metric_space(corpus):
    quantizer = make_quantizer("rq6", iterations=6).fit(corpus)
    index = QuantizedIndex.from_vectors(corpus, quantizer, metric_space="l2")
    scores, rows = index.search(corpus[:5], 3)
    decoded = quantizer.decode(quantizer.quantize(corpus))
    distances = ((corpus[:5, None, :] - decoded[None]) ** 2).sum(axis=2)
    np.testing.assert_allclose(-scores, np.take_along_axis(distances, rows, axis=1), atol=2e-3)
