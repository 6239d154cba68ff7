# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Measured efficiency: encode and transform throughput, index size and search latency.

Every figure is timed, never estimated: a warm-up run first, then the best (fastest) of
``repeats`` runs, because on a shared machine other work only ever makes a run slower; runs
being compared (layer cuts, dims) are interleaved so a burst of other work hits them alike. Each
record carries the machine and, in ``extra``, the torch and faiss thread counts it ran with.

* :func:`measure_encode_throughput`: sentences/s of an encoder per layer cut (a cut at layer
  ``L`` runs only ``L`` blocks, so its speed is what the cut model would deliver).
* :func:`measure_transform_throughput`: vectors/s of a fitted compressor per output dim.
* :class:`EfficiencyTask`: a :class:`~demitasse.evaluation.tasks.Task` for ``evaluate_grid``
  that builds an exact faiss index over a corpus's codes and reports per-query latency
  (p50/p99), batch throughput and index size for every dim × precision of the grid.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np

from demitasse.compress import (
    BinaryQuantizer,
    Compressor,
    Float32Quantizer,
    Int8Quantizer,
    Quantizer,
)
from demitasse.encoders.base import Encoder
from demitasse.errors import DataError, DemitasseError
from demitasse.evaluation.records import ResultRecord, machine_description
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task

logger = logging.getLogger(__name__)

TASK = "efficiency"
Clock = Callable[[], float]
# A rate from a zero duration (only a fake or very coarse clock gives one) would be infinite.
_MIN_SECONDS = 1e-9


@dataclass(frozen=True)
class Timing:
    """Durations in seconds of the timed runs (the warm-up excluded)."""

    times: tuple[float, ...]

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return float(np.median(self.times))


def time_interleaved(
    runs: Sequence[Callable[[], object]],
    *,
    repeats: int = 5,
    warmup: int = 1,
    clock: Clock = time.perf_counter,
) -> list[Timing]:
    """Time several runs round-robin: ``warmup`` untimed rounds, then ``repeats`` timed ones.

    Interleaving spreads a burst of other work on the machine over all runs instead of
    spoiling every repetition of whichever run it coincided with.
    """
    _check_positive(repeats, "repeats")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise DemitasseError(f"warmup must be a non-negative integer, got {warmup!r}")
    for _ in range(warmup):
        for run in runs:
            run()
    times: list[list[float]] = [[] for _ in runs]
    for round_ in range(repeats):
        for run, spent in zip(runs, times, strict=True):
            start = clock()
            run()
            spent.append(clock() - start)
        logger.info("timed round %d/%d", round_ + 1, repeats)
    return [Timing(tuple(spent)) for spent in times]


def time_runs(
    run: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    clock: Clock = time.perf_counter,
) -> Timing:
    """Call ``run`` ``warmup`` times untimed, then ``repeats`` times timed with ``clock``."""
    return time_interleaved([run], repeats=repeats, warmup=warmup, clock=clock)[0]


def best_of(
    run: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    clock: Clock = time.perf_counter,
) -> float:
    """Fastest of ``repeats`` timed calls of ``run`` after ``warmup`` untimed ones, in seconds."""
    return time_runs(run, repeats=repeats, warmup=warmup, clock=clock).best


def _check_positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DemitasseError(f"{what} must be a positive integer, got {value!r}")
    return value


