"""What a tune chooses: the Pareto front of quality against bytes per document, and the
cheapest configuration that meets the target within the limits.

**The budget.** What a configuration's bytes are: with ``budget="total"`` (the default,
``--budget total``) every byte a document costs, the codes held in memory plus the int8 copy
of the encoder's output kept for rescoring, so a two-stage configuration (a small code in RAM,
an int8 copy on disk) competes on its total; with ``budget="memory"`` the codes held in memory
only (the rescoring copy is counted only to break ties). ``max_bytes``, the order of the
choice, the Pareto front and the report all count the budget's bytes.

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

**The choice.** Among the configurations within the limits (``max_bytes`` bytes per vector
under the budget, ``min_speed`` texts per second of the encoder on this machine) that meet the
target, the one with the fewest bytes under the budget; ties go to the one with fewer bytes of
the other part (under ``total``, fewer held in memory; under ``memory``, fewer kept for
rescoring), then to the faster encoder (its layer cut, or a static model), then to the better,
and only then to the lower query latency: one query's search over codes takes a fraction of a
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
#: What a configuration's bytes count (see the module docs): every byte a document costs, or
#: the codes held in memory only. The first is the default.
BUDGETS: tuple[str, ...] = ("total", "memory")


def check_budget(budget: object) -> str:
    """``budget`` if it is one of :data:`BUDGETS`; a one-line DataError otherwise."""
    if not isinstance(budget, str) or budget not in BUDGETS:
        shown = str(budget)[:40]
        raise DataError(f"--budget must be {' or '.join(BUDGETS)}, got {shown!r}")
    return budget


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

    @property
    def total_bytes(self) -> int:
        """Every byte a document costs: its codes and its rescoring copy."""
        return self.index_bytes + self.rescore_bytes

    def budget_bytes(self, budget: str = "total") -> int:
        """The bytes ``budget`` counts: the total, or the codes held in memory only."""
        return budget_bytes(self.index_bytes, self.rescore_bytes, budget)

    def describe_bytes(self, budget: str = "total") -> str:
        """``24 index bytes a vector`` (memory), ``408 bytes a vector (24 index + 384
        rescoring)`` (total)."""
        if check_budget(budget) == "memory":
            return f"{index_bytes(self.index_bytes)} a vector"
        text = f"{plain_bytes(self.total_bytes)} a vector"
        if self.rescore_bytes:
            text += f" ({self.index_bytes} index + {self.rescore_bytes} rescoring)"
        return text

    def cost(self, budget: str = "total") -> tuple[float, ...]:
        """What the choice minimises under ``budget``, in order (see the module docs)."""
        other = self.rescore_bytes if check_budget(budget) == "memory" else self.index_bytes
        return (
            self.budget_bytes(budget),
            other,
            -(self.speed or 0.0),
            -self.quality,
            self.latency_p50_ms if self.latency_p50_ms is not None else math.inf,
        )


@dataclass(frozen=True)
class Target:
    """What the user needs: a retention of the full model's quality and/or limits, and which
    bytes ``max_bytes`` and the choice count (``budget``: ``"total"`` or ``"memory"``)."""

    min_retention: float | None = None
    max_bytes: int | None = None
    min_speed: float | None = None
    budget: str = "total"

    def __post_init__(self) -> None:
        check_budget(self.budget)
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
        if self.max_bytes is not None and outcome.budget_bytes(self.budget) > self.max_bytes:
            return False
        return self.min_speed is None or (outcome.speed or 0.0) >= self.min_speed

    def describe_limits(self) -> str:
        parts = []
        if self.max_bytes is not None:
            if self.budget == "memory":
                parts.append(f"at most {index_bytes(self.max_bytes)} a vector")
            else:
                parts.append(
                    f"at most {plain_bytes(self.max_bytes)} a vector (codes + rescoring copy)"
                )
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


def budget_bytes(index: int, rescore: int, budget: str) -> int:
    """A configuration's bytes under ``budget``: its ``index`` bytes (the codes held in
    memory) plus, under ``"total"``, its ``rescore`` bytes (the rescoring copy)."""
    return index if check_budget(budget) == "memory" else index + rescore


def plain_bytes(n: int) -> str:
    """``1 byte``, ``8 bytes``."""
    return f"{n} byte{'' if n == 1 else 's'}"


def budget_label(budget: str) -> str:
    """What the budget's bytes are, for headings and axes."""
    if check_budget(budget) == "memory":
        return "index bytes per vector"
    return "bytes per vector (codes + rescoring copy)"


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


def pareto_front(outcomes: Sequence[Outcome], budget: str = "total") -> list[Outcome]:
    """The outcomes no other beats on both bytes under ``budget`` and quality, fewest bytes
    first (among equal bytes, the one the choice would prefer)."""
    check_budget(budget)
    return metrics.pareto_front(
        outcomes,
        cost=lambda o: o.budget_bytes(budget),
        quality=lambda o: o.quality,
        tie_break=lambda o: o.cost(budget),
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
    budget = target.budget
    eligible = [o for o in outcomes if target.within_limits(o)]
    if needed.required is None:
        if eligible:
            return min(eligible, key=lambda o: (-o.quality, o.cost(budget)))
        best = max(outcomes, key=lambda o: o.quality)
        raise NoConfigurationError(f"no configuration is within {target.describe_limits()}", best)
    meeting = [o for o in eligible if needed.meets(o)]
    if meeting:
        return min(meeting, key=lambda o: o.cost(budget))
    best = max(eligible or outcomes, key=lambda o: o.quality)
    where = f" within {target.describe_limits()}" if target.describe_limits() else ""
    if not eligible:
        where = f"; none is even within {target.describe_limits()}"
    raise NoConfigurationError(f"no configuration reaches {needed.describe()}{where}", best)
