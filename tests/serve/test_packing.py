"""A served batch is encoded without padding: packed in one pass where the model reproduces its
padded vectors that way (BERT), else in passes of similar length (MPNet), the same vectors."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from demitasse.encoders import TransformerEncoder
from demitasse.encoders.packing import pack_rows, packed_batch, unpack
from demitasse.serve import load_served_model
from demitasse.serve.batching import EncoderWorker, length_groups
from tests.helpers import build_tiny_model
from tests.serve.servers import cosines, sentences


def test_rows_hold_every_text_once_within_the_width_and_no_more_rows_than_needed() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 16, 33, 128):
        lengths = rng.integers(3, 45, size=n).tolist()
        rows = pack_rows(lengths, 128)
        assert sorted(i for row in rows for i in row) == list(range(n))
        assert len(rows) == -(-sum(lengths) // 128)
        widths = [sum(lengths[i] for i in row) for row in rows]
        assert max(widths) <= 128 + max(lengths)
    assert pack_rows([300, 5, 5], 128) == [[0], [1, 2]]  # too long for a row: alone
    assert pack_rows([], 128) == []


def test_each_packed_token_sees_only_its_own_text_from_position_0() -> None:
    ids = [[101, 7, 8, 102], [101, 9, 102], [101, 5, 6, 4, 102]]
    batch = packed_batch(ids, [[2, 1], [0]], pad_id=0)
    assert batch.input_ids.tolist() == [
        [101, 5, 6, 4, 102, 101, 9, 102],
        [101, 7, 8, 102, 0, 0, 0, 0],
    ]
    assert batch.position_ids[0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    visible = batch.attention_mask[0, 0] == 0
    assert visible[:5, :5].all() and visible[5:, 5:].all()
    assert not visible[:5, 5:].any() and not visible[5:, :5].any()
    padding = batch.attention_mask[1, 0, 4:] == 0
    assert padding.sum().item() == 4 and padding[:, 4:].diagonal().all()  # each sees itself
    hidden = torch.arange(2 * 8, dtype=torch.float32).reshape(2, 8, 1)
    own = unpack(hidden, batch)[..., 0]
    assert own[1].tolist() == [5, 6, 7, 0, 0]  # text 1 lies at 5..7 of row 0
    assert own[0].tolist() == [8, 9, 10, 11, 0] and batch.token_mask[0].tolist() == [1] * 4 + [0]


@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "lasttoken"])
def test_packed_vectors_equal_padded_ones_for_bert(tiny_encoder_dir: Path, pooling: str) -> None:
    encoder = TransformerEncoder(tiny_encoder_dir, pooling=pooling, cache=False)
    texts = sentences(37, seed=11)
    assert encoder.packing_matches()
    # A cut layer runs only its blocks; rows of 8 tokens hold a text each: 37 rows, 2 passes.
    for layer, max_tokens in ((2, 16), (None, 16), (None, 8)):
        packed = encoder.encode_packed(texts, layer=layer, max_tokens=max_tokens)
        assert cosines(packed, encoder.encode(texts, layer=layer)).min() >= 0.99999
    assert encoder.encode_packed([]).shape == (0, encoder.dim)


@pytest.fixture(scope="module")
def mpnet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("serve-mpnet"), architecture="mpnet")


def test_mpnet_fails_the_check_and_is_served_in_length_groups(mpnet_dir: Path) -> None:
    # MPNet counts positions from its padding id + 1: packed from 0, its vectors would differ.
    model = load_served_model(mpnet_dir)
    assert not model.load_encoder().packing_matches()  # type: ignore[attr-defined]
    worker = EncoderWorker(model, max_wait_ms=50)
    assert not worker.packing
    texts = [" ".join(["word"] * n) for n in (2, 30, 3, 28, 2, 31, 4)]
    futures = worker.submit(texts, None, "float32")
    worker.start()
    try:
        served = np.concatenate([future.result(timeout=60)[0] for future in futures])
    finally:
        worker.stop()
    assert cosines(served, model.encode(texts)).min() >= 0.99999
    assert worker.stats.batches == 1 and worker.stats.passes == 2  # short ones, long ones


def test_a_bert_batch_is_one_packed_pass(model_dir: Path) -> None:
    model = load_served_model(model_dir)
    worker = EncoderWorker(model, max_wait_ms=50)
    assert worker.packing
    futures = [worker.submit([text], None, "float32") for text in sentences(12, seed=2)]
    worker.start()
    try:
        for future in futures:
            future[0].result(timeout=60)
    finally:
        worker.stop()
    assert (worker.stats.batches, worker.stats.passes, worker.stats.texts) == (1, 1, 12)


def _cost(groups: list[list[int]], lengths: list[int], pass_cost: float) -> float:
    return sum(pass_cost + len(group) * max(lengths[i] for i in group) for group in groups)


def test_length_groups_are_the_cheapest_split() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        lengths = rng.integers(2, 50, size=int(rng.integers(1, 8))).tolist()
        groups = length_groups(lengths, 30.0)
        assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        best = min(  # every split of the sorted texts into contiguous passes
            _cost([order[a:b] for a, b in itertools.pairwise([0, *cuts, len(order)])], lengths, 30)
            for k in range(len(order))
            for cuts in itertools.combinations(range(1, len(order)), k)
        )
        assert _cost(groups, lengths, 30.0) == pytest.approx(best)
    assert length_groups([5, 40, 6], float("inf")) == [[0, 1, 2]]  # one pass, in order
