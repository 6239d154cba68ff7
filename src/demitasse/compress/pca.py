# ruff: noqa: N803  (scikit-learn convention: matrices are capitalised)
"""Centred PCA, optionally whitened and with the top components removed (All-But-The-Top)."""

from __future__ import annotations

from typing import Any, ClassVar, Self

import numpy as np

from demitasse.arrays import iter_row_chunks, non_finite_array
from demitasse.compress.base import AffineMap, Compressor, register_compressor
from demitasse.compress.params import Integers
from demitasse.compress.statistics import VectorStatistics
from demitasse.errors import CompressorError, DataError, ParameterError, SavedStateError

# Whitening divides by sqrt(eigenvalue); eigenvalues below this fraction of the largest are
# numerical noise (rank-deficient data), and dividing by them would blow up that noise.
_WHITEN_FLOOR = 1e-12


@register_compressor
class PCA(Compressor):
    """Project centred embeddings onto principal components ``abtt+1 … abtt+dim``.

    The covariance is accumulated over row chunks in float64, so fitting a memory-mapped
    matrix needs O(D²) memory. Components are sorted by decreasing variance, so a prefix of
    the outputs is the lower-dimensional PCA. ``abtt=r`` drops the top ``r`` components
    (Mu & Viswanath, 2018), which often carry frequency rather than meaning. ``whiten=True``
    scales each output to unit variance on the fit data. Signs are fixed so that each
    component's largest-magnitude loading is positive, making fits reproducible.
    """

    method: ClassVar[str] = "pca"
    output_reveals_non_finite_input: ClassVar[bool] = True
    scalar_state: ClassVar[tuple[str, ...]] = ("total_variance_",)
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **Compressor._parameter_constraints,
        "whiten": ["boolean"],
        "abtt": [Integers(0)],
    }

    def __init__(self, dim: int | None = None, whiten: bool = False, abtt: int = 0) -> None:
        self.dim = dim
        self.whiten = whiten
        self.abtt = abtt

    def _max_output_dim(self, n_features: int) -> int:
        return n_features - int(self.abtt)

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        # Centring about the first chunk's mean avoids cancellation in X'X - n·mu·mu' when the
        # embeddings share a large common offset (they usually do); see VectorStatistics.
        statistics = VectorStatistics()
        for _, chunk in iter_row_chunks(X, self.fit_chunk_rows, np.float64):
            statistics.update(chunk)
        self._fit_moments(statistics)

    def fit_from_statistics(
        self, statistics: VectorStatistics, *, fit_data: str | None = None
    ) -> Self:
        """Fit from the count, sum and ``XᵀX`` of the vectors instead of the vectors.

        Gives the compressor ``fit(X)`` gives (components equal up to float64 rounding, so
        also for ``whiten`` and ``abtt``) when ``statistics`` were gathered from the rows of
        ``X``, in any number of shards merged in any order: fit PCA on more vectors than fit
        in memory, or on shards that never meet in one process.
        """
        if not isinstance(statistics, VectorStatistics):
            raise ParameterError(
                f"fit_from_statistics takes VectorStatistics, not {type(statistics).__name__}"
            )
        self._check_params()
        if fit_data is not None and not isinstance(fit_data, str):
            raise ParameterError(f"fit_data must be a string description, got {fit_data!r}")
        if statistics.count < 2:
            raise CompressorError(
                f"{self.method} needs at least 2 rows to fit, got n_samples={statistics.count}"
            )
        self._forget_fit()
        assert statistics.n_features is not None
        self.n_features_in_ = statistics.n_features
        self.output_dim_ = self._initial_output_dim(statistics.n_features)
        self._fit_moments(statistics)
        bad = non_finite_array(self._state())
        if bad is not None:
            self._forget_fit()
            raise CompressorError(
                f"fitting this {self.method} compressor from statistics gave NaN or inf in "
                f"{bad}; the vectors may be extreme (their squares overflow float64)"
            )
        self.fit_data_ = fit_data
        self.n_fit_samples_ = int(statistics.count)
        return self

    def _forget_fit(self) -> None:
        # A failed refit must not leave a half-old, half-new model (as Compressor.fit does).
        for name in [k for k in self.__dict__ if k.endswith("_") and not k.startswith("_")]:
            del self.__dict__[name]

    def _fit_moments(self, statistics: VectorStatistics) -> None:
        eigenvalues, eigenvectors = np.linalg.eigh(statistics.covariance())
        order = np.argsort(eigenvalues)[::-1]
        eigenvalues = np.clip(eigenvalues[order], 0.0, None)
        total_variance = float(eigenvalues.sum())
        if total_variance <= 0.0:
            raise DataError("X has zero variance (all rows identical); PCA cannot be fitted")

        kept = order[self.abtt : self.abtt + self.output_dim_]
        components = eigenvectors[:, kept].T
        biggest = np.argmax(np.abs(components), axis=1)
        components *= np.sign(components[np.arange(len(kept)), biggest])[:, None]

        self.mean_ = statistics.mean
        self.components_ = components
        self.explained_variance_ = eigenvalues[self.abtt : self.abtt + self.output_dim_]
        self.total_variance_ = total_variance
        self._prepare()

    @property
    def explained_variance_ratio_(self) -> np.ndarray:
        """Fraction of the fit data's total variance carried by each output."""
        return self.explained_variance_ / self.total_variance_

    def _prepare(self) -> None:
        """Fold centring, projection and whitening into float32 arrays used by transform."""
        projection = self.components_.T
        if self.whiten:
            floor = _WHITEN_FLOOR * max(self.total_variance_, np.finfo(np.float64).tiny)
            projection = projection / np.sqrt(np.maximum(self.explained_variance_, floor))
        self._projection = np.ascontiguousarray(projection, dtype=np.float32)
        # (x - mean) @ P = x @ P - mean @ P: no centred copy of the (wide) input, and centring,
        # ABTT and whitening all fold into one affine layer (transform and exporters share it).
        self._bias32 = (self.mean_ @ projection).astype(np.float32)

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        result = X @ self._projection[:, :dim]
        result -= self._bias32[:dim]
        return result

    def _affine(self, dim: int) -> AffineMap:
        return AffineMap(np.ascontiguousarray(self._projection[:, :dim].T), -self._bias32[:dim])

    def _state(self) -> dict[str, np.ndarray]:
        return {
            "mean_": self.mean_,
            "components_": self.components_,
            "explained_variance_": self.explained_variance_,
        }

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        d, k = self.n_features_in_, self.output_dim_
        return {"mean_": (d,), "components_": (k, d), "explained_variance_": (k,)}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.mean_ = arrays["mean_"].astype(np.float64)
        self.components_ = arrays["components_"].astype(np.float64)
        self.explained_variance_ = arrays["explained_variance_"].astype(np.float64)
        if not isinstance(self.total_variance_, int | float) or self.total_variance_ <= 0:
            raise SavedStateError(
                f"invalid saved pca: total_variance_ must be a positive number, "
                f"got {self.total_variance_!r}"
            )
        self.total_variance_ = float(self.total_variance_)
        self._prepare()
