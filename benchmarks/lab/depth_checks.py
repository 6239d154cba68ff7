"""The out-of-family check of a depth recipe: does a model that gains on the STS family keep
what the original does elsewhere?

A depth run scores the original model and a candidate at every layer on the STS family and on
tasks outside it (retrieval, classification, a label-free agreement with the original). The
scores come in as ``{(layer, metric): score}``; :func:`family_flags` names every layer where
the STS average moves up while an out-of-family figure goes down, and :func:`depth_checks`
computes the acceptance figures of a depth recipe (the last layer kept, the inner layers
lifted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from demitasse.errors import DataError

#: (layer, metric) -> score ×100.
LayerScores = Mapping[tuple[int, str], float]

FAMILY = "sts"


@dataclass(frozen=True)
class Flag:
    """``metric`` went down by ``drop`` at ``layer`` while the STS average rose by ``gain``."""

    layer: int
    metric: str
    gain: float
    drop: float

    def __str__(self) -> str:
        return (
            f"layer {self.layer}: STS {self.gain:+.2f} while {self.metric} "
            f"{-self.drop:+.2f} against the original"
        )


def _delta(original: LayerScores, candidate: LayerScores, layer: int, metric: str) -> float:
    try:
        return candidate[layer, metric] - original[layer, metric]
    except KeyError:
        raise DataError(f"no {metric} score at layer {layer} for both models") from None


def family_flags(
    original: LayerScores,
    candidate: LayerScores,
    out_of_family: Sequence[str],
    tolerance: float = 0.0,
    family: str = FAMILY,
) -> list[Flag]:
    """Every (layer, metric) where ``family`` rose while an ``out_of_family`` metric fell by
    more than ``tolerance`` points, layer by layer, then metric by metric."""
    layers = sorted({layer for layer, metric in candidate if metric == family})
    flags = []
    for layer in layers:
        gain = _delta(original, candidate, layer, family)
        if gain <= 0:
            continue
        for metric in out_of_family:
            change = _delta(original, candidate, layer, metric)
            if change < -tolerance:
                flags.append(Flag(layer, metric, gain, -change))
    return flags


@dataclass(frozen=True)
class Check:
    name: str
    value: float
    target: str
    passed: bool


def depth_checks(
    original: LayerScores,
    candidate: LayerScores,
    metrics: Sequence[str],
    last_layer: int,
    last_tolerance: float = 0.3,
    inner_gain: float = 11.0,
    family: str = FAMILY,
) -> list[Check]:
    """The last layer within ``last_tolerance`` of the original on each of ``metrics``, and the
    mean of ``family`` over layers 1..last−1 at least ``inner_gain`` above the original's."""
    checks = []
    for metric in metrics:
        delta = _delta(original, candidate, last_layer, metric)
        checks.append(
            Check(
                f"last layer, {metric}",
                delta,
                f"within ±{last_tolerance}",
                abs(delta) <= last_tolerance,
            )
        )
    inner = range(1, last_layer)
    gain = float(np.mean([_delta(original, candidate, layer, family) for layer in inner]))
    checks.append(
        Check(
            f"mean of layers 1–{last_layer - 1}, {family}",
            gain,
            f">= +{inner_gain}",
            gain >= inner_gain,
        )
    )
    return checks
