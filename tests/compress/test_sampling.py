# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Reservoir sampling: uniform, seeded, and independent of how the stream is cut."""

from __future__ import annotations

import numpy as np
import pytest

from demitasse.compress.sampling import Reservoir, row_keys
from demitasse.compress.shards import sample_shards
from demitasse.errors import CompressorError, DataError
from tests.compress.shard_files import write_shards


def _stream(n: int = 1000, d: int = 3) -> np.ndarray:
    # Row i is (i, i, ...): a sampled row names its position.
    return np.repeat(np.arange(n, dtype=np.float32)[:, None], d, axis=1)


def _sample(X: np.ndarray, size: int, seed: int, cuts: list[int]) -> np.ndarray:
    reservoir = Reservoir(size, seed)
    for part in np.split(X, cuts):
        reservoir.update(part)
    return reservoir.sample


def test_sample_is_seeded_and_independent_of_batch_boundaries():
    X = _stream()
    reference = _sample(X, 50, seed=7, cuts=[])
    assert reference.shape == (50, 3)
    assert len(np.unique(reference[:, 0])) == 50  # without replacement
    assert np.all(np.diff(reference[:, 0]) > 0)  # in stream order
    for cuts in ([1], [10, 11, 12, 500], list(range(1, 1000, 37)), [999]):
        np.testing.assert_array_equal(_sample(X, 50, seed=7, cuts=cuts), reference)
    assert not np.array_equal(_sample(X, 50, seed=8, cuts=[]), reference)


def test_a_sample_larger_than_the_stream_is_the_whole_stream():
    X = _stream(n=30)
    reservoir = Reservoir(100, seed=1).update(X[:12]).update(X[12:])
    np.testing.assert_array_equal(reservoir.sample, X)
    np.testing.assert_array_equal(reservoir.positions, np.arange(30))
    assert reservoir.seen == 30


def test_every_row_is_drawn_equally_often_over_many_seeds():
    # 10 rows, samples of 3, 4000 seeds: each row's inclusion frequency is 0.3 with a standard
    # deviation of sqrt(0.3·0.7/4000) ≈ 0.0072; ±0.04 is 5.5 of them. Pairs: 3·2/(10·9) = 1/15.
    n, size, seeds = 10, 3, 4000
    X = _stream(n=n, d=1)
    counts = np.zeros(n)
    pairs = np.zeros((n, n))
    for seed in range(seeds):
        picked = _sample(X, size, seed, cuts=[seed % n])[:, 0].astype(int)
        counts[picked] += 1
        pairs[np.ix_(picked, picked)] += 1
    assert np.all(np.abs(counts / seeds - size / n) < 0.04), counts / seeds
    off_diagonal = pairs[~np.eye(n, dtype=bool)] / seeds
    assert np.all(np.abs(off_diagonal - 1 / 15) < 0.03), off_diagonal


def test_keys_look_uniform():
    keys = row_keys(3, 0, 100_000).astype(np.float64) / 2.0**64
    histogram = np.histogram(keys, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(histogram - 10_000) < 500)  # sd 95
    np.testing.assert_array_equal(row_keys(3, 40, 10), row_keys(3, 0, 50)[40:])


def test_sample_of_shards_is_the_same_however_the_rows_are_sharded(tmp_path):
    X = _stream(n=700, d=4)
    write_shards(tmp_path / "a", X, [100, 350])
    write_shards(tmp_path / "b", X, [1, 2, 3, 600])
    one = sample_shards(str(tmp_path / "a" / "*.parquet"), 40, seed=5, batch_rows=64)
    other = sample_shards(tmp_path / "b", 40, seed=5, batch_rows=1000)
    np.testing.assert_array_equal(one, other)
    np.testing.assert_array_equal(one, _sample(X, 40, seed=5, cuts=[]))


def test_bad_reservoirs_fail_in_one_line():
    with pytest.raises(CompressorError, match="positive integer"):
        Reservoir(0)
    with pytest.raises(CompressorError, match="non-negative"):
        Reservoir(3, seed=-1)
    with pytest.raises(DataError, match="4 dimensions, but earlier ones have 3"):
        Reservoir(3).update(np.ones((2, 3))).update(np.ones((2, 4)))
    with pytest.raises(DataError, match="seen no vectors"):
        _ = Reservoir(3).sample
