# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""A seeded uniform sample of a stream of vectors too large to hold: reservoir sampling.

:class:`Reservoir` keeps ``size`` rows drawn uniformly without replacement from every row fed
to it, in one pass and O(size) memory. It is reservoir sampling with random keys (the
equal-weight case of Efraimidis & Spirakis' A-Res, which gives the same distribution as
Vitter's Algorithm R): row ``i`` of the stream gets the key ``hash(seed, i)``, and the sample
is the ``size`` rows with the smallest keys. The key depends only on the seed and on the row's
position in the whole stream, so the sample is the same however the stream is cut into shards
or batches (Algorithm R's coin flips, drawn one by one from a generator, would be too; keys
also let a batch be handled in one vectorised step, and two reservoirs of disjoint position
ranges be merged).
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np

from demitasse.arrays import as_matrix, is_int
from demitasse.errors import DataError, ParameterError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 whose outputs for consecutive inputs
    look independent and uniform (it is how Java's SplittableRandom draws numbers)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def row_keys(seed: int, first: int, n: int) -> np.ndarray:
    """uint64 random keys of stream rows ``first .. first+n-1`` for ``seed``."""
    seed_key = _mix(np.array([seed % 2**64], dtype=np.uint64))[0]
    positions = np.arange(first, first + n, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps around, as SplitMix64 intends
        return _mix((positions + np.uint64(1)) * _GOLDEN + seed_key)


class Reservoir:
    """A uniform sample without replacement of ``size`` rows of everything passed to
    :meth:`update`, the same for a seed whatever the batch boundaries.

    Attributes:
        seen: number of rows passed so far.
        sample: float32 [min(size, seen), d], the sampled rows in stream order.
        positions: int64, each sampled row's position in the stream.
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        if not is_int(size) or size < 1:
            raise ParameterError(f"sample size must be a positive integer, got {size!r}")
        if not is_int(seed) or seed < 0:
            raise ParameterError(f"seed must be a non-negative integer, got {seed!r}")
        self.size = int(size)
        self.seed = int(seed)
        self.seen = 0
        self._keys = np.zeros(0, dtype=np.uint64)
        self._positions = np.zeros(0, dtype=np.int64)
        self._rows: np.ndarray | None = None

    def update(self, X: Any) -> Self:
        """Offer the next rows of the stream, ``X`` [m, d]; they are kept as float32."""
        X = as_matrix(X)
        m = X.shape[0]
        if self._rows is not None and X.shape[1] != self._rows.shape[1]:
            raise DataError(
                f"vectors have {X.shape[1]} dimensions, but earlier ones have {self._rows.shape[1]}"
            )
        keys = row_keys(self.seed, self.seen, m)
        positions = np.arange(self.seen, self.seen + m, dtype=np.int64)
        self.seen += m
        if self._rows is None:
            self._rows = np.zeros((0, X.shape[1]), dtype=np.float32)
        if len(self._keys) == self.size:
            # Once full, only rows whose key beats the largest kept key can enter: after n
            # rows that is about size·m/n of a batch, so late batches cost little.
            wanted = np.flatnonzero(keys < self._keys.max())
            keys, positions, X = keys[wanted], positions[wanted], X[wanted]
        if len(keys):
            self._keep_smallest(keys, positions, np.asarray(X, dtype=np.float32))
        return self

    def _keep_smallest(self, keys: np.ndarray, positions: np.ndarray, rows: np.ndarray) -> None:
        assert self._rows is not None
        keys = np.concatenate([self._keys, keys])
        positions = np.concatenate([self._positions, positions])
        if len(keys) > self.size:
            # Keys tie with probability ~n²/2⁶⁴; the position breaks a tie deterministically.
            keep = np.lexsort((positions, keys))[: self.size]
            keep.sort()
        else:
            keep = np.arange(len(keys))
        rows = np.concatenate([self._rows, rows])
        self._keys, self._positions, self._rows = keys[keep], positions[keep], rows[keep]

    @property
    def sample(self) -> np.ndarray:
        """The sampled rows, ordered by their position in the stream."""
        if self._rows is None:
            raise DataError("the reservoir has seen no vectors")
        order = np.argsort(self._positions, kind="stable")
        return self._rows[order]

    @property
    def positions(self) -> np.ndarray:
        """Stream positions of :attr:`sample`'s rows, ascending."""
        return np.sort(self._positions)

    def __repr__(self) -> str:
        return f"Reservoir(size={self.size}, seed={self.seed}, seen={self.seen})"
