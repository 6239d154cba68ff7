"""What a tune chooses: the Pareto front of quality against index bytes, and the cheapest
configuration that meets the target within the limits.

**The target.** ``min_retention=R`` asks for R of the full model's quality on the user's data:
``R × nDCG@10`` of the full model (retrieval) or ``R × Spearman`` (scored pairs). Without
judgements the label-free estimate decides, and a retention does not carry over to it one to
one: a configuration that keeps 85 % of the full model's top-10 neighbours typically keeps
more than 97 % of its nDCG@10. So R asks for a neighbour overlap@10 of at least
``1 − LABEL_FREE_SLOPE × (1 − R)``: 85 % for R = 0.97, 95 % for R = 0.99. The slope was
calibrated on SciFact's *train* queries (all-MiniLM-L6-v2, 162 configurations: truncation,
PCA and whitened PCA at 6 widths, float32/int8/ITQ-binary, rescoring ×1/×4/×10): every
configuration at or above 85 % overlap kept at least 98.3 % of nDCG@10 there (and, checked
afterwards on the test queries, at least 97.5 %); at 80 % the worst kept 93 %.

**Confidence.** A configuration chosen because it just meets the target on the tuning queries
often falls short on others: the cheapest of many candidates that pass is the one whose luck
helped most. So over judged queries a retention must hold with 95 % confidence: the one-sided
bound of the mean per-query gap ``nDCG@10(config) − R × nDCG@10(full)`` (paired, normal
approximation) must be at least 0. On SciFact train (all-MiniLM-L6-v2, ITQ codes of PCA-192,
24 bytes), rescoring ×4 keeps 97.8 % of nDCG@10 at z = 1.3, not enough; rescoring ×10 keeps
99.2 % at z = 6.5. On the test queries the first keeps 96.7 %, the second 98.3 %.

**The choice.** Among the configurations within the limits (``max_bytes`` index bytes per
vector, ``min_speed`` texts per second of the encoder on this machine) that meet the target,
the one with the fewest index bytes; ties go to the one keeping fewer bytes for rescoring,
then to the faster encoder (its layer cut, or a static model), then to the better, and only
then to the lower query latency: one query's search over codes takes a fraction of a
millisecond whatever the configuration, and those timings change from run to run on a busy
machine, so they must not outrank a quality difference. With limits but no target, the best
quality within the limits (ties: the cheaper).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from demitasse import metrics
from demitasse.errors import DataError
from demitasse.tune.space import Configuration

#: Overlap@10 asked per unit of nDCG retention given up (see the module docs).
LABEL_FREE_SLOPE = 5.0
#: The one-sided confidence a retention over judged queries must hold with, and its z.
CONFIDENCE = "95 %"
CONFIDENCE_Z = 1.645
#: The headline metric of each kind of data, and the task its records carry.
HEADLINES: dict[str, tuple[str, str]] = {
    "retrieval": ("retrieval", "ndcg@10"),
    "pairs": ("sts", "spearman"),
    "label-free": ("retrieval", "overlap@10"),
}


@dataclass(frozen=True)
class Outcome:
    """One measured configuration."""

    config: Configuration
    quality: float  # the headline metric ×100
    scores: dict[str, float]
    index_bytes: int
    rescore_bytes: int
    speed: float | None = None  # texts/s of the configuration's encoder and layer
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Over the queries of judged retrieval: the variance of the per-query headline (×100)²,
    #: its covariance with the full model's, and the number of queries (None elsewhere).
    spread: tuple[float, float, int] | None = None

    def cost(self) -> tuple[float, ...]:
        """What the choice minimises, in order (see the module docs)."""
        return (
            self.index_bytes,
            self.rescore_bytes,
            -(self.speed or 0.0),
            -self.quality,
            self.latency_p50_ms if self.latency_p50_ms is not None else math.inf,
        )


@dataclass(frozen=True)
class Target:
    """What the user needs: a retention of the full model's quality and/or limits."""

    min_retention: float | None = None
    max_bytes: int | None = None
    min_speed: float | None = None

    def __post_init__(self) -> None:
        if self.min_retention is None and self.max_bytes is None and self.min_speed is None:
            raise DataError(
                "nothing to choose by: give --min-retention R (e.g. 0.97) and/or the limits "
                "--max-bytes N, --min-speed N"
            )
        if self.min_retention is not None and not 0 < self.min_retention <= 1:
            raise DataError(
                f"--min-retention is a share of the full model's quality in (0, 1], got "
                f"{self.min_retention:g}"
            )
        if self.max_bytes is not None and self.max_bytes < 1:
            raise DataError(f"--max-bytes must be at least 1, got {self.max_bytes}")
        if self.min_speed is not None and not self.min_speed > 0:
            raise DataError(f"--min-speed must be a positive number, got {self.min_speed:g}")

    def within_limits(self, outcome: Outcome) -> bool:
        if self.max_bytes is not None and outcome.index_bytes > self.max_bytes:
            return False
        return self.min_speed is None or (outcome.speed or 0.0) >= self.min_speed

    def describe_limits(self) -> str:
        parts = []
        if self.max_bytes is not None:
            parts.append(f"at most {index_bytes(self.max_bytes)} a vector")
        if self.min_speed is not None:
            parts.append(f"at least {self.min_speed:g} texts/s")
        return " and ".join(parts)


