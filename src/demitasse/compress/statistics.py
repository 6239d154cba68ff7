# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Mergeable first and second moments of vectors, for fitting PCA shard by shard.

A :class:`VectorStatistics` holds the count, the sum and ``XᵀX`` of the vectors it has seen,
in float64, about a fixed ``shift`` (a point near the data's mean). Statistics of different
shards :meth:`~VectorStatistics.merge` into those of their union, so a reduce step over
per-shard (or per-block, on Ray) statistics gives what one pass over everything gives, and
:meth:`demitasse.compress.PCA.fit_from_statistics` fits from them without holding any vector.

Example::

    stats = VectorStatistics()
    for shard in shards:
        stats.merge(VectorStatistics().update(shard))  # or stats.update(shard)
    stats.save("stats")
    pca = PCA(dim=256, whiten=True).fit_from_statistics(VectorStatistics.load("stats"))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

import numpy as np

from demitasse.arrays import as_matrix
from demitasse.errors import CompressorError, DataError, ParameterError, SavedStateError
from demitasse.persistence import (
    check_state_shapes,
    check_version,
    read_saved,
    require,
    write_saved,
)

KIND = "vector-statistics"
FORMAT_VERSION = 1

#: How much larger ``trace(XᵀX)`` about the shift may be than the centred scatter's trace.
#: The covariance formula ``(XᵀX - n·m·mᵀ)/(n-1)`` loses about log10(ratio) of float64's 16
#: digits to cancellation; at 1e6 ten digits are left, enough for components to agree with a
#: two-pass fit to 1e-6. Beyond it the result would be silently wrong, so it is refused.
MAX_CANCELLATION = 1e6


class VectorStatistics:
    """Count, sum and ``XᵀX`` (float64) of vectors ``x - shift``, updated and merged in place.

    ``shift`` is fixed by the first :meth:`update` (the mean of that batch) unless given. The
    covariance is computed as ``(XᵀX - n·m·mᵀ)/(n-1)`` with ``m`` the mean about the shift,
    which cancels catastrophically when the data's mean lies far from the shift compared to
    its spread (a huge common offset, e.g. all coordinates near 1e6 with unit spread, summed
    about ``shift=0``): with the default shift, taken from the data, that does not happen
    unless the first batch is very unlike the rest. :meth:`covariance` measures the
    cancellation and refuses (DataError) beyond :data:`MAX_CANCELLATION`; collect again with
    ``shift=`` an approximate mean (e.g. ``mean`` of a first pass) then.

    Attributes:
        count: number of vectors seen.
        shift: float64 [d], the point the sums are taken about (None before any data).
        sum: float64 [d], ``Σ (x - shift)``.
        gram: float64 [d, d], ``Σ (x - shift)(x - shift)ᵀ``.
    """

    def __init__(self, shift: Any = None) -> None:
        self.count = 0
        self.shift: np.ndarray | None = None
        self.sum: np.ndarray | None = None
        self.gram: np.ndarray | None = None
        if shift is not None:
            self._start(_vector(shift, "shift"))

    def _start(self, shift: np.ndarray) -> None:
        d = shift.shape[0]
        self.shift = shift
        self.sum = np.zeros(d)
        self.gram = np.zeros((d, d))

    @property
    def n_features(self) -> int | None:
        """Width of the vectors (None before any data or shift)."""
        return None if self.shift is None else int(self.shift.shape[0])

    def update(self, X: Any) -> Self:
        """Add the rows of ``X`` [n, d] (finite numbers; any float or int dtype)."""
        X = as_matrix(X)
        if X.shape[0] == 0:
            return self
        X = X.astype(np.float64, copy=False)
        if not np.isfinite(X).all():
            raise DataError("vectors hold NaN or inf; statistics need finite values")
        if self.shift is None:
            self._start(X.mean(axis=0))
        self._check_width(X.shape[1])
        assert self.sum is not None and self.gram is not None and self.shift is not None
        centred = X - self.shift  # never in place: X may be the caller's array
        self.gram += centred.T @ centred
        self.sum += centred.sum(axis=0)
        self.count += int(X.shape[0])
        return self

    def merge(self, other: VectorStatistics) -> Self:
        """Add ``other``'s vectors: afterwards ``self`` describes the union of both."""
        if not isinstance(other, VectorStatistics):
            raise ParameterError(f"can only merge VectorStatistics, not {type(other).__name__}")
        if other.count == 0:
            return self
        assert other.shift is not None and other.sum is not None and other.gram is not None
        if self.shift is None:
            self._start(other.shift.copy())
        self._check_width(other.shift.shape[0])
        assert self.sum is not None and self.gram is not None and self.shift is not None
        # Move other's sums from its shift to ours: x - s = (x - t) + (t - s), t its shift.
        delta = other.shift - self.shift
        moved = np.outer(delta, other.sum)
        self.gram += other.gram + moved + moved.T + other.count * np.outer(delta, delta)
        self.sum += other.sum + other.count * delta
        self.count += other.count
        return self

    def _check_width(self, d: int) -> None:
        if d != self.n_features:
            raise DataError(f"vectors have {d} dimensions, but earlier ones have {self.n_features}")

    @property
    def mean(self) -> np.ndarray:
        """float64 [d]: the mean of the vectors."""
        self._check_data(1)
        assert self.shift is not None and self.sum is not None
        return self.shift + self.sum / self.count

    def covariance(self) -> np.ndarray:
        """float64 [d, d]: the sample covariance (divided by n - 1) of the vectors."""
        self._check_data(2)
        assert self.sum is not None and self.gram is not None
        offset = self.sum / self.count
        scatter = self.gram - self.count * np.outer(offset, offset)
        centred_trace = float(np.trace(scatter))
        if centred_trace > 0 and float(np.trace(self.gram)) > MAX_CANCELLATION * centred_trace:
            ratio = float(np.trace(self.gram)) / centred_trace
            raise DataError(
                f"the vectors' mean lies far from the shift their sums were taken about "
                f"(sum of squares {ratio:.1e} × the centred one): the covariance would lose "
                f"~{np.log10(ratio):.0f} of 16 digits; collect the statistics again with "
                f"VectorStatistics(shift=<an approximate mean>)"
            )
        return scatter / (self.count - 1)

    def _check_data(self, least: int) -> None:
        if self.count < least:
            raise CompressorError(
                f"statistics of {self.count} vectors; at least {least} are needed"
            )

    # ---- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write ``config.json`` (count, width) + ``state.safetensors`` (shift, sum, gram)."""
        self._check_data(1)
        assert self.shift is not None and self.sum is not None and self.gram is not None
        config = {
            "kind": KIND,
            "format_version": FORMAT_VERSION,
            "count": self.count,
            "n_features": self.n_features,
        }
        arrays = {"shift": self.shift, "sum": self.sum, "gram": self.gram}
        write_saved(path, config, arrays)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> VectorStatistics:
        """Read statistics written by :meth:`save`, checking kind, version and shapes."""
        config, arrays = read_saved(path, "vector statistics")
        if config.get("kind") != KIND:
            raise SavedStateError(f"{path} holds a {config.get('kind')!r}, not {KIND}")
        check_version(require(config, "format_version", "int", path), FORMAT_VERSION, KIND, path)
        count = require(config, "count", "int", path)
        d = require(config, "n_features", "int", path)
        check_state_shapes(arrays, {"shift": (d,), "sum": (d,), "gram": (d, d)}, path)
        if count < 1:
            raise SavedStateError(f"invalid config.json in {path}: count {count} < 1")
        stats = cls()
        stats._start(arrays["shift"].astype(np.float64))
        stats.sum = arrays["sum"].astype(np.float64)
        stats.gram = arrays["gram"].astype(np.float64)
        stats.count = count
        return stats

    def __repr__(self) -> str:
        return f"VectorStatistics(count={self.count}, n_features={self.n_features})"


def _vector(value: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a 1-D array of numbers") from None
    if array.ndim != 1 or array.shape[0] == 0 or not np.isfinite(array).all():
        raise ParameterError(f"{name} must be a non-empty 1-D array of finite numbers")
    return array
