# ruff: noqa: N806  (scikit-learn convention: matrices are capitalised)
"""The lab's gradient recording (``lab.gradients``): SMEC's step hook fills ``history_`` with
per-step gradient statistics, and the fit is the one without it."""

from __future__ import annotations

import numpy as np
import pytest

from demitasse.compress import SMEC, SMECVariant, TrainingSettings
from lab.gradients import GradientLog, GradientRecordingSMEC, variance_series
from tests.helpers import correlated

TRAINING = TrainingSettings(max_epochs=2, batch_size=128, device="cpu")


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs on one torch thread."""


@pytest.mark.parametrize("smrl", [True, False], ids=["smrl", "parallel"])
def test_gradient_recording_leaves_the_fit_unchanged(smrl: bool) -> None:
    X = correlated(600)
    settings = {"dim": 16, "min_dim": 4, "hidden_dim": 32, "training": TRAINING}
    variant = SMECVariant(smrl=smrl)
    plain = SMEC(**settings, variant=variant).fit(X)
    logged = GradientRecordingSMEC(**settings, variant=variant).fit(X)
    for dim in (16, 8, 4):
        np.testing.assert_array_equal(logged.transform(X, dim), plain.transform(X, dim))
    assert not hasattr(plain, "history_")
    history = logged.history_
    n_trained = 1 if smrl else 3  # modules trained by each run_training call
    assert len({entry["run"] for entry in history}) == (3 if smrl else 1)
    assert all(len(entry["grad_sq_norm"]) == n_trained for entry in history)
    windows = [entry["grad_variance"] for entry in history if "grad_variance" in entry]
    assert windows and all(v >= -1e-6 for variances in windows for v in variances)
    assert all(entry["grad_sq_norm"][0] > 0 for entry in history)

    run = history[0]["run"]
    series = variance_series(history, run, 0)
    steps = [entry["step"] for entry in history if entry["run"] == run]
    assert series.shape == (len(steps) // GradientLog.window, 3)
    assert (series[:, 0] % GradientLog.window == 0).all() and (series[:, 2] >= -1e-6).all()


def test_extend_records_its_own_stages_afresh() -> None:
    X = correlated(600)
    model = GradientRecordingSMEC(dim=16, min_dim=8, hidden_dim=32, training=TRAINING).fit(X)
    assert {entry["run"] for entry in model.history_} == {"smec: stage 16", "smec: stage 8"}
    model.extend(X, 4)
    assert {entry["run"] for entry in model.history_} == {"smec: stage 4"}
