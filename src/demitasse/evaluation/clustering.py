# ruff: noqa: N803, N806  (matrices are capitalised, as in scikit-learn)
"""Clustering: does k-means on the vectors recover the texts' classes?

For each labeled set, k-means with k = number of classes runs on the vectors, and the
clusters are scored against the labels by accuracy under the best one-to-one matching of
clusters to classes (Hungarian method) and by normalised mutual information, both ×100, plus
the wall time of the clustering in seconds.

Geometry follows the precision: float32 vectors and int8 codes are L2-normalised, so k-means
works in cosine geometry; binary codes are clustered as 0/1 bits without normalising, where
squared Euclidean distance is the Hamming distance a binary index uses.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.data.senteval_classification import LabeledTexts, load_trec
from demitasse.errors import DataError, require_library
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task, with_average

#: k-means restarts from different k-means++ seeds; the lowest-inertia run is kept.
DEFAULT_N_INIT = 10
#: Threads for k-means. One by default: a few thousand points gain little from more, and on a
#: loaded machine OpenMP's spinning threads made TREC k-means 20× slower and its timing noisy.
DEFAULT_THREADS = 1


def cluster_accuracy(labels_true: Any, labels_pred: Any) -> float:
    """Accuracy in [0, 1] under the best one-to-one matching of clusters to classes.

    Labels may be any values. With more clusters than classes, the unmatched clusters' members
    count as errors (and vice versa), so over-splitting is not rewarded.
    """
    true = np.asarray(labels_true).reshape(-1)
    pred = np.asarray(labels_pred).reshape(-1)
    if len(true) != len(pred):
        raise DataError(f"{len(true)} true labels but {len(pred)} predicted labels")
    if len(true) == 0:
        raise DataError("cluster accuracy needs at least one label")
    _, true_ids = np.unique(true, return_inverse=True)
    _, pred_ids = np.unique(pred, return_inverse=True)
    contingency = np.zeros((pred_ids.max() + 1, true_ids.max() + 1), dtype=np.int64)
    np.add.at(contingency, (pred_ids, true_ids), 1)
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(contingency, maximize=True)
    return float(contingency[rows, cols].sum() / len(true))


def kmeans_cluster(
    X: Any,
    k: int,
    seed: int = 0,
    *,
    n_init: int = DEFAULT_N_INIT,
    normalize: bool = True,
    n_threads: int | None = DEFAULT_THREADS,
) -> np.ndarray:
    """Cluster labels (int64 [n]) from scikit-learn k-means (Lloyd, k-means++ seeding).

    ``normalize`` L2-normalises the rows first (cosine geometry; zero rows stay zero). The
    best of ``n_init`` restarts by inertia is kept; ``seed`` makes the result reproducible.
    ``n_threads=None`` lets the BLAS/OpenMP libraries use every core.
    """
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise DataError(f"k-means needs a 2-D array, got shape {X.shape}")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= len(X):
        raise DataError(f"k must be an integer between 1 and the {len(X)} rows, got {k!r}")
    if not np.isfinite(X).all():
        raise DataError("k-means input contains NaN or infinite values")
    if normalize:
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        X = np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    model = KMeans(n_clusters=int(k), n_init=n_init, random_state=seed, algorithm="lloyd")
    with threadpool_limits(limits=n_threads):
        return model.fit_predict(X).astype(np.int64)


def _as_sets(
    sets: LabeledTexts | Sequence[LabeledTexts] | Mapping[str, tuple[Sequence[str], Any]],
) -> list[LabeledTexts]:
    if isinstance(sets, LabeledTexts):
        return [sets]
    if isinstance(sets, Mapping):
        return [
            value if isinstance(value, LabeledTexts) else labeled_texts(name, *value)
            for name, value in sets.items()
        ]
    return list(sets)


class ClusteringTask(Task):
    """k-means (k = number of classes) on each labeled set: accuracy, NMI, seconds.

    ``sets`` is a :class:`LabeledTexts`, a list of them, or ``{name: (texts, labels)}``.
    Accuracy and NMI are ×100 and get an ``avg`` row when there are several sets; seconds is
    the wall time of k-means alone (``n_init`` restarts included, ``n_threads`` threads).
    """

    name = "clustering"

    def __init__(
        self,
        sets: LabeledTexts | Sequence[LabeledTexts] | Mapping[str, tuple[Sequence[str], Any]],
        *,
        seed: int = 0,
        n_init: int = DEFAULT_N_INIT,
        n_threads: int | None = DEFAULT_THREADS,
    ) -> None:
        # Before any text is encoded: k-means and the metrics are scikit-learn's.
        require_library("sklearn", "the clustering task", extra="eval")
        self.sets = _as_sets(sets)
        if not self.sets:
            raise DataError("no labeled sets to cluster")
        names = [s.name for s in self.sets]
        for labeled in self.sets:
            if not isinstance(labeled, LabeledTexts):
                raise DataError(f"expected LabeledTexts, got {type(labeled).__name__}")
            if names.count(labeled.name) > 1:
                raise DataError(f"clustering set name {labeled.name!r} is used twice")
            if len(np.unique(labeled.labels)) < 2:
                raise DataError(f"clustering set {labeled.name!r} needs at least 2 classes")
        self.seed = seed
        self.n_init = n_init
        self.n_threads = n_threads

    @classmethod
    def from_trec(cls, data_dir: str | Path | None = None, **options: Any) -> ClusteringTask:
        """Cluster the TREC questions (train + test, 6 coarse question types)."""
        return cls([load_trec_clustering(data_dir)], **options)

    def texts(self) -> list[str]:
        return [t for labeled in self.sets for t in labeled.texts]

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        from sklearn.metrics import normalized_mutual_info_score

        accuracy, nmi, seconds = [], [], []
        for labeled in self.sets:
            X = embedded.features_of(labeled.texts)
            k = len(np.unique(labeled.labels))
            start = time.perf_counter()
            predicted = kmeans_cluster(
                X,
                k,
                self.seed,
                n_init=self.n_init,
                normalize=embedded.precision != "binary",
                n_threads=self.n_threads,
            )
            elapsed = time.perf_counter() - start
            extra = {
                "k": k,
                "n": len(labeled),
                "n_init": self.n_init,
                "seed": self.seed,
                "threads": self.n_threads,
            }
            accuracy.append(
                Score(
                    labeled.name,
                    "accuracy",
                    100.0 * cluster_accuracy(labeled.labels, predicted),
                    extra,
                )
            )
            nmi.append(
                Score(
                    labeled.name,
                    "nmi",
                    100.0 * normalized_mutual_info_score(labeled.labels, predicted),
                    extra,
                )
            )
            seconds.append(Score(labeled.name, "seconds", elapsed, extra))
        return [*with_average(accuracy, "accuracy"), *with_average(nmi, "nmi"), *seconds]


def labeled_texts(name: str, texts: Sequence[str], labels: Any) -> LabeledTexts:
    """Wrap texts with labels of any kind (strings or integers) as :class:`LabeledTexts`."""
    values = np.asarray(labels).reshape(-1)
    if len(values) != len(texts):
        raise DataError(f"{name}: {len(texts)} texts but {len(values)} labels")
    classes, ids = np.unique(values, return_inverse=True)
    return LabeledTexts(name, list(texts), ids, tuple(str(c) for c in classes))


def load_trec_clustering(data_dir: str | Path | None = None) -> LabeledTexts:
    """TREC questions (train + test, 5452 + 500) labeled by their 6 coarse types, "TREC"."""
    trec = load_trec(data_dir)
    both = [trec.train, trec.test]
    return LabeledTexts(
        "TREC",
        [t for part in both for t in part.texts],
        np.concatenate([part.labels for part in both]),
        trec.train.classes,
    )
