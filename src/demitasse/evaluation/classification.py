"""SentEval-style sentence classification: a logistic-regression probe on frozen embeddings.

Protocols, as SentEval runs them (accuracy ×100 on held-out examples only):

* a set without published splits (MR, CR, SUBJ, MPQA): stratified 10-fold cross-validation,
  C chosen inside each training fold by an inner stratified k-fold cross-validation;
* a set with train / dev / test (SST-2): train on train, choose C on dev, score test;
* a set with train / test only (TREC, MRPC): choose C by k-fold cross-validation on train,
  refit on all of train with that C, score test.

C (inverse L2 strength) comes from :data:`C_GRID`; ties go to the smaller C. Features are
standardised with the statistics of each fit's training rows only. Sentence pairs (MRPC) use
InferSent's features [u, v, |u − v|, u ⊙ v]. Test rows never reach :func:`select_c`, the one
place where C is compared.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.data.senteval_classification import (
    ClassificationSet,
    Examples,
    LabeledPairs,
    LabeledSplits,
    LabeledTexts,
    canonical_classification_name,
    load_classification_set,
)
from demitasse.errors import DataError, DemitasseError, require_library
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task, with_average
from demitasse.progress import tracked

# On standardised features. SentEval's grid 2^-2 … 2^4 is for raw unit-norm embeddings, whose
# coordinates are about 20 times smaller at 384 dims, so the same C regularises ~400 times more
# there; its span here is about 2^-11 … 2^-5, which this grid covers with room on both sides.
# With all-MiniLM-L6-v2 the chosen C ran from 2^-12 (MRPC's 1536 pair features) to 2^-4.
C_GRID: tuple[float, ...] = tuple(2.0**k for k in range(-12, 1, 2))
DEFAULT_DATASETS: tuple[str, ...] = ("MR", "CR", "SST2", "TREC", "MRPC")
# At the grid's C values lbfgs converges well within this on the SentEval sets (1000 gave the
# same accuracies to 0.01); the cap bounds the time of a weakly regularised fit elsewhere.
MAX_ITER = 100


@dataclass(frozen=True)
class ProbeSettings:
    """How the logistic-regression probe is fitted and its C chosen."""

    c_grid: tuple[float, ...] = C_GRID
    folds: int = 10  # outer cross-validation of sets without a test split
    inner_folds: int = 5  # cross-validation on training rows that chooses C
    max_iter: int = MAX_ITER
    seed: int = 0
    # One BLAS/OpenMP thread: these fits are small, and two threads on two busy cores were
    # 20-40 times slower than one (spinning threads); None leaves the libraries' default.
    threads: int | None = 1

    def __post_init__(self) -> None:
        if not self.c_grid or min(self.c_grid) <= 0:
            raise DemitasseError(f"the C grid must be positive values, got {self.c_grid}")
        if min(self.folds, self.inner_folds) < 2:
            raise DemitasseError(
                f"cross-validation needs at least 2 folds, got {self.folds} and {self.inner_folds}"
            )
        if self.max_iter < 1:
            raise DemitasseError(f"max_iter must be positive, got {self.max_iter}")


class _Probe:
    """Standardisation fitted on the training rows, then L2 logistic regression."""

    def __init__(self, settings: ProbeSettings) -> None:
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler

        self.scaler = StandardScaler()
        # warm_start: fits along the C grid start from the previous solution.
        self.model = LogisticRegression(
            max_iter=settings.max_iter, random_state=settings.seed, warm_start=True
        )

    def fit(self, x: np.ndarray, y: np.ndarray, c: float) -> _Probe:
        self.scaler.fit(x)
        return self.refit(self.scaler.transform(x), y, c)

    def refit(self, x_scaled: np.ndarray, y: np.ndarray, c: float) -> _Probe:
        """Fit with another C on rows already standardised by this probe's scaler."""
        from sklearn.exceptions import ConvergenceWarning

        self.model.set_params(C=c)
        with warnings.catch_warnings():
            # The iteration cap is deliberate (see MAX_ITER).
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.model.fit(x_scaled, y)
        return self

    def accuracy(self, x: np.ndarray, y: np.ndarray, *, scaled: bool = False) -> float:
        x_scaled = x if scaled else self.scaler.transform(x)
        return float(np.mean(self.model.predict(x_scaled) == y) * 100.0)