def _load_1m() -> float | None:
    """The 1-minute load average: how busy the machine was around a measurement."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _faiss() -> Any:  # faiss has no type stubs
    try:
        import faiss
    except ImportError:
        raise DemitasseError(
            "search efficiency needs faiss: pip install 'demitasse[eval]' (faiss-cpu)"
        ) from None
    return faiss


def thread_counts() -> dict[str, int | None]:
    """Threads torch and faiss compute with (None where the library is not installed)."""
    counts: dict[str, int | None] = {"torch_threads": None, "faiss_threads": None}
    try:
        import torch

        counts["torch_threads"] = int(torch.get_num_threads())
    except ImportError:
        pass
    try:
        import faiss

        counts["faiss_threads"] = int(faiss.omp_get_max_threads())
    except ImportError:
        pass
    return counts


def _cpu_model() -> str:
    # machine_description() is "<cpu>, <n> cores, <n> threads, <os> <arch>"; the CPU name may
    # itself contain commas, so split from the right.
    return machine_description().rsplit(", ", 3)[0]


def efficiency_context() -> dict[str, Any]:
    """What the timings depend on: CPU, cores, library versions and every thread pool."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    context: dict[str, Any] = {
        "machine": machine_description(),
        "cpu": _cpu_model(),
        "cores": cores,
        **thread_counts(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        # Other work on the machine slows every timing: the load says how much there was.
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    for module in ("torch", "faiss"):
        try:
            context[module] = __import__(module).__version__
        except ImportError:
            context[module] = None
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # type: ignore[index]
        context["numpy_blas"] = {k: blas.get(k) for k in ("name", "version")}
    except (TypeError, KeyError, AttributeError):
        context["numpy_blas"] = None
    try:
        from threadpoolctl import threadpool_info

        context["thread_pools"] = [
            {k: pool.get(k) for k in ("user_api", "internal_api", "prefix", "version")}
            | {"num_threads": pool.get("num_threads")}
            for pool in threadpool_info()
        ]
    except ImportError:
        context["thread_pools"] = None
    return context


# ---- encoders and compressors ------------------------------------------------------------------


def measure_encode_throughput(
    encoder: Encoder,
    texts: Sequence[str],
    layers: Sequence[int] | None = None,
    repeats: int = 5,
    batch_size: int = 64,
    *,
    clock: Clock = time.perf_counter,
) -> list[ResultRecord]:
    """Sentences per second of ``encoder.encode(texts, layer=L)`` for each layer cut ``L``.

    Texts are de-duplicated first (the encoder would encode a repeat only once). The encoder
    must not read an embedding cache: load it with ``load_encoder(name, cache=False)``.
    """
    if isinstance(texts, str):
        raise DataError("measure_encode_throughput expects a list of texts, not a single string")
    unique = list(dict.fromkeys(str(t) for t in texts))
    if not unique:
        raise DataError("no texts to measure encoding throughput on")
    if getattr(encoder, "_cache", None) is not None:
        raise DemitasseError(
            f"{encoder.name} reads embeddings from its disk cache, so timings would measure the "
            "cache; load it with cache=False"
        )
    _check_positive(batch_size, "batch_size")
    _check_positive(repeats, "repeats")
    cuts = list(range(1, encoder.num_layers + 1)) if layers is None else list(layers)
    # One pass through the whole model first. Besides warming up, transformers >= 5 attaches
    # its hidden-state hooks to the blocks present on the first forward call, and a layer cut
    # removes blocks: a cut first would leave the deeper layers unrecorded for good.
    encoder.encode(unique[:batch_size], layer=encoder.num_layers, batch_size=batch_size)
    timings = time_interleaved(
        [partial(encoder.encode, unique, layer=layer, batch_size=batch_size) for layer in cuts],
        repeats=repeats,
        clock=clock,
    )
    extra: dict[str, Any] = {"n_texts": len(unique), "batch_size": batch_size, "repeats": repeats}
    extra |= {**thread_counts(), "load_1m": _load_1m()}
    records = []
    for layer, timing in zip(cuts, timings, strict=True):
        rate = len(unique) / max(timing.best, _MIN_SECONDS)
        records.append(
            ResultRecord(
                model=encoder.name,
                layer=layer,
                method="none",
                dim=encoder.dim,
                precision="float32",
                task=TASK,
                dataset="encode",
                metric="sentences_per_s",
                score=rate,
                bytes_per_vector=4 * encoder.dim,
                extra={**extra, "best_s": timing.best, "median_s": timing.median},
            )
        )
        logger.info("encode layer %d: %.0f sentences/s (best of %d)", layer, rate, repeats)
    return records


def measure_transform_throughput(
    compressor: Compressor,
    X: np.ndarray,
    dims: Sequence[int],
    *,
    label: str,
    model: str,
    layer: int | None,
    repeats: int = 5,
    clock: Clock = time.perf_counter,
) -> list[ResultRecord]:
    """Vectors per second of ``compressor.transform(X, dim=d)`` for each ``d`` in ``dims``."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] == 0:
        raise DataError(f"X must be a non-empty 2-D array of embeddings, got shape {X.shape}")
    _check_positive(repeats, "repeats")
    timings = time_interleaved(
        [partial(compressor.transform, X, dim=dim) for dim in dims],
        repeats=repeats,
        clock=clock,
    )
    threads = thread_counts()
    records = []
    for dim, timing in zip(dims, timings, strict=True):
        records.append(
            ResultRecord(
                model=model,
                layer=layer,
                method=label,
                dim=int(dim),
                precision="float32",
                task=TASK,
                dataset="transform",
                metric="vectors_per_s",
                score=X.shape[0] / max(timing.best, _MIN_SECONDS),
                bytes_per_vector=4 * int(dim),
                fit_data=getattr(compressor, "fit_data_", None),
                extra={
                    "n_vectors": int(X.shape[0]),
                    "input_dim": int(X.shape[1]),
                    "repeats": repeats,
                    **threads,
                    "load_1m": _load_1m(),
                    "best_s": timing.best,
                    "median_s": timing.median,
                },
            )
        )
    return records


# ---- search ------------------------------------------------------------------------------------


def _unit_rows(X: np.ndarray) -> np.ndarray:
    """float32 rows scaled to unit length (zero rows stay zero), so inner product = cosine."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)


@dataclass(frozen=True)
class _SearchIndex:
    index: Any
    queries: np.ndarray
    index_bytes: int
    kind: str
    serialized_bytes: int


def _build_index(
    quantizer: Quantizer, corpus_codes: np.ndarray, query_codes: np.ndarray
) -> _SearchIndex:
    """The exact faiss index a deployment of ``quantizer``'s codes would search, and its size."""
    faiss = _faiss()
    if isinstance(quantizer, BinaryQuantizer):
        # Packed bits; padding bits are 0 in every code, so Hamming distances are exact.
        corpus = np.ascontiguousarray(corpus_codes, dtype=np.uint8)
        index = faiss.IndexBinaryFlat(8 * corpus.shape[1])
        index.add(corpus)
        size = len(faiss.serialize_index_binary(index))
        queries = np.ascontiguousarray(query_codes, dtype=np.uint8)
        return _SearchIndex(index, queries, size, "IndexBinaryFlat", size)
    if not isinstance(quantizer, Float32Quantizer | Int8Quantizer):
        raise DemitasseError(f"no search index for precision {quantizer.precision!r}")
    index = faiss.IndexFlatIP(corpus_codes.shape[1])
    index.add(_unit_rows(corpus_codes))
    size = len(faiss.serialize_index(index))
    if isinstance(quantizer, Int8Quantizer):
        # faiss has no flat index scoring the cosine of int8 codes, so a float32 index over
        # the normalised codes stands in for search (same ranking); the storage reported is
        # what an int8 index holds: the codes themselves.
        return _SearchIndex(
            index, _unit_rows(query_codes), int(corpus_codes.nbytes), "IndexFlatIP (stand-in)", size
        )
    return _SearchIndex(index, _unit_rows(query_codes), size, "IndexFlatIP", size)


class EfficiencyTask(Task):
    """Exact-search latency, throughput and index size of a corpus at each dim × precision.

    The corpus codes go into an exact faiss index: ``IndexFlatIP`` on unit vectors for
    float32, ``IndexBinaryFlat`` on the packed bits for binary. For int8 the search runs on an
    ``IndexFlatIP`` over the normalised codes (faiss has no flat cosine-of-int8 index; the
    ranking is the int8 one), so int8 latency is that stand-in's, while ``index_bytes`` is the
    int8 storage, n × d (the stand-in's size is in ``extra["serialized_index_bytes"]``).

    Scores (dataset ``name``): ``latency_p50_ms`` / ``latency_p99_ms`` (one query at a time;
    percentiles of a pass over all queries, best pass of ``repeats``), ``queries_per_s`` (all
    queries in one call, best of ``repeats``) and ``index_bytes`` (the serialised faiss index;
    for int8 the codes' bytes, see above).

    ``threads`` sets faiss's OpenMP threads while measuring (None: leave faiss's setting). On
    a busy machine one thread is the robust choice: a one-query binary search that fans out
    over two threads waits for a time slice of the second (measured: 24 ms instead of 0.02 ms
    per query on two shared cores).
    """

    name: ClassVar[str] = TASK

    def __init__(
        self,
        corpus: Sequence[str],
        queries: Sequence[str],
        k: int = 10,
        repeats: int = 5,
        name: str = "search",
        *,
        threads: int | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        if isinstance(corpus, str) or isinstance(queries, str):
            raise DataError("EfficiencyTask expects lists of texts, not a single string")
        self.corpus = [str(t) for t in corpus]
        self.queries = [str(t) for t in queries]
        if not self.corpus:
            raise DataError("EfficiencyTask needs a non-empty corpus")
        if not self.queries:
            raise DataError("EfficiencyTask needs at least one query")
        self.k = _check_positive(k, "k")
        self.repeats = _check_positive(repeats, "repeats")
        self.dataset = name
        self.threads = None if threads is None else _check_positive(threads, "threads")
        self.clock = clock

    def texts(self) -> list[str]:
        return [*self.corpus, *self.queries]

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        faiss = _faiss()
        previous = faiss.omp_get_max_threads()
        if self.threads is not None:
            faiss.omp_set_num_threads(self.threads)
        try:
            return self._measure(embedded)
        finally:
            faiss.omp_set_num_threads(previous)

    def _measure(self, embedded: EmbeddedTexts) -> list[Score]:
        built = _build_index(
            embedded.quantizer, embedded.codes_of(self.corpus), embedded.codes_of(self.queries)
        )
        index, queries = built.index, built.queries
        k = min(self.k, len(self.corpus))
        p50, p99 = self._latency_percentiles(index, queries, k)
        batch = time_runs(lambda: index.search(queries, k), repeats=self.repeats, clock=self.clock)
        extra = {
            "n_corpus": len(self.corpus),
            "n_queries": len(self.queries),
            "k": k,
            "repeats": self.repeats,
            "index": built.kind,
            "serialized_index_bytes": built.serialized_bytes,
            **thread_counts(),
            "load_1m": _load_1m(),
        }
        return [
            Score(self.dataset, "latency_p50_ms", 1000.0 * float(p50), dict(extra)),
            Score(self.dataset, "latency_p99_ms", 1000.0 * float(p99), dict(extra)),
            Score(
                self.dataset,
                "queries_per_s",
                len(self.queries) / max(batch.best, _MIN_SECONDS),
                {**extra, "best_s": batch.best, "median_s": batch.median},
            ),
            Score(self.dataset, "index_bytes", float(built.index_bytes), dict(extra)),
        ]

    def _latency_percentiles(self, index: Any, queries: np.ndarray, k: int) -> np.ndarray:
        """p50 and p99 seconds of one-at-a-time search, each the best over ``repeats`` passes.

        Percentiles are taken within a pass (so p99 keeps the pass's real tail), then the
        fastest pass wins per percentile: other work on the machine only ever slows a pass.
        """
        single = [queries[i : i + 1] for i in range(queries.shape[0])]  # sliced outside timing
        for query in single:  # warm-up pass
            index.search(query, k)
        times = np.empty(len(single))
        best = np.full(2, math.inf)
        clock = self.clock
        for _ in range(self.repeats):
            for i, query in enumerate(single):
                start = clock()
                index.search(query, k)
                times[i] = clock() - start
            best = np.minimum(best, np.percentile(times, [50, 99]))
        return best
