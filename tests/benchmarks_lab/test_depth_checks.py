"""The depth harness's checks: out-of-family flags and the last-layer and inner-gain checks."""

from __future__ import annotations

import pytest

from demitasse.errors import DataError
from lab.depth_checks import depth_checks, family_flags


def _scores(sts: list[float], other: dict[str, list[float]]) -> dict[tuple[int, str], float]:
    scores = {(i + 1, "sts"): s for i, s in enumerate(sts)}
    for metric, values in other.items():
        scores.update({(i + 1, metric): v for i, v in enumerate(values)})
    return scores


def test_family_flags_name_each_layer_where_sts_rises_while_another_figure_falls() -> None:
    original = _scores([60, 62, 80], {"scifact": [40, 45, 65], "agreement": [30, 40, 100]})
    candidate = _scores([72, 61, 80], {"scifact": [38, 50, 65], "agreement": [60, 20, 100]})
    flags = family_flags(original, candidate, ["scifact", "agreement"])
    # Layer 1: STS up, SciFact down (flagged); layer 2: STS down (not this check's concern).
    assert [(f.layer, f.metric) for f in flags] == [(1, "scifact")]
    assert flags[0].gain == 12 and flags[0].drop == 2
    assert "layer 1: STS +12.00 while scifact -2.00" in str(flags[0])
    assert family_flags(original, candidate, ["scifact"], tolerance=2.5) == []
    with pytest.raises(DataError, match="no classification score"):
        family_flags(original, candidate, ["classification"])


def test_depth_checks_hold_the_last_layer_and_the_inner_gain() -> None:
    original = _scores([60, 62, 80], {"scifact": [40, 45, 65]})
    kept = _scores([72, 73, 80.2], {"scifact": [41, 47, 64.6]})
    checks = {c.name: c for c in depth_checks(original, kept, ["sts", "scifact"], 3)}
    assert checks["last layer, sts"].passed and not checks["last layer, scifact"].passed
    assert checks["mean of layers 1–2, sts"].value == pytest.approx(11.5)
    assert checks["mean of layers 1–2, sts"].passed
    lower = depth_checks(original, kept, ["sts"], 3, inner_gain=12)[-1]
    assert not lower.passed
