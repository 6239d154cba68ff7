"""Independent jobs (fits, scorings) in forked worker processes with a set thread budget."""

from __future__ import annotations

import itertools
import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

J = TypeVar("J")
R = TypeVar("R")

# What the workers run, keyed by call: set before the fork, so every worker inherits the
# function (a closure is fine) and its jobs, and only job indices and results are pickled.
_SHARED: dict[int, tuple[Callable[[Any], Any], Sequence[Any]]] = {}
_CALLS = itertools.count()


def run_in_workers(
    function: Callable[[J], R], jobs: Sequence[J], *, workers: int, threads: int | None = 1
) -> Iterator[R]:
    """Yield ``function(job)`` for every job, in the order the jobs finish.

    With ``workers`` > 1 the jobs run in that many forked processes: they share what the
    caller loaded (embeddings, an encoder) without copying it. Each worker sets torch to
    ``threads`` threads before its first job (None: torch's default). Leave it at one per
    worker unless the cores outnumber the workers: two processes with two threads each on
    two cores run 3 to 40 times slower than with one thread each. With ``workers`` <= 1 the
    jobs run here, one after another, under the caller's own thread settings.
    """
    if workers <= 1:
        yield from map(function, jobs)
        return
    if not jobs:
        return
    call = next(_CALLS)
    _SHARED[call] = (function, jobs)
    try:
        pool = _start_pool(min(workers, len(jobs)), threads)
        try:
            yield from pool.imap_unordered(_run_shared, [(call, i) for i in range(len(jobs))])
        except BaseException:  # an error or an abandoned generator: stop the workers now
            pool.terminate()
            raise
        else:  # every job done: the workers exit on the pool's sentinel, no signal needed
            pool.close()
        finally:
            pool.join()
    finally:
        del _SHARED[call]


_STOPPING = {signal.SIGTERM, signal.SIGINT}


def _start_pool(workers: int, threads: int | None) -> Any:
    # A forked worker inherits the parent's Python signal handlers until _limit_threads puts
    # the defaults back; a SIGTERM from Pool.terminate in that window went to the inherited
    # handler, which may note it and carry on, and the worker then waited for tasks forever.
    # Held across the fork, the signal waits until the worker can die of it.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    try:
        context = multiprocessing.get_context("fork")
        return context.Pool(workers, _limit_threads, (threads,))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _limit_threads(threads: int | None) -> None:
    # A forked worker inherits the parent's signal dispositions; a parent that ignores SIGTERM
    # (the CLI does once its work is done) would leave workers that Pool.terminate cannot stop.
    for signum in _STOPPING:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)
    if threads is not None:
        import torch  # only here: a numpy-only job must not pay for importing torch

        torch.set_num_threads(threads)


def _run_shared(task: tuple[int, int]) -> Any:
    call, index = task
    function, jobs = _SHARED[call]
    return function(jobs[index])
