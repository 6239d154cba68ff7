"""Layer averages of training benchmarks, and scoring vector sets over worker processes."""

from __future__ import annotations

import numpy as np
import pytest

from demitasse.data import ScoredPairs
from demitasse.evaluation import ResultRecord, STSTask, evaluate_vectors
from lab.layers import inner_layer_mean, layer_averages
from lab.scoring import VectorJob, score_vectors


def _record(model: str, layer: int, dim: int, dataset: str, score: float) -> ResultRecord:
    return ResultRecord(
        model=model, layer=layer, method="none", dim=dim, precision="float32", task="sts",
        dataset=dataset, metric="spearman", score=score, machine="test",
    )  # fmt: skip


def test_layer_averages_read_the_average_records_or_the_single_set() -> None:
    records = [_record("m", layer, 8, ds, 10.0 * layer + i) for layer in (1, 2)
               for i, ds in enumerate(("a", "avg"))]  # fmt: skip
    assert layer_averages(records) == {("m", 1, 8): 11.0, ("m", 2, 8): 21.0}
    single = [_record("m", 1, 8, "dev", 70.0)]
    assert layer_averages(single) == {("m", 1, 8): 70.0}


def test_inner_layer_mean_leaves_out_the_last_layer_and_narrow_widths() -> None:
    averages = {("m", layer, dim): float(layer * dim) for layer in (1, 2, 3) for dim in (4, 8)}
    averages[("other", 1, 8)] = 1000.0
    assert inner_layer_mean(averages, "m") == pytest.approx((8 + 16) / 2)


def _sts_task(n: int, rng: np.random.Generator) -> tuple[STSTask, list[str]]:
    left = [f"left {i}" for i in range(n)]
    right = [f"right {i}" for i in range(n)]
    pairs = ScoredPairs("toy", left, right, rng.uniform(0, 5, n).astype(np.float32))
    task = STSTask({"toy": pairs})
    return task, list(dict.fromkeys(task.texts()))


@pytest.mark.parametrize("workers", [1, 2])
def test_score_vectors_keeps_job_order_and_matches_scoring_each(workers: int) -> None:
    rng = np.random.default_rng(0)
    task, texts = _sts_task(30, rng)
    jobs = [
        VectorJob(f"method {i}", f"model {i % 2}", rng.normal(size=(len(texts), 8)))
        for i in range(5)
    ]
    records = score_vectors(jobs, texts, [task], fit_data="toy fit", workers=workers)
    expected = [
        r
        for job in jobs
        for r in evaluate_vectors(
            job.vectors, texts, [task], model=job.model, method=job.method, fit_data="toy fit"
        )
    ]
    assert [(r.model, r.method, r.dataset) for r in records] == [
        (r.model, r.method, r.dataset) for r in expected
    ]
    assert [r.score for r in records] == pytest.approx([r.score for r in expected])
    assert {r.fit_data for r in records} == {"toy fit"}
