# ruff: noqa: N803  (scikit-learn convention: matrices are capitalised)
"""Gaussian random projection: a data-independent baseline that any learned method must beat."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from demitasse.compress.base import AffineMap, Compressor, register_compressor
from demitasse.compress.params import Integers


@register_compressor
class RandomProjection(Compressor):
    """Project onto ``dim`` Gaussian directions with entries N(0, 1/dim), seeded.

    Row ``i`` of the matrix depends only on ``seed`` and ``i``, so a prefix of the outputs is
    the smaller projection with the same seed, up to a global scale (cosines are unchanged;
    norms of a k-dim prefix shrink by about sqrt(k/dim)). The matrix itself is saved, so a
    loaded compressor reproduces outputs even if numpy's random streams ever change.
    """

    method: ClassVar[str] = "random"
    output_reveals_non_finite_input: ClassVar[bool] = True
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **Compressor._parameter_constraints,
        "seed": [Integers(0)],
    }

    def __init__(self, dim: int | None = None, seed: int = 0) -> None:
        self.dim = dim
        self.seed = seed

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        rng = np.random.default_rng(int(self.seed))
        # Drawing [dim, D] row by row makes each output direction independent of dim.
        matrix = rng.standard_normal((self.output_dim_, self.n_features_in_))
        self._set_matrix((matrix / np.sqrt(self.output_dim_)).astype(np.float32))

    def _set_matrix(self, components: np.ndarray) -> None:
        self.components_ = components
        self._projection = np.ascontiguousarray(components.T)  # [D, dim] for X @ P

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        return X @ self._projection[:, :dim]

    def _affine(self, dim: int) -> AffineMap:
        return AffineMap(np.ascontiguousarray(self.components_[:dim]), np.zeros(dim, np.float32))

    def _state(self) -> dict[str, np.ndarray]:
        return {"components_": self.components_}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"components_": (self.output_dim_, self.n_features_in_)}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self._set_matrix(arrays["components_"].astype(np.float32))
