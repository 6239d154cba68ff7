# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""A trained pooler head, ``activation(W·e + b)``, as a compressor of the encoder's vectors.

The head is learned with the encoder (``demitasse.training``), not by ``fit`` on frozen
vectors; :meth:`Pooler.from_head` turns the trained weights into a compressor that saves,
loads and evaluates like any other. Its output is one fixed width (not Matryoshka).

A pooler is no estimator: it is registered as a built compressor
(:func:`~demitasse.compress.base.register_built_compressor`), which ``load_compressor`` (and so
a model directory holding one) loads by name, while ``make_compressor``, ``fit --compressor``,
the tune sweep and the estimator checks, which fit compressors, do not list it; its ``fit``
refuses in one line that says how a pooler is made.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from demitasse.compress._estimator import StrOptions
from demitasse.compress.base import AffineMap, Compressor, register_built_compressor
from demitasse.errors import CompressorError, ParameterError

ACTIVATIONS = ("tanh", "identity")


@register_built_compressor
class Pooler(Compressor):
    """``activation(W · normalize?(e) + b)`` with W [dim, D] from a trained pooler head.

    Made by :meth:`from_head` (or loaded), never fitted: ``fit`` raises."""

    method: ClassVar[str] = "pooler"
    matryoshka: ClassVar[bool] = False
    built_by: ClassVar[str | None] = (
        "a head trained with its encoder (demitasse.training: two_step, or HeadLoss under any "
        "loss) and built by Pooler.from_head"
    )
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **Compressor._parameter_constraints,
        "activation": [StrOptions(set(ACTIVATIONS))],
        "normalize_input": ["boolean"],
    }

    def __init__(
        self, dim: int | None = None, activation: str = "tanh", normalize_input: bool = True
    ) -> None:
        self.dim = dim
        self.activation = activation
        self.normalize_input = normalize_input

    @classmethod
    def from_head(
        cls,
        weight: np.ndarray,
        bias: np.ndarray,
        activation: str = "tanh",
        normalize_input: bool = True,
        fit_data: str | None = None,
    ) -> Pooler:
        """A fitted compressor from a head's weight [dim, D] and bias [dim]."""
        weight = np.asarray(weight, dtype=np.float32)
        bias = np.asarray(bias, dtype=np.float32)
        if weight.ndim != 2 or bias.shape != (weight.shape[0],):
            raise ParameterError("pooler: weight must be [dim, D] and bias [dim]")
        pooler = cls(dim=weight.shape[0], activation=activation, normalize_input=normalize_input)
        pooler._check_params()
        pooler.n_features_in_ = weight.shape[1]
        pooler.output_dim_ = weight.shape[0]
        pooler.weight_, pooler.bias_ = weight, bias
        pooler.fit_data_ = fit_data
        pooler.n_fit_samples_ = 0
        return pooler

    def fit(
        self, X: Any, y: Any = None, *, fit_data: str | None = None, **supervision: Any
    ) -> Pooler:
        """Refused: a pooler is not fitted on vectors (see :attr:`built_by`)."""
        raise CompressorError(f"a pooler is not fitted on vectors: it is {self.built_by}")

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        if self.normalize_input:
            X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
        out = X @ self.weight_.T + self.bias_
        return np.tanh(out) if self.activation == "tanh" else out

    def _affine(self, dim: int) -> AffineMap:
        return AffineMap(self.weight_, self.bias_, self.activation, bool(self.normalize_input))

    def _state(self) -> dict[str, np.ndarray]:
        return {"weight_": self.weight_, "bias_": self.bias_}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"weight_": (self.output_dim_, self.n_features_in_), "bias_": (self.output_dim_,)}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.weight_ = arrays["weight_"].astype(np.float32)
        self.bias_ = arrays["bias_"].astype(np.float32)
