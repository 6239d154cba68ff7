# ruff: noqa: N806  (scikit-learn convention: matrices are capitalised)
"""Isomap and LLE compressors: same out-of-sample maps as scikit-learn, saved without pickle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.manifold import Isomap as SkIsomap
from sklearn.manifold import LocallyLinearEmbedding

from demitasse.compress import load_compressor, make_compressor
from demitasse.errors import CompressorError, DataError


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(200, 12)), rng.normal(size=(30, 12))


def test_isomap_matches_scikit_learn_and_prefixes_are_smaller_isomaps(
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    X, new = data
    ours = make_compressor("isomap", dim=4, n_neighbors=8).fit(X)
    reference = SkIsomap(n_neighbors=8, n_components=4, eigen_solver="dense").fit(X)
    assert np.abs(ours.transform(new) - reference.transform(new)).max() < 1e-4
    smaller = SkIsomap(n_neighbors=8, n_components=2, eigen_solver="dense").fit(X)
    assert np.abs(np.abs(ours.transform(new, dim=2)) - np.abs(smaller.transform(new))).max() < 1e-4


def test_lle_matches_scikit_learn(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, new = data
    ours = make_compressor("lle", dim=3, n_neighbors=10).fit(X)
    reference = LocallyLinearEmbedding(
        n_neighbors=10, n_components=3, eigen_solver="dense", random_state=0
    ).fit(X)
    assert np.abs(ours.transform(new) - reference.transform(new)).max() < 1e-4


@pytest.mark.parametrize("method", ["isomap", "lle"])
def test_manifold_compressors_save_and_load_without_pickle(
    method: str, data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    X, new = data
    fitted = make_compressor(method, dim=3, n_neighbors=6).fit(X, fit_data="synthetic")
    fitted.save(tmp_path / method)
    assert not list((tmp_path / method).glob("*.pkl"))
    loaded = load_compressor(tmp_path / method)
    assert np.array_equal(loaded.transform(new), fitted.transform(new))
    assert loaded.fit_data_ == "synthetic"


def test_manifold_compressors_reject_bad_settings(data: tuple[np.ndarray, np.ndarray]) -> None:
    X, _ = data
    with pytest.raises(CompressorError, match="n_neighbors"):
        make_compressor("isomap", dim=2, n_neighbors=1)
    with pytest.raises(CompressorError, match="reg"):
        make_compressor("lle", dim=2, reg=0)
    with pytest.raises(DataError, match="too few"):
        make_compressor("lle", dim=8, n_neighbors=10).fit(X[:15])