@dataclass(frozen=True)
class Requirement:
    """The quality a target asks for on one kind of data. ``full_variance`` (judged retrieval
    only) is the variance of the full model's per-query headline, for the confidence bound."""

    kind: str
    metric: str
    full_quality: float
    required: float | None  # None: no quality target
    full_variance: float | None = None

    def describe(self) -> str:
        if self.required is None:
            return f"the best {self.metric} within the limits"
        if self.kind == "label-free":
            return f"{self.metric} ≥ {self.required:.1f} (the label-free estimate)"
        share = self.required / self.full_quality if self.full_quality else 0.0
        text = (
            f"{self.metric} ≥ {self.required:.2f} ({100 * share:.0f} % of the full model's "
            f"{self.full_quality:.2f})"
        )
        if self.full_variance is not None:
            text += f" with {CONFIDENCE} confidence over the queries"
        return text

    def meets(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` meets the target: its quality reaches the required one and,
        over judged queries, the one-sided paired bound of ``quality − R × full`` is ≥ 0."""
        if self.required is None:
            return True
        if outcome.quality < self.required - 1e-9:
            return False
        if outcome.spread is None or self.full_variance is None or not self.full_quality:
            return True
        variance, covariance, n = outcome.spread
        share = self.required / self.full_quality
        gap_variance = variance + share**2 * self.full_variance - 2 * share * covariance
        margin = CONFIDENCE_Z * math.sqrt(max(gap_variance, 0.0) / max(n, 1))
        return outcome.quality - self.required - margin >= -1e-9

    def retention(self, outcome: Outcome) -> float | None:
        """The outcome's quality as a share of the full model's."""
        return outcome.quality / self.full_quality if self.full_quality else None


def index_bytes(n: int) -> str:
    """``1 index byte``, ``8 index bytes``."""
    return f"{n} index byte{'' if n == 1 else 's'}"


def requirement(kind: str, full: Outcome | float, target: Target) -> Requirement:
    """The quality ``target`` asks for on ``kind`` data whose full model is ``full`` (its
    outcome, or just its quality); see the module docs for the label-free rule."""
    metric = HEADLINES[kind][1]
    full_quality = full if isinstance(full, float | int) else full.quality
    spread = None if isinstance(full, float | int) else full.spread
    retention = target.min_retention
    if retention is None:
        return Requirement(kind, metric, full_quality, None)
    if kind == "label-free":
        required = 100.0 * max(0.0, 1.0 - LABEL_FREE_SLOPE * (1.0 - retention))
        return Requirement(kind, metric, full_quality, required)
    variance = None if spread is None else spread[0]
    return Requirement(kind, metric, full_quality, retention * full_quality, variance)


def pareto_front(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The outcomes no other beats on both index bytes and quality, fewest bytes first
    (among equal index bytes, the one the choice would prefer)."""
    return metrics.pareto_front(
        outcomes, cost=lambda o: o.index_bytes, quality=lambda o: o.quality, tie_break=Outcome.cost
    )


class NoConfigurationError(DataError):
    """No swept configuration meets the target within the limits; ``best`` is the closest."""

    def __init__(self, message: str, best: Outcome | None) -> None:
        super().__init__(message)
        self.best = best


def choose(outcomes: Sequence[Outcome], target: Target, needed: Requirement) -> Outcome:
    """The configuration the tune writes (see the module docs), or :class:`NoConfigurationError`
    naming the best one reached."""
    if not outcomes:
        raise NoConfigurationError("the sweep measured no configuration", None)
    eligible = [o for o in outcomes if target.within_limits(o)]
    if needed.required is None:
        if eligible:
            return min(eligible, key=lambda o: (-o.quality, o.cost()))
        best = max(outcomes, key=lambda o: o.quality)
        raise NoConfigurationError(f"no configuration is within {target.describe_limits()}", best)
    meeting = [o for o in eligible if needed.meets(o)]
    if meeting:
        return min(meeting, key=lambda o: o.cost())
    best = max(eligible or outcomes, key=lambda o: o.quality)
    where = f" within {target.describe_limits()}" if target.describe_limits() else ""
    if not eligible:
        where = f"; none is even within {target.describe_limits()}"
    raise NoConfigurationError(f"no configuration reaches {needed.describe()}{where}", best)