@dataclass
class Selection:
    """The outcome of choosing C: the chosen C, every C's validation accuracy ×100, and the
    probe fitted with the chosen C on the training rows."""

    c: float
    accuracies: dict[float, float]
    probe: _Probe


def select_c(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    settings: ProbeSettings,
) -> Selection:
    """Fit on the training rows for every C of the grid; keep the best on the validation rows."""
    if len(np.unique(y_train)) < 2:
        raise DataError(
            f"{len(y_train)} training examples of a single class: too few examples to fit a probe"
        )
    probe = _Probe(settings)
    probe.scaler.fit(x_train)
    train_scaled, val_scaled = probe.scaler.transform(x_train), probe.scaler.transform(x_val)
    best: Selection | None = None
    accuracies: dict[float, float] = {}
    for c in sorted(settings.c_grid):  # strong to weak regularisation: warm starts help
        probe.refit(train_scaled, y_train, c)
        accuracies[c] = probe.accuracy(val_scaled, y_val, scaled=True)
        if best is None or accuracies[c] > best.accuracies[best.c]:  # ties: the smaller C
            best = Selection(c, accuracies, copy.deepcopy(probe))
    assert best is not None  # ProbeSettings rejects an empty grid
    return best


def stratified_folds(
    labels: np.ndarray, folds: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(train_rows, test_rows)`` of shuffled folds, stratified when every class can be."""
    from sklearn.model_selection import KFold, StratifiedKFold

    labels = np.asarray(labels)
    if np.unique(labels, return_counts=True)[1].min() >= folds:
        splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    else:  # a class rarer than the folds (tiny or subsampled sets): plain shuffled folds
        splitter = KFold(n_splits=min(folds, len(labels)), shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros((len(labels), 1)), labels))


def cv_folds(labels: np.ndarray, settings: ProbeSettings) -> list[tuple[np.ndarray, np.ndarray]]:
    """The outer folds :func:`cross_validated_accuracy` scores."""
    return stratified_folds(labels, settings.folds, settings.seed)


def choose_c(
    x: np.ndarray, y: np.ndarray, settings: ProbeSettings
) -> tuple[float, dict[float, float]]:
    """C with the best mean validation accuracy over inner folds of ``(x, y)``, and every C's."""
    totals = dict.fromkeys(sorted(settings.c_grid), 0.0)
    inner = stratified_folds(y, settings.inner_folds, settings.seed)
    for fit_rows, val_rows in inner:
        selection = select_c(x[fit_rows], y[fit_rows], x[val_rows], y[val_rows], settings)
        for c, accuracy in selection.accuracies.items():
            totals[c] += accuracy
    means = {c: total / len(inner) for c, total in totals.items()}
    best = max(means.values())
    return next(c for c, mean in means.items() if mean == best), means


def tuned_accuracy(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    settings: ProbeSettings,
    dev: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[float, float]:
    """Test accuracy ×100 of a probe fitted on ``train``, and the C it used.

    C is chosen on ``dev`` (the probe is then fitted on train alone, as SentEval does), or
    without dev by :func:`choose_c` on train (then the probe is refitted on all of train).
    """
    x_train, y_train = train
    if dev is not None:
        selection = select_c(x_train, y_train, dev[0], dev[1], settings)
        probe, c = selection.probe, selection.c
    else:
        c, _ = choose_c(x_train, y_train, settings)
        probe = _Probe(settings).fit(x_train, y_train, c)
    return probe.accuracy(*test), c


def cross_validated_accuracy(
    x: np.ndarray, y: np.ndarray, settings: ProbeSettings
) -> tuple[float, list[float], list[float]]:
    """Mean test accuracy ×100 over the folds, with each fold's accuracy and C."""
    accuracies: list[float] = []
    chosen: list[float] = []
    for train_rows, test_rows in cv_folds(y, settings):
        accuracy, c = tuned_accuracy(
            (x[train_rows], y[train_rows]), (x[test_rows], y[test_rows]), settings
        )
        accuracies.append(accuracy)
        chosen.append(c)
    return float(np.mean(accuracies)), accuracies, chosen


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """InferSent's pair features ``[u, v, |u − v|, u ⊙ v]`` (4 × dim columns)."""
    if u.shape != v.shape:
        raise DataError(f"pair features need equal shapes, got {u.shape} and {v.shape}")
    return np.hstack([u, v, np.abs(u - v), u * v]).astype(np.float32, copy=False)


def _features(examples: LabeledTexts | LabeledPairs, embedded: EmbeddedTexts) -> np.ndarray:
    if isinstance(examples, LabeledPairs):
        return pair_features(
            embedded.features_of(examples.texts1), embedded.features_of(examples.texts2)
        )
    return embedded.features_of(examples.texts)


def _subsample(examples: Examples, limit: int | None, seed: int) -> Examples:
    if limit is None or len(examples) <= limit:
        return examples
    rows = np.random.default_rng(seed).choice(len(examples), size=limit, replace=False)
    return examples.take(np.sort(rows))


def _limited(dataset: ClassificationSet, limit: int | None, seed: int) -> ClassificationSet:
    if isinstance(dataset, LabeledSplits):
        splits: LabeledSplits[Any] = dataset
        return LabeledSplits(
            splits.name,
            _subsample(splits.train, limit, seed),
            None if splits.dev is None else _subsample(splits.dev, limit, seed),
            _subsample(splits.test, limit, seed),
        )
    examples: Any = dataset  # LabeledTexts or LabeledPairs: _subsample keeps the type
    return _subsample(examples, limit, seed)


class ClassificationTask(Task):
    """Accuracy ×100 of a logistic-regression probe per SentEval set, and their average.

    Sets come from ``data_dir`` by name (``datasets``), or ready-made through ``sets`` (any
    :class:`LabeledTexts`, :class:`LabeledPairs` or :class:`LabeledSplits`; records use their
    ``name``). ``limit`` keeps at most that many random examples of every split, for smoke
    runs. ``seed`` seeds that sampling, the folds and the probe (it replaces ``settings.seed``).
    """

    name = "classification"

    def __init__(
        self,
        data_dir: str | Path | None = None,
        datasets: Sequence[str] = DEFAULT_DATASETS,
        *,
        sets: Sequence[ClassificationSet] | None = None,
        limit: int | None = None,
        seed: int = 0,
        settings: ProbeSettings | None = None,
        show_progress: bool | None = None,
    ) -> None:
        # Before any data loads or any text is encoded: the probes are scikit-learn's.
        require_library("sklearn", "the classification task", extra="eval")
        if limit is not None and limit < 2:
            raise DataError(f"limit must be at least 2 examples, got {limit}")
        if sets is None:
            names = list(dict.fromkeys(canonical_classification_name(n) for n in datasets))
            loaded = [load_classification_set(n, data_dir) for n in names]
        else:
            loaded = list(sets)
        if not loaded:
            raise DataError("no classification data sets to evaluate")
        self.sets: list[ClassificationSet] = [_limited(s, limit, seed) for s in loaded]
        self.settings = replace(settings or ProbeSettings(), seed=seed)
        self.show_progress = show_progress

    def texts(self) -> list[str]:
        return [t for dataset in self.sets for t in dataset.all_texts()]

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        show = self.show_progress
        if show is None:
            show = not os.environ.get("DEMITASSE_QUIET")
        sets = tracked(self.sets, "classification probes", unit="sets", enabled=show, leave=False)
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=self.settings.threads):
            scores = [self._score(dataset, embedded) for dataset in sets]
        return with_average(scores, "accuracy")

    def _score(self, dataset: ClassificationSet, embedded: EmbeddedTexts) -> Score:
        settings = self.settings
        if not isinstance(dataset, LabeledSplits):
            x, y = _features(dataset, embedded), dataset.labels
            accuracy, per_fold, chosen = cross_validated_accuracy(x, y, settings)
            extra = {
                "protocol": f"{settings.folds}-fold cv, C by inner {settings.inner_folds}-fold cv",
                "n": len(y),
                "fold_accuracy": [round(a, 2) for a in per_fold],
                "C": chosen,
            }
            return Score(dataset.name, "accuracy", accuracy, extra)
        train = (_features(dataset.train, embedded), dataset.train.labels)
        test = (_features(dataset.test, embedded), dataset.test.labels)
        dev = None
        if dataset.dev is not None:
            dev = (_features(dataset.dev, embedded), dataset.dev.labels)
        accuracy, c = tuned_accuracy(train, test, settings, dev=dev)
        extra = {
            "protocol": "C on dev"
            if dev is not None
            else f"C by {settings.inner_folds}-fold cv on train",
            "n_train": len(train[1]),
            "n_test": len(test[1]),
            "C": c,
        }
        return Score(dataset.name, "accuracy", accuracy, extra)
