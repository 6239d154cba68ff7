"""Metrics shared by evaluation and training (training's dev checks must not import the
evaluation harness, which sits above the models it scores)."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from demitasse.errors import DataError


def spearman_x100(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Spearman correlation ×100 of predicted similarities and gold scores."""
    predicted = np.asarray(predicted, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.float64)
    if predicted.shape != gold.shape or predicted.ndim != 1:
        raise DataError(f"{predicted.shape[0]} similarities for {gold.shape[0]} gold scores")
    if len(gold) < 2:
        raise DataError("STS evaluation needs at least 2 scored pairs")
    if np.ptp(predicted) == 0:
        return 0.0  # constant predictions carry no ranking; spearmanr would return NaN
    return float(spearmanr(predicted, gold).statistic * 100.0)
