# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Isomap and locally linear embedding (LLE) as compressors: the manifold baselines of Wang et
al.'s study of sentence-embedding dimensionality.

Both are fitted with scikit-learn (dense eigen-solver, so fits are reproducible) on a few
thousand embeddings; new vectors are mapped out of sample the way scikit-learn does, by numpy
code over saved arrays, so a saved compressor needs no pickle. Components come sorted, so the
first k outputs are the k-dimensional embedding and ``transform(X, dim=k)`` works as for PCA.
Memory and fit time grow with the square of the fit rows: fit on thousands, not millions.
"""

from __future__ import annotations

from numbers import Real
from typing import Any, ClassVar

import numpy as np

from demitasse.compress._estimator import Interval
from demitasse.compress.base import Compressor, register_compressor
from demitasse.compress.params import Integers
from demitasse.errors import DataError

MAX_FIT_ROWS = 20000


class _NeighbourCompressor(Compressor):
    """Shared parts: ``n_neighbors`` nearest fit rows (Euclidean) of each new vector."""

    compute_dtype: ClassVar[Any] = np.float64
    #: scikit-learn fits them; the out-of-sample transform is numpy.
    fit_libraries: ClassVar[tuple[str, ...]] = ("sklearn",)
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **Compressor._parameter_constraints,
        "n_neighbors": [Integers(2)],
    }

    n_neighbors: int

    def _max_output_dim(self, n_features: int) -> int:
        return n_features

    def _check_rows(self, n: int) -> None:
        if n <= int(self.n_neighbors) + self.output_dim_:
            raise DataError(
                f"{self.method}: {n} fit rows are too few for {self.n_neighbors} neighbours and "
                f"{self.output_dim_} dims"
            )
        if n > MAX_FIT_ROWS:
            raise DataError(
                f"{self.method}: {n} fit rows; the fit is quadratic in rows, use at most "
                f"{MAX_FIT_ROWS} (a sample)"
            )

    def _neighbours(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(distances, indices) [n, k] of each row's nearest fit rows, nearest first."""
        fit = self.fit_rows_
        squared = (X * X).sum(1)[:, None] - 2.0 * X @ fit.T + (fit * fit).sum(1)[None, :]
        k = int(self.n_neighbors)
        nearest = np.argpartition(squared, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(squared, nearest, axis=1).argsort(axis=1)
        nearest = np.take_along_axis(nearest, order, axis=1)
        distances = np.sqrt(np.maximum(np.take_along_axis(squared, nearest, axis=1), 0.0))
        return distances, nearest


@register_compressor
class Isomap(_NeighbourCompressor):
    """Isomap (Tenenbaum et al., 2000): kernel PCA of geodesic distances on a k-NN graph."""

    method: ClassVar[str] = "isomap"

    def __init__(self, dim: int | None = None, n_neighbors: int = 10) -> None:
        self.dim = dim
        self.n_neighbors = n_neighbors

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        from sklearn.manifold import Isomap as SkIsomap

        self._check_rows(len(X))
        model = SkIsomap(
            n_neighbors=int(self.n_neighbors),
            n_components=self.output_dim_,
            eigen_solver="dense",
        ).fit(np.asarray(X, dtype=np.float64))
        kernel = model.kernel_pca_
        self.fit_rows_ = np.asarray(X, dtype=np.float64)
        self.geodesic_ = model.dist_matrix_
        self.kernel_row_means_ = kernel._centerer.K_fit_rows_
        self.kernel_mean_ = np.array([kernel._centerer.K_fit_all_])
        self.scaled_alphas_ = kernel.eigenvectors_ / np.sqrt(kernel.eigenvalues_)

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        distances, nearest = self._neighbours(X)
        # Geodesic distance to every fit row: through the best of the k nearest fit rows.
        geodesic = np.full((len(X), len(self.fit_rows_)), np.inf)
        for j in range(nearest.shape[1]):
            np.minimum(
                geodesic, self.geodesic_[nearest[:, j]] + distances[:, j, None], out=geodesic
            )
        K = -0.5 * geodesic**2
        K = K - self.kernel_row_means_ - K.mean(axis=1, keepdims=True) + self.kernel_mean_[0]
        return K @ self.scaled_alphas_[:, :dim]

    def _state(self) -> dict[str, np.ndarray]:
        return {
            "fit_rows_": self.fit_rows_,
            "geodesic_": self.geodesic_,
            "kernel_row_means_": self.kernel_row_means_,
            "kernel_mean_": self.kernel_mean_,
            "scaled_alphas_": self.scaled_alphas_,
        }

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        n, d, k = self.n_fit_samples_, self.n_features_in_, self.output_dim_
        return {
            "fit_rows_": (n, d),
            "geodesic_": (n, n),
            "kernel_row_means_": (n,),
            "kernel_mean_": (1,),
            "scaled_alphas_": (n, k),
        }

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        for name, value in arrays.items():
            setattr(self, name, value.astype(np.float64))


@register_compressor
class LLE(_NeighbourCompressor):
    """Locally linear embedding (Roweis & Saul, 2000), standard variant.

    A new vector gets the barycentric weights that rebuild it from its nearest fit rows, and
    the same weighted sum of their embeddings.
    """

    method: ClassVar[str] = "lle"
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **_NeighbourCompressor._parameter_constraints,
        "reg": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(self, dim: int | None = None, n_neighbors: int = 10, reg: float = 1e-3) -> None:
        self.dim = dim
        self.n_neighbors = n_neighbors
        self.reg = reg

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        from sklearn.manifold import LocallyLinearEmbedding

        self._check_rows(len(X))
        model = LocallyLinearEmbedding(
            n_neighbors=int(self.n_neighbors),
            n_components=self.output_dim_,
            reg=float(self.reg),
            eigen_solver="dense",
            random_state=0,
        ).fit(np.asarray(X, dtype=np.float64))
        self.fit_rows_ = np.asarray(X, dtype=np.float64)
        self.embedding_ = model.embedding_

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        # Local Gram matrices take rows × k × D floats: go 512 rows at a time.
        return np.concatenate(
            [self._map(X[start : start + 512], dim) for start in range(0, len(X), 512)]
        )

    def _map(self, X: np.ndarray, dim: int) -> np.ndarray:
        _, nearest = self._neighbours(X)
        offsets = self.fit_rows_[nearest] - X[:, None, :]  # [n, k, D]
        gram = offsets @ offsets.transpose(0, 2, 1)  # [n, k, k]
        trace = np.trace(gram, axis1=1, axis2=2)
        ridge = np.where(trace > 0, float(self.reg) * trace, float(self.reg))
        k = nearest.shape[1]
        gram = gram + ridge[:, None, None] * np.eye(k)
        weights = np.linalg.solve(gram, np.ones((len(X), k, 1)))[..., 0]
        weights /= weights.sum(axis=1, keepdims=True)
        return np.einsum("nk,nkd->nd", weights, self.embedding_[nearest][:, :, :dim])

    def _state(self) -> dict[str, np.ndarray]:
        return {"fit_rows_": self.fit_rows_, "embedding_": self.embedding_}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        n = self.n_fit_samples_
        return {"fit_rows_": (n, self.n_features_in_), "embedding_": (n, self.output_dim_)}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.fit_rows_ = arrays["fit_rows_"].astype(np.float64)
        self.embedding_ = arrays["embedding_"].astype(np.float64)
