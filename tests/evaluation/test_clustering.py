# ruff: noqa: N803, N806  (matrices are capitalised, as in scikit-learn)
"""Clustering task: Hungarian accuracy, NMI, k-means geometry per precision, TREC reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demitasse.cli.specs import parse_compressor_specs
from demitasse.compress import make_quantizer
from demitasse.errors import DataError
from demitasse.evaluation.clustering import (
    ClusteringTask,
    cluster_accuracy,
    kmeans_cluster,
    labeled_texts,
    load_trec_clustering,
)
from demitasse.evaluation.grid import evaluate_grid
from demitasse.evaluation.tasks import EmbeddedTexts
from tests.helpers import FakeEncoder


def _blobs(n_per_class: int, n_classes: int, dim: int, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_classes, dim)) * 3
    labels = np.repeat(np.arange(n_classes), n_per_class)
    X = centres[labels] + noise * rng.standard_normal((len(labels), dim))
    return X.astype(np.float32), labels


def _embedded(texts: list[str], X: np.ndarray, precision: str) -> EmbeddedTexts:
    quantizer = make_quantizer(precision)
    if quantizer.needs_fit:
        quantizer.fit(X)
    return EmbeddedTexts(texts, quantizer.quantize(X), quantizer, X.shape[1])


def _by_metric(scores, dataset: str) -> dict[str, float]:
    return {s.metric: s.score for s in scores if s.dataset == dataset}


def test_cluster_accuracy_matches_clusters_to_classes() -> None:
    true = np.array([0, 0, 1, 1, 2, 2])
    assert cluster_accuracy(true, [2, 2, 0, 0, 1, 1]) == 1.0  # any relabelling is perfect
    assert cluster_accuracy(["a", "a", "b", "b"], ["x", "x", "y", "y"]) == 1.0
    assert cluster_accuracy(true, [0, 0, 0, 1, 1, 1]) == pytest.approx(4 / 6)
    # More clusters than classes: only one cluster per class can be matched.
    assert cluster_accuracy([0, 0, 0, 1, 1, 1], [0, 0, 1, 2, 2, 2]) == pytest.approx(5 / 6)
    # Fewer clusters than classes.
    assert cluster_accuracy([0, 1, 2], [0, 0, 0]) == pytest.approx(1 / 3)
    with pytest.raises(DataError, match="3 true labels but 2"):
        cluster_accuracy([0, 1, 2], [0, 1])


@pytest.mark.parametrize("precision", ["float32", "int8", "binary"])
def test_separated_blobs_are_recovered_at_every_precision(precision: str) -> None:
    X, labels = _blobs(30, 4, 64, noise=0.3)
    texts = [f"t{i}" for i in range(len(X))]
    task = ClusteringTask({"blobs": (texts, labels)}, seed=0, n_init=3)
    scores = _by_metric(task.evaluate(_embedded(texts, X, precision)), "blobs")
    assert scores["accuracy"] == pytest.approx(100.0)
    assert scores["nmi"] == pytest.approx(100.0)
    assert 0.0 <= scores["seconds"] < 10.0


def test_nmi_is_bounded_and_near_zero_for_unrelated_labels() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 16)).astype(np.float32)
    texts = [f"t{i}" for i in range(len(X))]
    labels = rng.integers(0, 3, len(X))
    scores = ClusteringTask(labeled_texts("noise", texts, labels), n_init=2).evaluate(
        _embedded(texts, X, "float32")
    )
    metrics = _by_metric(scores, "noise")
    assert 0.0 <= metrics["nmi"] < 5.0
    assert 100 / 3 <= metrics["accuracy"] < 50.0  # matching guarantees at least 1/k


def test_kmeans_is_seeded_and_normalises_for_cosine() -> None:
    X, _ = _blobs(20, 3, 8, noise=1.0, seed=2)
    labels = kmeans_cluster(X, 3, seed=5)
    assert np.array_equal(labels, kmeans_cluster(X, 3, seed=5, n_threads=None))
    # Same directions at very different lengths: one cluster each in cosine geometry.
    rng = np.random.default_rng(3)
    directions = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    labels = np.repeat([0, 1], 20)
    lengths = rng.uniform(0.1, 50, (40, 1)).astype(np.float32)
    Y = directions[labels] * lengths + 0.01 * rng.standard_normal((40, 2)).astype(np.float32)
    assert cluster_accuracy(labels, kmeans_cluster(Y, 2, n_init=2)) == 1.0
    assert cluster_accuracy(labels, kmeans_cluster(Y, 2, n_init=2, normalize=False)) < 1.0
    with pytest.raises(DataError, match="k must be"):
        kmeans_cluster(X, 100)


def test_several_sets_get_averages_and_bad_input_is_rejected() -> None:
    X, labels = _blobs(10, 3, 16, noise=0.2)
    texts = [f"t{i}" for i in range(len(X))]
    sets = [
        labeled_texts("first", texts[:15], labels[:15]),
        labeled_texts("second", texts[15:], labels[15:]),
    ]
    scores = ClusteringTask(sets, n_init=2).evaluate(_embedded(texts, X, "float32"))
    rows = {(s.dataset, s.metric) for s in scores}
    assert ("avg", "accuracy") in rows and ("avg", "nmi") in rows
    assert ("avg", "seconds") not in rows and ("second", "seconds") in rows
    with pytest.raises(DataError, match="3 texts but 2 labels"):
        labeled_texts("bad", ["a", "b", "c"], [0, 1])
    with pytest.raises(DataError, match="at least 2 classes"):
        ClusteringTask({"one": (["a", "b"], [1, 1])})
    with pytest.raises(DataError, match="used twice"):
        ClusteringTask([sets[0], sets[0]])


def test_clustering_runs_inside_the_grid() -> None:
    texts = [f"question {i}" for i in range(40)]
    task = ClusteringTask({"fake": (texts, np.arange(40) % 4)}, n_init=1)
    records = evaluate_grid(
        FakeEncoder(dim=16),
        [task],
        specs=parse_compressor_specs("none"),
        dims=[16],
        precisions=["float32", "binary"],
        fit_texts=[f"fit {i}" for i in range(20)],
    )
    assert {(r.precision, r.metric) for r in records} == {
        (p, m) for p in ("float32", "binary") for m in ("accuracy", "nmi", "seconds")
    }
    assert all(r.task == "clustering" and r.dataset == "fake" for r in records)


def test_trec_clustering_set_joins_train_and_test(data_dir: Path) -> None:
    trec = load_trec_clustering(data_dir)
    assert len(trec) == 5452 + 500
    assert trec.classes == ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    assert trec.texts[-500] == "How far is it from Denver to Aspen ?"
    assert trec.classes[trec.labels[-500]] == "NUM"


def test_labels_of_any_kind_become_class_indices() -> None:
    labeled = labeled_texts("pets", ["a", "b", "c"], ["dog", "cat", "dog"])
    assert labeled.classes == ("cat", "dog")
    assert labeled.labels.tolist() == [1, 0, 1]
