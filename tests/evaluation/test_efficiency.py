# ruff: noqa: N806  (scikit-learn convention: matrices are capitalised)
"""Measured efficiency: best-of-N timing, throughput records and the search-latency task."""

from __future__ import annotations

import math

import numpy as np
import pytest

from demitasse.cli.specs import parse_compressor_specs
from demitasse.compress import make_compressor, make_quantizer
from demitasse.errors import DataError, DemitasseError
from demitasse.evaluation.efficiency import (
    EfficiencyTask,
    best_of,
    efficiency_context,
    measure_encode_throughput,
    measure_transform_throughput,
    time_interleaved,
    time_runs,
)
from demitasse.evaluation.grid import evaluate_grid
from demitasse.evaluation.tasks import EmbeddedTexts
from demitasse.loading import load_encoder
from tests.helpers import FakeEncoder, build_tiny_model

pytest.importorskip("faiss")

TEXTS = [f"the man is playing guitar {i}" for i in range(12)] + ["a dog sits on the mat ."]
RECORD_KEYS = {"model", "layer", "method", "dim", "precision", "task", "dataset", "metric"}
SEARCH_METRICS = {"latency_p50_ms", "latency_p99_ms", "queries_per_s", "index_bytes"}


class FakeClock:
    """Each timed run (a pair of calls) lasts the next of ``durations``, cycling."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = durations
        self.now = 100.0
        self.calls = 0

    def __call__(self) -> float:
        if self.calls % 2:
            self.now += self.durations[(self.calls // 2) % len(self.durations)]
        self.calls += 1
        return self.now


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=3)


def test_best_of_picks_the_fastest_run_after_an_untimed_warmup():
    calls = []
    clock = FakeClock([3.0, 1.0, 2.0])
    best = best_of(lambda: calls.append(1), repeats=3, warmup=2, clock=clock)
    assert best == 1.0
    assert len(calls) == 5  # 2 warm-up + 3 timed
    assert clock.calls == 6  # the warm-up runs are not timed
    timing = time_runs(lambda: None, repeats=3, clock=FakeClock([3.0, 1.0, 2.0]))
    assert timing.times == (3.0, 1.0, 2.0)
    assert timing.best == 1.0
    assert timing.median == 2.0


def test_interleaved_timing_runs_round_robin_and_keeps_each_runs_times():
    order = []
    timings = time_interleaved(
        [lambda: order.append("a"), lambda: order.append("b")],
        repeats=2,
        warmup=1,
        clock=FakeClock([1.0, 2.0, 3.0, 4.0]),
    )
    assert order == ["a", "b"] * 3
    assert [t.times for t in timings] == [(1.0, 3.0), (2.0, 4.0)]


@pytest.mark.parametrize("repeats", [0, -1, 1.5, True])
def test_bad_repeats_are_refused(repeats):
    with pytest.raises(DemitasseError, match="repeats"):
        best_of(lambda: None, repeats=repeats)


def test_encode_throughput_has_a_record_per_layer_cut(tiny_model):
    encoder = load_encoder(tiny_model, cache=False, device="cpu")
    records = measure_encode_throughput(encoder, TEXTS, layers=[1, 3], repeats=2, batch_size=4)
    assert [r.layer for r in records] == [1, 3]
    for record in records:
        assert set(record.to_dict()) >= RECORD_KEYS
        assert (record.task, record.dataset, record.metric) == (
            "efficiency",
            "encode",
            "sentences_per_s",
        )
        assert (record.method, record.precision, record.dim) == ("none", "float32", encoder.dim)
        assert record.model == encoder.name
        assert record.score > 0
        assert record.machine
        assert record.extra["n_texts"] == len(TEXTS)
        assert record.extra["batch_size"] == 4
        assert record.extra["repeats"] == 2
        assert record.extra["torch_threads"] >= 1
        assert "faiss_threads" in record.extra


def test_encode_throughput_defaults_to_every_layer_and_uses_the_best_time():
    encoder = FakeEncoder(dim=8)
    texts = [*TEXTS, *TEXTS]  # repeats are encoded once, so they are not counted
    records = measure_encode_throughput(encoder, texts, repeats=3, clock=FakeClock([4.0, 0.5, 2.0]))
    assert [r.layer for r in records] == [1, 2]
    assert all(r.score == pytest.approx(len(TEXTS) / 0.5) for r in records)
    assert all(r.extra["n_texts"] == len(TEXTS) for r in records)
    assert all(r.extra["best_s"] == 0.5 for r in records)


def test_encode_throughput_refuses_an_encoder_that_reads_its_cache(tiny_model, tmp_path):
    encoder = load_encoder(tiny_model, cache_dir=tmp_path, device="cpu")
    with pytest.raises(DemitasseError, match="cache=False"):
        measure_encode_throughput(encoder, TEXTS, repeats=1)


def test_encode_throughput_refuses_no_texts():
    with pytest.raises(DataError, match="no texts"):
        measure_encode_throughput(FakeEncoder(), [], repeats=1)


def test_transform_throughput_records_per_dim():
    X = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    pca = make_compressor("pca", dim=8).fit(X, fit_data="random")
    records = measure_transform_throughput(
        pca,
        X,
        [8, 4],
        label="pca",
        model="m",
        layer=2,
        repeats=3,
        clock=FakeClock([2.0, 0.25, 1.0]),
    )
    assert [r.dim for r in records] == [8, 4]
    for record in records:
        assert (record.task, record.dataset, record.metric) == (
            "efficiency",
            "transform",
            "vectors_per_s",
        )
        assert (record.method, record.model, record.layer) == ("pca", "m", 2)
        assert record.fit_data == "random"
        assert record.score == pytest.approx(300 / 0.25)
        assert record.extra["n_vectors"] == 300
        assert {"torch_threads", "faiss_threads"} <= set(record.extra)


def _embedded(precision: str, n: int, dim: int, seed: int = 0) -> tuple[list[str], EmbeddedTexts]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, dim)).astype(np.float32)
    texts = [f"text {i}" for i in range(n)]
    quantizer = make_quantizer(precision).fit(X)
    return texts, EmbeddedTexts(texts, quantizer.quantize(X), quantizer, dim)


@pytest.mark.parametrize("precision", ["float32", "int8", "binary"])
def test_search_task_measures_latency_and_index_size(precision):
    n_corpus, dim = 400, 20  # 20 bits pack into 3 bytes
    texts, embedded = _embedded(precision, n_corpus + 30, dim)
    task = EfficiencyTask(texts[:n_corpus], texts[n_corpus:], k=5, repeats=2)
    scores = {s.metric: s for s in task.evaluate(embedded)}
    assert set(scores) == SEARCH_METRICS
    assert all(s.dataset == "search" for s in scores.values())
    p50, p99 = scores["latency_p50_ms"].score, scores["latency_p99_ms"].score
    assert 0 < p50 <= p99
    assert scores["queries_per_s"].score > 0
    stored = n_corpus * embedded.quantizer.bytes_per_vector(dim)
    assert (
        stored
        == n_corpus * {"float32": 4 * dim, "int8": dim, "binary": math.ceil(dim / 8)}[precision]
    )
    index_bytes = scores["index_bytes"].score
    if precision == "int8":
        assert index_bytes == stored  # the codes; the float index only stands in for search
        assert scores["index_bytes"].extra["serialized_index_bytes"] > stored
    else:
        assert stored <= index_bytes <= stored + 1024  # the serialised header is small
    assert scores["latency_p50_ms"].extra["n_queries"] == 30


def test_search_task_plugs_into_the_grid():
    corpus = [f"document {i}" for i in range(60)]
    queries = [f"query {i}" for i in range(7)]
    records = evaluate_grid(
        FakeEncoder(dim=16),
        [EfficiencyTask(corpus, queries, k=3, repeats=1, name="toy")],
        specs=parse_compressor_specs("truncate"),
        dims=[16, 8],
        precisions=["float32", "int8", "binary"],
        fit_texts=[f"fit {i}" for i in range(20)],
        fit_data="toy-fit",
    )
    assert {r.task for r in records} == {"efficiency"}
    assert {r.dataset for r in records} == {"toy"}
    assert {(r.dim, r.precision) for r in records} == {
        (d, p) for d in (16, 8) for p in ("float32", "int8", "binary")
    }
    sizes = {(r.dim, r.precision): r.score for r in records if r.metric == "index_bytes"}
    assert sizes[(8, "binary")] < sizes[(8, "int8")] < sizes[(8, "float32")]


def test_search_task_refuses_empty_inputs():
    with pytest.raises(DataError, match="corpus"):
        EfficiencyTask([], ["q"])
    with pytest.raises(DataError, match="query"):
        EfficiencyTask(["d"], [])
    with pytest.raises(DemitasseError, match="k must"):
        EfficiencyTask(["d"], ["q"], k=0)


def test_efficiency_context_names_threads_and_cpu():
    context = efficiency_context()
    assert context["torch_threads"] >= 1
    assert context["faiss_threads"] >= 1
    assert context["cpu"] and context["cores"] >= 1
    assert "thread_pools" in context


def test_search_task_sets_faiss_threads_while_measuring_and_restores_them():
    import faiss

    before = faiss.omp_get_max_threads()
    texts, embedded = _embedded("binary", 60, 16)
    task = EfficiencyTask(texts[:50], texts[50:], k=3, repeats=1, threads=1)
    scores = task.evaluate(embedded)
    assert all(s.extra["faiss_threads"] == 1 for s in scores)
    assert faiss.omp_get_max_threads() == before
