# ruff: noqa: N803, N806  (matrices are capitalised, as in scikit-learn)
"""MCR² projection head on synthetic data: rates, clusters, persistence, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from demitasse.compress import TrainingSettings, load_compressor, make_compressor
from demitasse.compress.mcr2 import MCR2, class_coding_rate, coding_rate
from demitasse.errors import CompressorError, DataError
from demitasse.evaluation.clustering import cluster_accuracy

K, D = 4, 32


def _numpy_rate(Z: np.ndarray, eps: float) -> float:
    n, d = Z.shape
    return 0.5 * np.linalg.slogdet(np.eye(d) + d / (n * eps**2) * Z.T @ Z)[1]


def _blobs(seed: int = 0, n_per: int = 100) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = 3.0 * np.linalg.qr(rng.normal(size=(D, K)))[0].T
    X = np.concatenate([c + rng.normal(size=(n_per, D)) for c in centres]).astype(np.float32)
    return X, np.repeat(np.arange(K), n_per)


def _pairs_within_class(y: np.ndarray, m: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    left = rng.integers(0, len(y), m)
    right = np.array([rng.choice(np.flatnonzero(y == y[i])) for i in left])
    return np.stack([left, right], axis=1)


def _head(max_epochs: int = 30, **params: object) -> MCR2:
    defaults: dict[str, object] = {"dim": 8, "n_clusters": K, "hidden_dim": 64}
    training = TrainingSettings(
        batch_size=256, max_epochs=max_epochs, patience=31, learning_rate=3e-3, device="cpu"
    )
    return MCR2(**{**defaults, **params}, training=training)


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs on one torch thread."""


@pytest.fixture(scope="module")
def fitted(_one_thread: None) -> tuple[MCR2, np.ndarray, np.ndarray]:
    X, y = _blobs()
    head = _head().fit(X, pairs=_pairs_within_class(y, 2000), fit_data="blobs")
    return head, X, y


def test_coding_rate_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(50, 6))
    assert float(coding_rate(torch.from_numpy(Z), 0.5)) == pytest.approx(_numpy_rate(Z, 0.5))


def test_class_coding_rate_with_hard_membership_is_weighted_sum_of_rates() -> None:
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(60, 5))
    labels = rng.integers(0, 3, 60)
    membership = np.eye(3)[labels]
    expected = sum(
        (labels == k).sum() / len(Z) * _numpy_rate(Z[labels == k], 0.5) for k in range(3)
    )
    got = class_coding_rate(torch.from_numpy(Z), torch.from_numpy(membership), 0.5)
    assert float(got) == pytest.approx(expected, rel=1e-6)
    one = class_coding_rate(torch.from_numpy(Z), torch.ones(60, 1, dtype=torch.float64), 0.5)
    assert float(one) == pytest.approx(_numpy_rate(Z, 0.5), rel=1e-6)


def test_cluster_head_recovers_classes_without_kmeans(
    fitted: tuple[MCR2, np.ndarray, np.ndarray],
) -> None:
    head, X, y = fitted
    labels = head.predict_clusters(X)
    assert labels.dtype == np.int64 and labels.shape == (len(X),)
    assert labels.min() >= 0 and labels.max() < K
    assert cluster_accuracy(y, labels) >= 0.9


def test_transform_has_one_normalised_width(fitted: tuple[MCR2, np.ndarray, np.ndarray]) -> None:
    head, X, _ = fitted
    Z = head.transform(X)
    assert Z.shape == (len(X), 8) and Z.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, atol=1e-5)
    assert head.metadata["matryoshka"] is False
    np.testing.assert_array_equal(head.transform(X, dim=8), Z)
    with pytest.raises(CompressorError, match="only produces dim 8"):
        head.transform(X, dim=4)


def test_save_load_round_trip(fitted: tuple[MCR2, np.ndarray, np.ndarray], tmp_path: Path) -> None:
    head, X, _ = fitted
    head.save(tmp_path / "head")
    loaded = load_compressor(tmp_path / "head")
    assert isinstance(loaded, MCR2)
    assert loaded.get_params() == head.get_params()
    assert loaded.n_pairs_ == 2000 and loaded.fit_data_ == "blobs"
    np.testing.assert_array_equal(loaded.transform(X), head.transform(X))
    np.testing.assert_array_equal(loaded.predict_clusters(X), head.predict_clusters(X))


def test_fit_is_seeded_and_accepts_paired_arrays() -> None:
    X, y = _blobs(n_per=20)
    index = _pairs_within_class(y, 64)
    a = _head(max_epochs=2).fit(X, pairs=(X[index[:, 0]], X[index[:, 1]]))
    b = _head(max_epochs=2).fit(X, pairs=index)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))


def test_without_pairs_views_come_from_dropout() -> None:
    X, _ = _blobs(n_per=10)
    head = make_compressor("mcr2", dim=4, n_clusters=2, hidden_dim=16, max_epochs=1)
    assert head.fit(X).transform(X).shape == (len(X), 4)
    with pytest.raises(DataError, match="input_dropout > 0"):
        _head(input_dropout=0.0, max_epochs=1).fit(X)


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ((np.zeros((8, D)), np.zeros((9, D))), "must be row-aligned"),
        ((np.zeros((8, D + 1)), np.zeros((8, D + 1))), "has 33 features but X has 32"),
        ((np.zeros((8, D)),), "pairs must be a tuple"),
        (np.zeros((8, 3), dtype=np.int64), "integer array"),
        (np.zeros((8, 2)), "integer array"),
        (np.full((8, 2), 99), r"pair indices must lie in \[0, 40\)"),
        (np.zeros((2, 2), dtype=np.int64), "at least 4 pairs"),
    ],
)
def test_bad_pairs_give_one_line_errors(pairs: object, message: str) -> None:
    X, _ = _blobs(n_per=10)
    with pytest.raises(DataError, match=message) as info:
        _head(max_epochs=1).fit(X, pairs=pairs)
    assert "\n" not in str(info.value)


def test_bad_hyperparameters_and_unknown_supervision() -> None:
    X, _ = _blobs(n_per=10)
    with pytest.raises(
        CompressorError, match=r"'n_clusters' parameter of MCR2 must be .* \[2, inf\)"
    ):
        make_compressor("mcr2", n_clusters=1)
    with pytest.raises(CompressorError, match=r"'eps' parameter of MCR2 must be .* \(0.0, inf\)"):
        make_compressor("mcr2", eps=0)
    with pytest.raises(CompressorError, match=r"'batch_size' parameter of MCR2 must be .* \[4, "):
        MCR2(training=TrainingSettings(batch_size=3)).fit(X)  # the coding rates need rows
    with pytest.raises(CompressorError, match="unknown fit argument"):
        _head().fit(X, scores=np.ones(len(X)))
    with pytest.raises(DataError, match="fitted on 32"):
        _head(max_epochs=1).fit(X).predict_clusters(np.zeros((3, 5)))
