"""Per-query search latency of a :class:`~demitasse.search.QuantizedIndex`, one query per call,
the way a service answers requests: what the evaluation's retrieval task, the tuner and the
benchmarks report."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from demitasse.search import QuantizedIndex, check_k, faiss_or_none


@dataclass(frozen=True)
class SearchLatency:
    """Per-query search time, one query per call: each percentile is the best of ``repeats``
    passes over the queries (other work on the machine only ever slows a pass)."""

    p50_ms: float
    p99_ms: float
    n_queries: int
    repeats: int
    faiss_threads: int | None

    def as_extra(self) -> dict[str, Any]:
        return {
            "latency_queries": self.n_queries,
            "latency_repeats": self.repeats,
            "faiss_threads": self.faiss_threads,
        }


def measure_search_latency(
    index: QuantizedIndex,
    queries: np.ndarray,
    k: int = 10,
    *,
    rescore_multiplier: float | None = None,
    rescore_queries: np.ndarray | None = None,
    repeats: int = 3,
    threads: int | None = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> SearchLatency:
    """p50 / p99 milliseconds of ``index.search`` called with one query at a time, the way a
    service answers requests (query encoding into codes included).

    ``threads`` sets faiss's OpenMP threads while timing (None: as they are); one is the
    robust choice on a shared machine (see :class:`~demitasse.evaluation.efficiency.
    EfficiencyTask`). Without faiss (numpy searches) nothing is set and ``faiss_threads`` is
    None.
    """
    repeats = check_k(repeats)
    with _faiss_threads(None if threads is None else check_k(threads)) as used:
        single = [
            (queries[i : i + 1], None if rescore_queries is None else rescore_queries[i : i + 1])
            for i in range(len(queries))
        ]

        def one_pass(times: np.ndarray | None) -> None:
            for i, (query, rescore_query) in enumerate(single):
                start = clock()
                index.search(
                    query, k, rescore_multiplier=rescore_multiplier, rescore_queries=rescore_query
                )
                if times is not None:
                    times[i] = clock() - start

        one_pass(None)  # warm-up
        times = np.empty(len(single))
        best = np.full(2, math.inf)
        for _ in range(repeats):
            one_pass(times)
            best = np.minimum(best, np.percentile(times, [50, 99]))
    return SearchLatency(1000 * float(best[0]), 1000 * float(best[1]), len(single), repeats, used)


@contextmanager
def _faiss_threads(threads: int | None) -> Iterator[int | None]:
    """faiss's OpenMP threads set to ``threads`` inside the block (None: left as they are),
    and restored after it; yields the threads faiss searches with (None without faiss)."""
    faiss = faiss_or_none()
    if faiss is None:
        yield None
        return
    previous = faiss.omp_get_max_threads()
    if threads is not None:
        faiss.omp_set_num_threads(threads)
    try:
        yield int(faiss.omp_get_max_threads())
    finally:
        faiss.omp_set_num_threads(previous)
