"""Scoring many sets of vectors on the same tasks, spread over worker processes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from demitasse.evaluation import ResultRecord, Task, evaluate_vectors, machine_description
from lab.parallel import run_in_workers


@dataclass(frozen=True)
class VectorJob:
    """Vectors of the evaluation texts, and the method and model their records name."""

    method: str
    model: str
    vectors: np.ndarray


def score_vectors(
    jobs: Sequence[VectorJob],
    texts: list[str],
    tasks: Sequence[Task],
    *,
    fit_data: str | None,
    workers: int,
) -> list[ResultRecord]:
    """Every job's records on every task, in job order, over ``workers`` forked processes
    (each at torch's default thread count: classification probes dominate such runs).
    The records name the machine as this process sees it: a forked worker cannot ask the GPU."""
    machine = machine_description()

    def score(index: int) -> tuple[int, list[ResultRecord]]:
        job = jobs[index]
        records = evaluate_vectors(
            job.vectors, texts, list(tasks), model=job.model, method=job.method, fit_data=fit_data
        )
        return index, records

    scored = dict(run_in_workers(score, range(len(jobs)), workers=workers, threads=None))
    return [dataclasses.replace(r, machine=machine) for i in range(len(jobs)) for r in scored[i]]
