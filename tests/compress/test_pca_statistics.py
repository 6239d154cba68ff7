# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""PCA from mergeable statistics (count, sum, XᵀX) is the PCA of the vectors themselves."""

from __future__ import annotations

import numpy as np
import pytest

from demitasse.compress import PCA
from demitasse.compress.statistics import VectorStatistics
from demitasse.errors import CompressorError, DataError


def _vectors(n: int = 3000, d: int = 24, offset: float = 0.5, seed: int = 0) -> np.ndarray:
    """Anisotropic data with well separated variances (so components are well defined)."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(3.0, 0.05, d)
    rotation = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return ((rng.standard_normal((n, d)) * scales) @ rotation + offset).astype(np.float32)


def _in_shards(X: np.ndarray, cuts: list[int]) -> VectorStatistics:
    """Statistics of each shard, merged (in reverse, to show order does not matter)."""
    total = VectorStatistics()
    for part in reversed(np.split(X, cuts)):
        total.merge(VectorStatistics().update(part))
    return total


def test_merged_shard_statistics_equal_one_pass():
    X = _vectors()
    one_pass = VectorStatistics().update(X)
    merged = _in_shards(X, [1, 700, 701, 2500])
    assert merged.count == one_pass.count == len(X)
    np.testing.assert_allclose(merged.mean, X.astype(np.float64).mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(merged.mean, one_pass.mean, rtol=0, atol=1e-13)
    expected = np.cov(X.astype(np.float64), rowvar=False)
    np.testing.assert_allclose(merged.covariance(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(one_pass.covariance(), expected, rtol=0, atol=1e-12)


def test_merging_empty_statistics_changes_nothing():
    X = _vectors(n=50)
    stats = VectorStatistics().update(X)
    before = stats.covariance().copy()
    stats.merge(VectorStatistics()).update(X[:0])
    assert stats.count == 50
    np.testing.assert_array_equal(stats.covariance(), before)
    assert VectorStatistics().merge(stats).count == 50


@pytest.mark.parametrize(
    "params",
    [{"dim": 8}, {"dim": 8, "whiten": True}, {"dim": 8, "abtt": 2}, {"abtt": 1, "whiten": True}],
    ids=["pca", "whiten", "abtt", "abtt-whiten-full"],
)
def test_pca_from_statistics_equals_the_in_memory_fit(params):
    X = _vectors()
    memory = PCA(**params).fit(X)
    shards = PCA(**params).fit_from_statistics(_in_shards(X, [100, 1234, 2999]), fit_data="s")
    # Up to sign (both fix it the same way, but the contract is "up to sign").
    signs = np.sign(np.sum(memory.components_ * shards.components_, axis=1))
    np.testing.assert_allclose(shards.components_ * signs[:, None], memory.components_, atol=1e-6)
    np.testing.assert_allclose(shards.explained_variance_, memory.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(shards.mean_, memory.mean_, rtol=0, atol=1e-12)
    assert shards.total_variance_ == pytest.approx(memory.total_variance_, rel=1e-12)
    assert (shards.n_fit_samples_, shards.fit_data_, shards.output_dim_) == (
        len(X), "s", memory.output_dim_,
    )  # fmt: skip
    np.testing.assert_allclose(shards.transform(X), memory.transform(X), atol=1e-4)


def test_fit_from_statistics_returns_self_and_refits_cleanly(tmp_path):
    X = _vectors(n=200, d=6)
    pca = PCA(dim=3)
    assert pca.fit_from_statistics(VectorStatistics().update(X)) is pca
    pca.fit_from_statistics(VectorStatistics().update(_vectors(n=200, d=5)))
    assert pca.n_features_in_ == 5 and pca.fit_data_ is None
    pca.save(tmp_path / "pca")
    np.testing.assert_array_equal(PCA.load(tmp_path / "pca").components_, pca.components_)


def test_statistics_save_and_load_round_trip(tmp_path):
    X = _vectors(n=500, d=12)
    stats = _in_shards(X, [250])
    stats.save(tmp_path / "stats")
    loaded = VectorStatistics.load(tmp_path / "stats")
    assert loaded.count == 500 and loaded.n_features == 12
    np.testing.assert_array_equal(loaded.covariance(), stats.covariance())
    a = PCA(dim=4).fit_from_statistics(loaded)
    np.testing.assert_allclose(a.components_, PCA(dim=4).fit(X).components_, atol=1e-6)


def test_loading_what_is_not_statistics_fails_in_one_line(tmp_path):
    PCA(dim=2).fit(_vectors(n=20, d=4)).save(tmp_path / "pca")
    with pytest.raises(CompressorError, match="not vector-statistics"):
        VectorStatistics.load(tmp_path / "pca")
    with pytest.raises(CompressorError, match="no saved vector statistics"):
        VectorStatistics.load(tmp_path / "nothing")


def test_a_huge_offset_is_handled_by_the_shift_and_refused_without_it():
    # Unit spread around 1e6: XᵀX about the origin is 1e12 × the centred scatter.
    X = _vectors(n=400, d=5, offset=0.0).astype(np.float64) + 1e6
    about_origin = VectorStatistics(shift=np.zeros(5)).update(X)
    with pytest.raises(DataError, match="far from the shift"):
        about_origin.covariance()
    with pytest.raises(DataError, match="far from the shift"):
        PCA(dim=2).fit_from_statistics(about_origin)
    # The default shift (the first batch's mean) keeps all the digits, even across shards.
    stats = _in_shards(X, [10, 200])
    np.testing.assert_allclose(stats.covariance(), np.cov(X, rowvar=False), atol=1e-9)
    memory = PCA(dim=2).fit(X)
    shards = PCA(dim=2).fit_from_statistics(stats)
    np.testing.assert_allclose(np.abs(shards.components_), np.abs(memory.components_), atol=1e-6)


def test_bad_statistics_fail_in_one_line():
    X = _vectors(n=10, d=4)
    with pytest.raises(DataError, match="5 dimensions, but earlier ones have 4"):
        VectorStatistics().update(X).update(np.ones((2, 5)))
    with pytest.raises(DataError, match="5 dimensions, but earlier ones have 4"):
        VectorStatistics().update(X).merge(VectorStatistics().update(np.ones((2, 5))))
    with pytest.raises(DataError, match="NaN or inf"):
        VectorStatistics().update(np.array([[1.0, np.nan]]))
    with pytest.raises(CompressorError, match="at least 2 rows"):
        PCA().fit_from_statistics(VectorStatistics().update(X[:1]))
    with pytest.raises(CompressorError, match="takes VectorStatistics"):
        PCA().fit_from_statistics(X)  # type: ignore[arg-type]
    with pytest.raises(CompressorError, match="can only merge"):
        VectorStatistics().merge(X)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="zero variance"):
        PCA().fit_from_statistics(VectorStatistics().update(np.ones((5, 3))))
    with pytest.raises(CompressorError, match="1-D array"):
        VectorStatistics(shift=[[1.0]])
