"""``tune``: from a model, the user's data and a target to the chosen model directory.

Embed once, time the encoders, sweep, choose, write the model, records and the report. Every
failure that is the user's (a target nothing meets, limits that contradict each other) is a
one-line :class:`~demitasse.errors.DataError` raised after the finished part of the sweep is
safely stored, so ``resume=True`` continues from it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demitasse.errors import DataError
from demitasse.evaluation.records import ResultRecord, write_records
from demitasse.io_targets import check_apart, check_not_input
from demitasse.model_files import check_model_target, model_inputs
from demitasse.report.render import ReportPaths
from demitasse.tune.choice import (
    NoConfigurationError,
    Outcome,
    Requirement,
    Target,
    budget_bytes,
    choose,
    pareto_front,
    requirement,
)
from demitasse.tune.data import TuneData
from demitasse.tune.output import WrittenModel, outcome_records, write_model
from demitasse.tune.report import render_tune_report
from demitasse.tune.space import Configuration, SweepSpace
from demitasse.tune.store import check_work_dir
from demitasse.tune.sweep import Sweep, SweepSettings

logger = logging.getLogger(__name__)

RECORDS_FILE = "results.json"
REPORT_DIR = "report"


@dataclass(frozen=True)
class TuneResult:
    """Everything a tune measured and decided, and where it wrote it; ``budget`` is which
    bytes the choice counted (the target's)."""

    outcomes: list[Outcome]
    full: Outcome
    needed: Requirement
    chosen: Outcome
    written: WrittenModel
    speeds: list[ResultRecord]
    records: Path
    report: ReportPaths
    seconds: dict[str, float]  # wall time of each stage
    budget: str = "total"
    #: What the time budget left out of the sweep (none: every configuration was measured).
    left_out: tuple[str, ...] = ()

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    @property
    def front(self) -> list[Outcome]:
        """The Pareto front of quality against the bytes the budget counts."""
        return pareto_front(self.outcomes, self.budget)


def check_tune_outputs(
    out: str | Path,
    work_dir: str | Path,
    inputs: Sequence[str | Path | None],
    names: tuple[str, str] = ("out", "work_dir"),
) -> Path:
    """``out`` as a Path if tune may write its model there and its work in ``work_dir``, before
    any work: neither one of ``inputs`` (the encoders' folders: their fingerprints name their
    files; the data), inside or holding one, nor the other (the model written at the end would
    be refused there, or swap the sweep away). ``names``: how errors name the two."""
    check_apart(dict(zip(names, (out, work_dir), strict=True)))
    target = check_model_target(out, inputs=inputs)
    # The work folder is resumed into (--resume): it is an output, checked as one.
    check_not_input(work_dir, inputs)
    return target


def tune(
    model: str,
    data: TuneData,
    target: Target,
    *,
    out: str | Path,
    settings: SweepSettings,
    static: str | None = None,
    space: SweepSpace | None = None,
) -> TuneResult:
    """Sweep ``model`` (and ``static``) on ``data``, choose by ``target``, write the chosen
    model to ``out``; records and the report go to ``settings.work_dir``."""
    laps = Laps()
    out = check_tune_outputs(out, settings.work_dir, [*model_inputs(model), *model_inputs(static)])
    check_work_dir(settings.work_dir, resume=settings.resume)
    space = space or SweepSpace(search=data.kind != "pairs")
    sweep = Sweep(model, data, space, settings, static=static, started=laps.started)
    sweep.embed()
    laps.lap("embedding")
    _check_bytes(sweep.space, target)
    sweep.open_store()
    _check_speeds(sweep.measure_speeds(), target)
    laps.lap("encoding speed")
    outcomes = sweep.run()
    laps.lap("sweep")
    needed = requirement(data.kind, sweep.full_outcome(), target)
    fit_data = f"{data.name} corpus"
    try:
        chosen = choose(outcomes, target, needed)
    except NoConfigurationError as exc:
        _write_results(sweep, outcomes, needed, None, fit_data, target.budget)
        raise DataError(_not_met(exc, needed, settings.work_dir, target.budget)) from None
    encoded = sweep.encoder(chosen.config.encoder)
    vectors = sweep.layer_vectors(encoded, chosen.config.layer)
    written = write_model(
        chosen, encoded, vectors, sweep.scorer(), out, fit_data=fit_data,
        batch_size=settings.batch_size,
    )  # fmt: skip
    records, report = _write_results(sweep, outcomes, needed, chosen, fit_data, target.budget)
    laps.lap("model, records and report")
    full = sweep.full_outcome()
    return TuneResult(
        outcomes, full, needed, chosen, written, sweep.speeds, records, report, laps.seconds,
        budget=target.budget, left_out=tuple(sweep.left_out),
    )  # fmt: skip


class Laps:
    """Wall time of each stage of a tune."""

    def __init__(self) -> None:
        self.started = self._mark = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = now - self._mark
        self._mark = now


def _check_bytes(space: SweepSpace, target: Target) -> None:
    """A byte limit below every configuration the sweep can build (its bytes under the
    target's budget) contradicts the sweep itself."""
    if target.max_bytes is None:
        return
    full_dims = {encoder.name: encoder.dim for encoder in space.encoders}

    def cost(config: Configuration) -> int:
        rescore = config.rescore_bytes(full_dims[config.encoder])
        return budget_bytes(config.index_bytes(), rescore, target.budget)

    smallest = min(space.configurations(), key=lambda c: (cost(c), -c.dim))
    if target.max_bytes < cost(smallest):
        raise DataError(
            f"--max-bytes {target.max_bytes} is below the smallest index this sweep can build "
            f"({cost(smallest)} bytes a vector: {smallest.precision} codes of "
            f"{smallest.dim} dims)"
        )


def _check_speeds(speeds: list[ResultRecord], target: Target) -> None:
    """A speed limit no encoder layer reaches on this machine rules out every configuration."""
    if target.min_speed is None or not speeds:
        return
    fastest = max(speeds, key=lambda r: r.score)
    if fastest.score < target.min_speed:
        raise DataError(
            f"no encoder reaches --min-speed {target.min_speed:g} texts/s on this machine: the "
            f"fastest, {fastest.model} layer {fastest.layer}, encodes {fastest.score:.0f}"
        )


def _not_met(exc: NoConfigurationError, needed: Requirement, work_dir: Path, budget: str) -> str:
    message = str(exc)
    best = exc.best
    if best is not None:
        retention = needed.retention(best)
        share = (
            ""
            if retention is None or needed.kind == "label-free"
            else (f" ({100 * retention:.1f} % of the full model)")
        )
        message += (
            f"; the best reached is {needed.metric} {best.quality:.2f}{share}: "
            f"{best.config.describe()}, {best.describe_bytes(budget)}"
        )
    return f"{message}. The sweep is kept in {work_dir}: rerun with --resume and another target"


def _write_results(
    sweep: Sweep,
    outcomes: list[Outcome],
    needed: Requirement,
    chosen: Outcome | None,
    fit_data: str,
    budget: str,
) -> tuple[Path, ReportPaths]:
    """results.json (every outcome's records and the encoders' speeds) and the report."""
    work = sweep.settings.work_dir
    records = outcome_records(outcomes, sweep.data, needed, chosen, fit_data) + sweep.speeds
    write_records(work / RECORDS_FILE, records)
    title = f"demitasse tune: {sweep.main.name} on {sweep.data.name}"
    summary = [
        f"Data: {sweep.data.describe()}.",
        f"Target: {needed.describe()}.",
        f"Chosen: {_chosen_text(chosen, needed, budget)}",
    ]
    if sweep.left_out:
        summary.append(f"Left out by the time budget (--time-budget): {'; '.join(sweep.left_out)}.")
    if budget != "memory":
        summary.insert(
            2, "Bytes counted: every byte a document costs, its codes and its rescoring copy "
            "(--budget total; --budget memory counts the codes only)."
        )  # fmt: skip
    report = render_tune_report(
        outcomes, work / REPORT_DIR, needed, title=title, summary=summary, chosen=chosen,
        budget=budget,
    )  # fmt: skip
    return work / RECORDS_FILE, report


def _chosen_text(chosen: Outcome | None, needed: Requirement, budget: str) -> str:
    if chosen is None:
        return "none (no configuration meets the target)"
    if budget == "memory":
        spent = (
            f"{chosen.index_bytes} index bytes and {chosen.rescore_bytes} rescoring bytes a vector"
        )
    else:
        spent = chosen.describe_bytes(budget)
    return (
        f"{chosen.config.describe(with_encoder=True)}, {spent}, {needed.metric} "
        f"{chosen.quality:.2f}."
    )
