"""Metrics shared by evaluation, training, tuning and reports (training's dev checks must not
import the evaluation harness, which sits above the models it scores)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

from demitasse.errors import DataError

Item = TypeVar("Item")


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
    if np.isnan(predicted).any() or np.isnan(gold).any() or np.ptp(gold) == 0:
        return float("nan")  # as scipy.stats.spearmanr
    ranks = np.column_stack((average_ranks(predicted), average_ranks(gold)))
    # scipy.stats.spearmanr's own computation, so the figures are bit for bit scipy's.
    return float(np.corrcoef(ranks, rowvar=False)[1, 0] * 100.0)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1 of a 1-D array, ties given their average rank: float64, as
    ``scipy.stats.rankdata(values)``."""
    order = np.argsort(values, kind="mergesort")
    inverse = np.empty(order.size, dtype=np.intp)
    inverse[order] = np.arange(order.size)
    ordered = values[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    group = starts.cumsum()[inverse]  # 1-based index of each value's group of equal values
    bounds = np.r_[np.nonzero(starts)[0], len(starts)]
    return 0.5 * (bounds[group] + bounds[group - 1] + 1)


def pareto_front(
    items: Iterable[Item],
    *,
    cost: Callable[[Item], float],
    quality: Callable[[Item], float],
    tie_break: Callable[[Item], Any] | None = None,
) -> list[Item]:
    """The items no other item beats on both cost (lower is better) and quality (higher is
    better), cheapest first. Among items of equal cost the best quality stands for them, and
    among those the smallest ``tie_break``."""

    def order(item: Item) -> tuple[Any, ...]:
        return cost(item), -quality(item), tie_break(item) if tie_break else 0

    front: list[Item] = []
    for item in sorted(items, key=order):
        if not front or quality(item) > quality(front[-1]):
            front.append(item)
    return front
