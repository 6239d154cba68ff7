# ruff: noqa: N803  (scikit-learn convention: matrices are capitalised)
"""Truncation: keep the first ``dim`` coordinates (the right baseline for Matryoshka models)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from demitasse.compress.base import AffineMap, Compressor, register_compressor


@register_compressor
class Truncate(Compressor):
    """Keep the first ``dim`` input dimensions; ``fit`` only records the input width."""

    method: ClassVar[str] = "truncate"
    identity_at_full_width: ClassVar[bool] = True
    learns_from_data: ClassVar[bool] = False

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        return X[:, :dim]

    def _affine(self, dim: int) -> AffineMap:
        return AffineMap(
            np.eye(dim, self.n_features_in_, dtype=np.float32), np.zeros(dim, np.float32)
        )
