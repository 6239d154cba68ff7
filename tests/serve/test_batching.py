"""The encoder thread gathers concurrent requests into one encoder call, bounded in texts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demitasse.model import CompressedModel
from demitasse.serve import load_served_model
from demitasse.serve.batching import EncoderWorker
from tests.serve.servers import cosines, sentences


@pytest.fixture(scope="module")
def model(model_dir: Path) -> CompressedModel:
    return load_served_model(model_dir)


def _run(worker: EncoderWorker, requests: list[list[str]], dim: int | None = None) -> list:
    futures = [worker.submit(texts, dim, "float32") for texts in requests]  # queued first
    worker.start()
    try:
        return [[future.result(timeout=60) for future in chunks] for chunks in futures]
    finally:
        worker.stop()


def test_queued_requests_share_one_encoder_call(model: CompressedModel) -> None:
    requests = [[text] for text in sentences(20, seed=3)]
    worker = EncoderWorker(model, max_batch=128, max_wait_ms=50)
    results = _run(worker, requests, dim=8)
    assert (worker.stats.batches, worker.stats.texts) == (1, 20)
    served = np.concatenate([rows for chunks in results for rows, _ in chunks])
    assert (
        cosines(served, model.encode([r[0] for r in requests], dim=8, precision="float32")).min()
        >= 0.99999
    )


def test_without_batching_each_request_is_its_own_call(model: CompressedModel) -> None:
    worker = EncoderWorker(model, batching=False)
    _run(worker, [[text] for text in sentences(20, seed=3)])
    assert worker.stats.batches == 20


def test_a_batch_never_exceeds_max_batch_texts(model: CompressedModel) -> None:
    worker = EncoderWorker(model, max_batch=16, max_wait_ms=50)
    results = _run(worker, [sentences(40, seed=4), sentences(10, seed=5)])
    assert [len(chunks) for chunks in results] == [3, 1]  # 16 + 16 + 8, then 10
    assert [len(rows) for rows, _ in results[0]] == [16, 16, 8]
    # 8 + 10 > 16: the second request waits for the next call rather than overfill one.
    assert worker.stats.batches == 4 and worker.stats.texts == 50


def test_a_failing_request_leaves_the_others_and_the_thread_alive(model: CompressedModel) -> None:
    worker = EncoderWorker(model, max_wait_ms=50)
    good = worker.submit(["a dog"], None, "float32")
    bad = worker.submit(["a cat"], 99, "float32")  # a width the model lacks
    worker.start()
    try:
        assert good[0].result(timeout=60)[0].shape == (1, 16)
        with pytest.raises(ValueError, match="dim 99"):
            bad[0].result(timeout=60)
        assert worker.submit(["a bird"], 4, "int8")[0].result(timeout=60)[0].dtype == np.int8
    finally:
        worker.stop()


def test_a_cancelled_request_is_left_out(model: CompressedModel) -> None:
    worker = EncoderWorker(model, max_wait_ms=50)
    gone = worker.submit(["a dog", "a cat"], None, "float32")
    kept = worker.submit(["a bird"], None, "float32")
    assert gone[0].cancel()
    worker.start()
    try:
        assert kept[0].result(timeout=60)[0].shape == (1, 16)
    finally:
        worker.stop()
    assert worker.stats.texts == 1
