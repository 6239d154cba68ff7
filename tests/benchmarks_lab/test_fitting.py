"""Fits in worker processes, judged on a tiny synthetic STS problem, and averaged over seeds."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from demitasse.compress import make_compressor
from demitasse.data import ScoredPairs
from demitasse.evaluation import ResultRecord, STSTask
from lab import (
    Embedded,
    FitJob,
    FitOutcome,
    FitSetting,
    evaluation_texts,
    fit_and_judge,
    judge,
    run_in_workers,
    seed_jobs,
    summarise_seeds,
)
from tests.conftest import REPO

DIM = 16


def synthetic_sts(n: int = 60, seed: int = 0) -> tuple[STSTask, Embedded, np.ndarray]:
    """Pairs whose second vector drifts from the first as their gold score falls, and
    unrelated fit rows of the same distribution."""
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0, 5, n)
    left = rng.normal(size=(n, DIM)) * np.linspace(3, 0.3, DIM)
    right = left + rng.normal(size=(n, DIM)) * (5 - scores)[:, None]
    pairs = ScoredPairs("toy", [f"a{i}" for i in range(n)], [f"b{i}" for i in range(n)], scores)
    task = STSTask({"toy": pairs})
    texts = evaluation_texts([task])
    by_text = dict(zip(pairs.sentences1 + pairs.sentences2, [*left, *right], strict=True))
    vectors = np.stack([by_text[t] for t in texts]).astype(np.float32)
    fit_rows = (rng.normal(size=(200, DIM)) * np.linspace(3, 0.3, DIM)).astype(np.float32)
    return task, Embedded("toy-model", texts, vectors), fit_rows


@pytest.fixture(scope="module")
def problem() -> tuple[FitSetting, Embedded]:
    task, embedded, fit_rows = synthetic_sts()
    return FitSetting("toy-setting", fit_rows, "toy-fit", [(task, [8, 4])]), embedded


def fit_random(job: FitJob, setting: FitSetting, embedded: Embedded) -> FitOutcome:
    """A seeded compressor stands in for a learned one: its seed changes its scores."""
    compressor = make_compressor(job.method, dim=8, seed=job.seed or 0)
    return fit_and_judge(job, compressor, setting, embedded, learned=job.seed is not None)


def test_judge_scores_the_uncompressed_vectors_and_every_width(
    problem: tuple[FitSetting, Embedded],
) -> None:
    setting, embedded = problem
    reference = judge(None, embedded, [(setting.judged[0][0], [DIM])], method="none",
                      fit_data=None, extra={"setting": "all"})  # fmt: skip
    assert [(r.method, r.dim, r.dataset) for r in reference] == [("none", DIM, "toy")]
    assert reference[0].score > 50  # the pairs' drift follows their scores
    pca = make_compressor("pca", dim=8).fit(setting.vectors)
    records = judge(pca, embedded, setting.judged, method="pca", fit_data="toy-fit",
                    extra={"setting": "toy-setting"})  # fmt: skip
    assert [r.dim for r in records] == [8, 4]
    assert all(r.extra == {"setting": "toy-setting"} and r.fit_data == "toy-fit" for r in records)


def test_a_fit_carries_its_setting_and_seed_and_is_timed_only_when_learned(
    problem: tuple[FitSetting, Embedded],
) -> None:
    setting, embedded = problem
    seeded = fit_random(FitJob("toy-setting", "random", 3), setting, embedded)
    assert seeded.seconds is not None and seeded.seconds >= 0
    assert all(r.extra == {"setting": "toy-setting", "seed": 3} for r in seeded.records)
    plain = fit_random(FitJob("toy-setting", "random"), setting, embedded)
    assert plain.seconds is None
    assert all("seed" not in r.extra for r in plain.records)
    assert FitJob("s", "m", 3).label == "s m seed 3" and FitJob("s", "m").label == "s m"


def test_seed_jobs_repeat_only_the_learned_methods() -> None:
    jobs = seed_jobs(["a", "b"], ["pca"], ["smec"], [0, 1])
    assert jobs == [
        FitJob("a", "pca"), FitJob("a", "smec", 0), FitJob("a", "smec", 1),
        FitJob("b", "pca"), FitJob("b", "smec", 0), FitJob("b", "smec", 1),
    ]  # fmt: skip


def test_fits_in_worker_processes_give_what_fits_here_give(
    problem: tuple[FitSetting, Embedded],
) -> None:
    setting, embedded = problem
    jobs = seed_jobs([setting.name], ["random"], [], [None]) + [
        FitJob(setting.name, "random", seed) for seed in (1, 2, 3)
    ]

    def fit(job: FitJob) -> FitOutcome:  # a closure: workers inherit it by fork
        return fit_random(job, setting, embedded)

    here = {o.job: [r.score for r in o.records] for o in run_in_workers(fit, jobs, workers=1)}
    forked = {o.job: [r.score for r in o.records] for o in run_in_workers(fit, jobs, workers=2)}
    assert forked == here
    assert len({tuple(scores) for scores in here.values()}) == len(jobs)  # seeds matter


def test_workers_run_with_the_thread_budget_they_are_given() -> None:
    def threads(_: int) -> tuple[int, int]:
        import torch

        return os.getpid(), torch.get_num_threads()

    seen = list(run_in_workers(threads, range(6), workers=2, threads=1))
    assert {count for _, count in seen} == {1}
    assert os.getpid() not in {pid for pid, _ in seen}
    assert list(run_in_workers(threads, [], workers=2)) == []


# A parent whose SIGTERM handler notes the signal and carries on (as the CLI's atomic writes
# do) forks workers that inherit that handler until they put the default back. The second
# worker of each pool lingers a second in that window, so the pool's terminate lands there.
STOP_WORKERS_EARLY = """
import os, signal, time
from lab import run_in_workers
forks = []
os.register_at_fork(before=lambda: forks.append(1),
                    after_in_child=lambda: time.sleep(1) if len(forks) % 2 == 0 else None)
