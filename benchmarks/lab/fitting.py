"""Fitting compressors under a setting, judging them, and averaging their seeds.

A *setting* is one way of fitting (which rows, which supervision, what the fits are judged
on); a *job* is one compressor of one setting at one seed. Jobs are independent, so a
benchmark runs them with :func:`~lab.parallel.run_in_workers` and folds
the outcomes back together with :func:`summarise_seeds`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from demitasse.compress import Compressor
from demitasse.evaluation import ResultRecord, Task, evaluate_vectors, mean_over_seeds

logger = logging.getLogger(__name__)

#: What a setting is judged on: each task at its output widths.
Judged = Sequence[tuple[Task, Sequence[int]]]


@dataclass(frozen=True)
class Embedded:
    """The evaluation texts and their uncompressed vectors, which every fit is judged on."""

    model: str
    texts: list[str]
    vectors: np.ndarray


@dataclass(frozen=True)
class FitSetting:
    """One way of fitting compressors.

    ``vectors`` are the fit rows, named ``fit_data`` in the records; a learned compressor also
    gets ``supervision`` (keyword arguments of its ``fit``), ``params`` (its loss weights) and
    at most ``epochs`` epochs; every fit is judged on ``judged``.
    """

    name: str
    vectors: np.ndarray
    fit_data: str
    judged: Judged
    supervision: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)
    epochs: int | None = None


@dataclass(frozen=True)
class FitJob:
    """One compressor (``method``) of one setting; ``seed`` None: the compressor's default,
    and no seed on its records."""

    setting: str
    method: str
    seed: int | None = None

    @property
    def label(self) -> str:
        return f"{self.setting} {self.method}" + ("" if self.seed is None else f" seed {self.seed}")


@dataclass(frozen=True)
class FitOutcome:
    """A job's records, and its fit's wall seconds where the fit is timed (None: not)."""

    job: FitJob
    records: list[ResultRecord]
    seconds: float | None


@dataclass(frozen=True)
class SeedSummary:
    """Records averaged over seeds (what tables read), every seed's own records (empty for
    a run without seeds) and the mean fit seconds per (setting, method) of the timed fits."""

    averaged: list[ResultRecord]
    per_seed: list[ResultRecord]
    fit_seconds: dict[tuple[str, str], float]


def seed_jobs(
    settings: Iterable[str],
    baselines: Sequence[str],
    learned: Sequence[str],
    seeds: Sequence[int | None],
) -> list[FitJob]:
    """Every baseline once and every learned method once per seed, in every setting."""
    return [
        FitJob(setting, method, seed)
        for setting in settings
        for method in [*baselines, *learned]
        for seed in (seeds if method in learned else [None])
    ]


def judge(
    compressor: Compressor | None,
    embedded: Embedded,
    judged: Judged,
    *,
    method: str,
    fit_data: str | None,
    extra: Mapping[str, Any],
) -> list[ResultRecord]:
    """Records of ``compressor`` (None: the uncompressed vectors) on every task at each of
    its widths."""
    records: list[ResultRecord] = []
    for task, dims in judged:
        for dim in dims:
            reduced = (
                embedded.vectors
                if compressor is None
                else compressor.transform(embedded.vectors, dim=dim)
            )
            records += evaluate_vectors(
                reduced,
                embedded.texts,
                [task],
                model=embedded.model,
                method=method,
                fit_data=fit_data,
                extra=dict(extra),
            )
    return records


def fit_and_judge(
    job: FitJob,
    compressor: Compressor,
    setting: FitSetting,
    embedded: Embedded,
    *,
    learned: bool,
) -> FitOutcome:
    """Fit ``compressor`` on the setting's rows and judge it; a ``learned`` one also gets the
    setting's supervision, and its fit is timed. Records carry the setting (and the seed)."""
    clock = time.perf_counter()
    supervision = setting.supervision if learned else {}
    compressor.fit(setting.vectors, fit_data=setting.fit_data, **supervision)
    seconds = time.perf_counter() - clock
    logger.info(
        "%s: fitted on %d rows (%s) in %.0f s",
        job.label,
        len(setting.vectors),
        setting.fit_data,
        seconds,
    )
    records = judge(
        compressor,
        embedded,
        setting.judged,
        method=job.method,
        fit_data=setting.fit_data,
        extra={"setting": setting.name},
    )
    if job.seed is not None:
        for record in records:
            record.extra["seed"] = job.seed
    average = {r.dim: round(r.score, 2) for r in records if r.task == "sts" and r.dataset == "avg"}
    logger.info("%s: STS avg %s", job.label, average)
    return FitOutcome(job, records, seconds if learned else None)


def summarise_seeds(
    records: list[ResultRecord], outcomes: Iterable[FitOutcome], *, seeded: bool
) -> SeedSummary:
    """Average ``records`` over seeds (:func:`~demitasse.evaluation.mean_over_seeds`: mean,
    ``score_std`` and the ``seeds`` averaged) and give every record of a timed fit its fit's
    wall seconds, rounded (``extra["fit_seconds"]``): its seed's own, or for an averaged
    record the mean over its seeds. ``seeded``: the run named seeds, so every record is also
    kept as it was (``per_seed``)."""
    own: dict[tuple[str, str, int | None], float] = {}
    for outcome in outcomes:
        if outcome.seconds is not None:
            job = outcome.job
            own[job.setting, job.method, job.seed] = outcome.seconds
    by_method: dict[tuple[str, str], list[float]] = {}
    for (setting, method, _), seconds in own.items():
        by_method.setdefault((setting, method), []).append(seconds)
    mean = {key: float(np.mean(times)) for key, times in by_method.items()}
    per_seed = records if seeded else []
    averaged = mean_over_seeds(records)
    for record in averaged + per_seed:
        key = (record.extra.get("setting"), record.method)
        if key in mean:
            seed = record.extra.get("seed")
            seconds = mean[key] if seed is None else own[(*key, seed)]
            record.extra["fit_seconds"] = round(seconds)
    return SeedSummary(averaged, per_seed, mean)
