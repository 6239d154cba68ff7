"""Espresso Sentence Embeddings (ESE; Li et al., ICLR 2025): learn-to-express and
learn-to-compress, so a model can be cut after any layer and truncated to its first k dims.

Loss (paper Eq. 2 and Eqs. 3–6), with n transformer blocks:

    L = L_base(layer n) + alpha · Σ_{i<n} w_i · L_base(layer i) + beta · Σ_i w_i · L_align(layer i)

* **Learn-to-express:** ``w_i = 1 / (1 + ln i)`` for layers 1..n−1 (``layer_weighting=
  "default"``); ``"none"`` sets every w_i = 1; ``"dynamic"`` learns them as (n−1)·softmax(θ),
  so they keep their total and can only move weight between layers (the trainer fits θ at the
  objective's own rate, :func:`own_learning_rate`). The last layer always has weight 1.
* **Learn-to-compress:** for a layer's batch embeddings X [N, d], the inner-dependency matrix
  A = softmax(XᵀX / √d) [d, d]; its top-k left singular vectors A_k [d, k]; the target
  T = X·A_k, computed without gradient; the first k dimensions of X are aligned to it with
  MSE + KL(softmax(T/τ) ‖ softmax(X[:, :k]/τ)). ``compression="embeddings"`` replaces A by the
  covariance of X (plain PCA of the embeddings, the paper's ablation); ``"none"`` drops the
  term. Layer i's alignment gets the same w_i; the last layer's gets 1.

Where the paper and the reference AnglE code differ, the paper is the default and the code an
option (``REFERENCE_CODE`` sets all four):

* ``layer_indexing="reference"`` applies the express and compress terms to hidden states
  0..n−2 (0 = the embedding layer's output) with w = 1/(1+ln(1+i)), as the code's loop does;
* ``pca_scaling="singular-values"`` uses A_k·diag(s_k) instead of A_k;
* ``inner_reduction="mean"`` divides the inner layers' weighted sum by their number (n−1), as
  the code does, instead of adding it whole (Eq. 2); the inner layers then weigh about a fifth
  as much against the last layer on a 6-layer model;
* ``prefix_loss=True`` also applies the base loss to the first k dimensions: added to the full
  width loss at the last layer, and in place of it at the inner layers, as the code does (the
  paper's L_express is on full-width embeddings only).

The objective is built from pieces that compose as sentence-transformers' loss wrappers do:
:class:`LayerwiseLoss` (learn-to-express: a loss on the last layer plus weighted terms on
each inner layer, like ``AdaptiveLayerLoss`` over every layer), :class:`AlignmentLoss`
(learn-to-compress on one layer) and the one-layer wrappers of :mod:`demitasse.training.losses`
(:class:`PrefixLoss`, :class:`NestedPrefixLoss`, :class:`WeightedSum`). :class:`EspressoLoss`
is their composition for the settings below, as ``Matryoshka2dLoss`` is a composition of
``AdaptiveLayerLoss`` and ``MatryoshkaLoss``.

Beyond the paper and the code, these options:

* ``exit_heads`` reads every inner layer through a linear head (``dim`` × ``dim``, starting as
  the identity) that its express and compress terms see instead of the pooled embedding. The
  heads belong to the model (:class:`demitasse.training.model.SentenceModel` owns, trains and
  saves them in ``exit_heads/``, see :mod:`demitasse.encoders.exit_heads`; encoding and export
  apply them); the loss only names the layers (``exit_layers``), and the trainer fits the
  heads at the objective's own learning rate. A layer's mean-pooled embedding is poor mostly
  because of a few dominant directions that a linear map removes, which the backbone can only
  do by changing what the layers above it receive; with heads, the inner layers need little
  from the backbone.
* ``compress_last=False`` keeps learn-to-compress off the last layer (the inner layers keep
  it): the alignment of the last layer's first k dims to its PCA target competes with the base
  loss there, and ``matryoshka_dims`` trains that layer's prefixes directly.
* ``matryoshka_dims`` adds the base loss on those prefixes of the last layer (a
  :class:`NestedPrefixLoss` over them): PCA alignment only reorders what the layer holds, and
  on a model whose truncations already beat its PCA projections it cannot make a 32-dim prefix
  as good as Matryoshka training does.

The last layer's terms and the inner layers' terms are the two parts of
:meth:`LayerwiseLoss.split`; gradient priority (the last layer's terms get right of way) and
decoupled updates (one AdamW per part, the inner part at its own rate) are how the trainer
updates from them: :class:`demitasse.training.trainer.TrainingConfig` and
:mod:`demitasse.training.updates`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)

from demitasse.errors import DemitasseError
from demitasse.training.losses import (
    BaseLoss,
    LossSplit,
    ModelLoss,
    NestedPrefixLoss,
    PairBatch,
    PrefixLoss,
    WeightedSum,
)

LAYER_WEIGHTINGS = ("default", "none", "dynamic")
COMPRESSIONS = ("dependencies", "embeddings", "none")
LAYER_INDEXINGS = ("paper", "reference")
PCA_SCALINGS = ("none", "singular-values")
INNER_REDUCTIONS = ("sum", "mean")
# Exit heads and learnt layer weights start from scratch (the identity, uniform weights) and
# need a far larger rate than the encoder: at 3e-5, 150 steps move a layer logit by < 0.005.
OWN_PARAMETERS_LEARNING_RATE = 1e-3
# Every option in which the reference AnglE code departs from the paper, as the code has it.
REFERENCE_CODE: dict[str, str | bool] = {
    "layer_indexing": "reference",
    "pca_scaling": "singular-values",
    "inner_reduction": "mean",
    "prefix_loss": True,
}


def own_learning_rate(objective: ModelLoss) -> float | None:
    """The default rate of what an objective trains besides the encoder (exit heads, learnt
    layer weights); None when it trains nothing else."""
    has_own = any(True for _ in objective.parameters()) or bool(objective.exit_layers)
    return OWN_PARAMETERS_LEARNING_RATE if has_own else None


def _check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise DemitasseError(f"espresso: {what} must be one of {allowed}, got {value!r}")


def compression_target(
    X: torch.Tensor,  # noqa: N803  (matrix)
    k: int,
    how: str = "dependencies",
    scaling: str = "none",
) -> torch.Tensor:
    """The PCA-compressed target [N, k] of embeddings ``X`` [N, d] (no gradient)."""
    with torch.no_grad():
        X = X.float()  # noqa: N806
        if how == "dependencies":
            matrix = torch.softmax(X.T @ X / math.sqrt(X.shape[1]), dim=-1)
        elif how == "embeddings":
            centred = X - X.mean(dim=0)
            matrix = centred.T @ centred / max(1, len(X) - 1)
        else:
            raise DemitasseError(f"unknown compression {how!r}; choose from {COMPRESSIONS}")
        left, singular, _ = torch.linalg.svd(matrix)
        axes = left[:, :k]
        if scaling == "singular-values":
            axes = axes * singular[:k]
        return X @ axes


def alignment_loss(prefix: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    """MSE + KL(target ‖ prefix) over row-wise softmaxes at ``temperature``."""
    mse = F.mse_loss(prefix, target)
    kl = F.kl_div(
        F.log_softmax(prefix / temperature, dim=-1),
        F.log_softmax(target / temperature, dim=-1),
        log_target=True,
        reduction="batchmean",
    )
    return mse + kl


class AlignmentLoss:
    """Learn-to-compress on one layer: the first ``dim`` dims of every embedding of the batch
    aligned to its PCA-compressed target (:func:`compression_target`, :func:`alignment_loss`)."""

    def __init__(
        self,
        dim: int,
        compression: str = "dependencies",
        scaling: str = "none",
        temperature: float = 1.0,
    ) -> None:
        _check_choice(compression, COMPRESSIONS[:2], "compression of an AlignmentLoss")
        _check_choice(scaling, PCA_SCALINGS, "pca_scaling")
        if dim < 1 or temperature <= 0:
            raise DemitasseError("espresso: compress_dim and kl_temperature must be positive")
        self.dim, self.compression, self.scaling = dim, compression, scaling
        self.temperature = temperature

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        X = batch.all_rows()  # noqa: N806
        k = min(self.dim, X.shape[-1])
        target = compression_target(X, k, self.compression, self.scaling)
        return alignment_loss(X[:, :k], target.to(X.dtype), self.temperature)


class LayerwiseLoss(ModelLoss):
    """Learn-to-express: ``last`` on the last layer plus, on every inner layer i,
    ``Σ_t weight_t · w_i · term_t(layer i)`` for the weighted ``inner_terms``.

    ``layer_indexing`` picks the inner layers (``paper``: hidden states 1..n−1 with
    w_i = 1/(1+ln i); ``reference``: 0..n−2 with w_i = 1/(1+ln(1+i))); ``layer_weighting``
    ``none`` sets every w_i = 1 and ``dynamic`` learns them as (n−1)·softmax(θ);
    ``inner_reduction="mean"`` divides the inner sum by the number of inner layers.
    ``exit_heads`` reads the inner layers through the model's exit heads.
    """

    fixed_weights: torch.Tensor  # a buffer

    def __init__(
        self,
        last: BaseLoss,
        inner_terms: Sequence[tuple[float, BaseLoss]],
        num_layers: int,
        layer_indexing: str = "paper",
        layer_weighting: str = "default",
        inner_reduction: str = "sum",
        exit_heads: bool = False,
    ) -> None:
        super().__init__()
        _check_choice(layer_weighting, LAYER_WEIGHTINGS, "layer_weighting")
        _check_choice(layer_indexing, LAYER_INDEXINGS, "layer_indexing")
        _check_choice(inner_reduction, INNER_REDUCTIONS, "inner_reduction")
        if num_layers < 2:
            raise DemitasseError("espresso needs a model with at least 2 layers")
        self._last, self._inner_terms = last, list(inner_terms)
        self.num_layers = num_layers
        self.layer_indexing, self.layer_weighting = layer_indexing, layer_weighting
        self.inner_reduction, self.exit_heads = inner_reduction, exit_heads
        # Hidden-state indices of the inner layers and their default weights.
        if layer_indexing == "paper":
            self.inner = list(range(1, num_layers))
            fixed = [1.0 / (1.0 + math.log(i)) for i in self.inner]
        else:
            self.inner = list(range(0, num_layers - 1))
            fixed = [1.0 / (1.0 + math.log(1 + i)) for i in self.inner]
        if layer_weighting == "none":
            fixed = [1.0] * len(self.inner)
        self.register_buffer("fixed_weights", torch.tensor(fixed), persistent=False)
        self.layer_logits = (
            torch.nn.Parameter(torch.zeros(len(self.inner)))
            if layer_weighting == "dynamic"
            else None
        )
        self.exit_layers = tuple(self.inner) if exit_heads else ()

    def layer_weights(self) -> torch.Tensor:
        """Weights of the inner layers (hidden-state indices ``self.inner``), before
        ``inner_reduction``."""
        if self.layer_logits is None:
            return self.fixed_weights
        return len(self.inner) * torch.softmax(self.layer_logits, dim=0)

    @property
    def has_auxiliary_part(self) -> bool:
        return True

    def split(self, layers: Sequence[PairBatch]) -> LossSplit:
        if len(layers) != self.num_layers + 1:
            raise DemitasseError(
                f"espresso: expected {self.num_layers + 1} hidden states, got {len(layers)}"
            )
        weights = self.layer_weights()
        if self.inner_reduction == "mean":
            weights = weights / len(self.inner)
        primary = self._last(layers[self.num_layers])
        inner = weights.sum() * 0.0
        for weight, term in self._inner_terms:
            values = torch.stack([term(layers[i]) for i in self.inner])
            inner = inner + weight * (weights * values).sum()
        return LossSplit(primary, inner)

    def forward(self, layers: Sequence[PairBatch]) -> torch.Tensor:
        return self.split(layers).total


class EspressoLoss(LayerwiseLoss):
    """The ESE objective around a base loss: a :class:`LayerwiseLoss` whose last-layer loss
    and inner terms are built from the settings (see the module docstring for each)."""

    def __init__(
        self,
        base: BaseLoss,
        num_layers: int,
        compress_dim: int = 128,
        express_weight: float = 1.0,
        compress_weight: float = 1.0,
        layer_weighting: str = "default",
        compression: str = "dependencies",
        layer_indexing: str = "paper",
        pca_scaling: str = "none",
        inner_reduction: str = "sum",
        prefix_loss: bool = False,
        matryoshka_dims: Sequence[int] = (),
        exit_heads: bool = False,
        compress_last: bool = True,
        kl_temperature: float = 1.0,
    ) -> None:
        _check_choice(compression, COMPRESSIONS, "compression")
        _check_choice(pca_scaling, PCA_SCALINGS, "pca_scaling")
        if compress_dim < 1 or kl_temperature <= 0:
            raise DemitasseError("espresso: compress_dim and kl_temperature must be positive")
        dims = sorted({int(d) for d in matryoshka_dims}, reverse=True)
        alignment = (
            AlignmentLoss(compress_dim, compression, pca_scaling, kl_temperature)
            if compress_weight and compression != "none"
            else None
        )
        expressed = PrefixLoss(base, compress_dim) if prefix_loss else base
        last: list[tuple[float, BaseLoss]] = [(1.0, base)]
        last += [(1.0, expressed)] if prefix_loss else []
        last += [(1.0, NestedPrefixLoss(base, dims))] if dims else []
        last += [(compress_weight, alignment)] if alignment and compress_last else []
        inner: list[tuple[float, BaseLoss]] = (
            [(express_weight, expressed)] if express_weight else []
        )
        inner += [(compress_weight, alignment)] if alignment else []
        super().__init__(
            WeightedSum(last), inner, num_layers, layer_indexing, layer_weighting,
            inner_reduction, exit_heads,
        )  # fmt: skip
        self.alignment = alignment
        # The settings, for describe(): what a checkpoint of this objective must match.
        self.base, self.compress_dim, self.express_weight = base, compress_dim, express_weight
        self.compress_weight, self.compression, self.pca_scaling = (
            compress_weight, compression, pca_scaling,
        )  # fmt: skip
        self.prefix_loss, self.matryoshka_dims = prefix_loss, dims
        self.compress_last, self.kl_temperature = compress_last, kl_temperature