signal.signal(signal.SIGTERM, lambda *_: None)
for _ in range(2):
    results = run_in_workers(abs, list(range(-40, 0)), workers=2, threads=None)
    next(results)
    results.close()
print("stopped")
"""


def test_abandoned_workers_stop_even_under_a_handler_that_ignores_sigterm() -> None:
    # A fresh interpreter finds the lab where the scripts do: in benchmarks/.
    env = {**os.environ, "PYTHONPATH": str(REPO / "benchmarks")}
    done = subprocess.run([sys.executable, "-c", STOP_WORKERS_EARLY], capture_output=True,
                          text=True, timeout=60, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["stopped"]


def record(method: str, score: float, **extra: object) -> ResultRecord:
    return ResultRecord(
        model="m", layer=None, method=method, dim=8, precision="float32", task="sts",
        dataset="avg", metric="spearman", score=score, machine="test", extra=dict(extra),
    )  # fmt: skip


def test_summarise_seeds_averages_scores_and_fit_seconds() -> None:
    records = [
        record("none", 80.0, setting="all"),
        record("smec", 70.0, setting="s", seed=0),
        record("smec", 74.0, setting="s", seed=1),
        record("pca", 60.0, setting="s"),
    ]
    outcomes = [
        FitOutcome(FitJob("s", "smec", 0), records[1:2], 10.4),
        FitOutcome(FitJob("s", "smec", 1), records[2:3], 20.0),
        FitOutcome(FitJob("s", "pca"), records[3:], None),
    ]
    summary = summarise_seeds(records, outcomes, seeded=True)
    assert summary.fit_seconds == {("s", "smec"): pytest.approx(15.2)}
    none, smec, pca = summary.averaged
    assert (none.method, pca.method) == ("none", "pca")
    assert "fit_seconds" not in none.extra and "fit_seconds" not in pca.extra
    assert smec.score == pytest.approx(72.0)
    assert smec.extra["seeds"] == [0, 1]
    assert smec.extra["score_std"] == pytest.approx(np.std([70.0, 74.0], ddof=1))
    assert smec.extra["fit_seconds"] == 15
    assert summary.per_seed is records  # every seed's rows, each with its own fit time
    assert [r.extra.get("fit_seconds") for r in summary.per_seed] == [None, 10, 20, None]


def test_a_run_without_seeds_keeps_no_second_copy() -> None:
    records = [record("smec", 70.0, setting="s")]
    outcome = FitOutcome(FitJob("s", "smec"), records, 12.6)
    summary = summarise_seeds(records, [outcome], seeded=False)
    assert summary.per_seed == []
    assert [r.extra for r in summary.averaged] == [{"setting": "s", "fit_seconds": 13}]
