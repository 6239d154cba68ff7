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

Beyond both, these options:

* ``gradient_priority`` gives the last layer's terms right of way: wherever, in one parameter
  tensor, the inner layers' gradient points against the last layer's, its component along the
  last layer's gradient is removed before the two are added (the one-sided form of PCGrad, Yu
  et al., NeurIPS 2020). To first order the inner layers then cost the last layer nothing; each
  step takes a second backward pass.
* ``decoupled_updates`` makes the last layer's terms and the inner layers' terms two updates
  with their own AdamW moments (the trainer steps once per part). Summed into one gradient,
  AdamW divides the last layer's share by the combined magnitude, so in the shared lower
  blocks the last layer's loss trains at a fraction of the rate it gets in plain training;
  decoupled, each part moves at the full rate (the inner part at ``inner_rate`` times it: under
  AdamW a loss weight such as alpha no longer sets a part's step size). Also a second backward
  pass per step.
* ``exit_heads`` gives every inner layer a linear head (``dim`` × ``dim``, starting as the
  identity) that its express and compress terms see instead of the pooled embedding; the
  trainer fits the heads at the objective's own learning rate. A layer's mean-pooled embedding
  is poor mostly because of a few dominant directions that a linear map removes, which the
  backbone can only do by changing what the layers above it receive; with heads, the inner
  layers need little from the backbone (``inner_rate`` may then be 0: the inner terms train
  the heads alone). The model saves them in ``exit_heads/`` (see
  :mod:`demitasse.encoders.exit_heads`); encoding and export apply them.
* ``compress_last=False`` keeps learn-to-compress off the last layer (the inner layers keep
  it): the alignment of the last layer's first k dims to its PCA target competes with the base
  loss there, and ``matryoshka_dims`` trains that layer's prefixes directly.
* ``matryoshka_dims`` adds the base loss on those prefixes of the last layer (a
  :class:`MatryoshkaLoss` over them): PCA alignment only reorders what the layer holds, and on
  a model whose truncations already beat its PCA projections it cannot make a 32-dim prefix as
  good as Matryoshka training does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)

from demitasse.encoders.exit_heads import save_exit_heads
from demitasse.errors import DemitasseError
from demitasse.training.losses import BaseLoss, MatryoshkaLoss, ModelLoss, PairBatch

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


def own_learning_rate(objective: torch.nn.Module) -> float | None:
    """The default rate of a training objective's own parameters (exit heads, learnt layer
    weights); None when it has none."""
    return OWN_PARAMETERS_LEARNING_RATE if any(True for _ in objective.parameters()) else None


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


def deconflicted(
    auxiliary: torch.Tensor | None, primary: torch.Tensor | None
) -> torch.Tensor | None:
    """``auxiliary`` without its component along ``primary`` when the two point against each
    other (a negative dot product); unchanged otherwise."""
    if auxiliary is None or primary is None:
        return auxiliary
    dot = (auxiliary * primary).sum()
    if dot < 0:
        return auxiliary - dot / (primary * primary).sum().clamp_min(1e-30) * primary
    return auxiliary


def _add(left: torch.Tensor | None, right: torch.Tensor | None) -> torch.Tensor | None:
    if left is None or right is None:
        return right if left is None else left
    return left + right


class EspressoLoss(ModelLoss):
    """The ESE objective around a base loss; see the module docstring for every option."""

    fixed_weights: torch.Tensor  # a buffer

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
        gradient_priority: bool = False,
        decoupled_updates: bool = False,
        inner_rate: float = 1.0,
        exit_heads: bool = False,
        compress_last: bool = True,
        dim: int | None = None,
        kl_temperature: float = 1.0,
    ) -> None:
        super().__init__()
        for value, allowed, what in (
            (layer_weighting, LAYER_WEIGHTINGS, "layer_weighting"),
            (compression, COMPRESSIONS, "compression"),
            (layer_indexing, LAYER_INDEXINGS, "layer_indexing"),
            (pca_scaling, PCA_SCALINGS, "pca_scaling"),
            (inner_reduction, INNER_REDUCTIONS, "inner_reduction"),
        ):
            if value not in allowed:
                raise DemitasseError(f"espresso: {what} must be one of {allowed}, got {value!r}")
        if num_layers < 2:
            raise DemitasseError("espresso needs a model with at least 2 layers")
        if inner_rate < 0 or (inner_rate != 1.0 and not decoupled_updates):
            raise DemitasseError(
                "espresso: inner_rate must be >= 0 and applies with decoupled_updates"
            )
        if exit_heads and (dim is None or dim < 1):
            raise DemitasseError("espresso: exit_heads needs the model's dim")
        if compress_dim < 1 or kl_temperature <= 0:
            raise DemitasseError("espresso: compress_dim and kl_temperature must be positive")
        self.base = base
        self.num_layers = num_layers
        self.compress_dim = compress_dim
        self.express_weight = express_weight
        self.compress_weight = compress_weight
        self.layer_weighting = layer_weighting
        self.compression = compression
        self.layer_indexing = layer_indexing
        self.pca_scaling = pca_scaling
        self.inner_reduction = inner_reduction
        self.prefix_loss = prefix_loss
        self.matryoshka_dims = sorted({int(d) for d in matryoshka_dims}, reverse=True)
        self.matryoshka = MatryoshkaLoss(base, self.matryoshka_dims) if matryoshka_dims else None
        self.gradient_priority = gradient_priority
        self.decoupled_updates = decoupled_updates
        self.inner_rate = inner_rate
        self.exit_heads = exit_heads
        self.compress_last = compress_last
        self.dim = dim
        self.kl_temperature = kl_temperature
        self._split: tuple[torch.Tensor, torch.Tensor] | None = None
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
        self.heads = torch.nn.ModuleDict()
        for i in self.inner if exit_heads else []:
            head = torch.nn.Linear(int(dim or 0), int(dim or 0))
            with torch.no_grad():
                head.weight.copy_(torch.eye(head.in_features))
                head.bias.zero_()
            self.heads[str(i)] = head

    def layer_weights(self) -> torch.Tensor:
        """Weights of the inner layers (hidden-state indices ``self.inner``), before
        ``inner_reduction``."""
        if self.layer_logits is None:
            return self.fixed_weights
        return len(self.inner) * torch.softmax(self.layer_logits, dim=0)

    def _compress_dim(self, batch: PairBatch) -> int:
        return min(self.compress_dim, batch.anchors.shape[-1])

    def _align(self, batch: PairBatch) -> torch.Tensor:
        X = batch.all_rows()  # noqa: N806
        k = self._compress_dim(batch)
        target = compression_target(X, k, self.compression, self.pca_scaling)
        return alignment_loss(X[:, :k], target.to(X.dtype), self.kl_temperature)

    def forward(self, layers: Sequence[PairBatch]) -> torch.Tensor:
        if len(layers) != self.num_layers + 1:
            raise DemitasseError(
                f"espresso: expected {self.num_layers + 1} hidden states, got {len(layers)}"
            )
        last = layers[self.num_layers]
        weights = self.layer_weights()
        if self.inner_reduction == "mean":
            weights = weights / len(self.inner)
        compressing = bool(self.compress_weight) and self.compression != "none"
        # The last layer's terms ...
        primary = self.base(last)
        if self.prefix_loss:
            primary = primary + self.base(last.prefix(self._compress_dim(last)))
        if self.matryoshka is not None:
            primary = primary + self.matryoshka([last])
        if compressing and self.compress_last:
            primary = primary + self.compress_weight * self._align(last)
        # ... and the inner layers'.
        inner = weights.sum() * 0.0
        exits = {i: self._exit(i, layers[i]) for i in self.inner}
        if self.express_weight:
            express = torch.stack([self.base(self._expressed(exits[i])) for i in self.inner])
            inner = inner + self.express_weight * (weights * express).sum()
        if compressing:
            aligned = torch.stack([self._align(exits[i]) for i in self.inner])
            inner = inner + self.compress_weight * (weights * aligned).sum()
        # Kept for gradients(), which the trainer calls next: the two parts need their own
        # backward passes through this one forward graph.
        split = (self.gradient_priority or self.decoupled_updates) and self.training
        self._split = (primary, inner) if split else None
        return primary + inner

    @property
    def update_parts(self) -> int:
        return 2 if self.decoupled_updates else 1

    @property
    def update_rates(self) -> list[float]:
        return [1.0, self.inner_rate] if self.decoupled_updates else [1.0]

    def gradients(
        self, loss: torch.Tensor, parameters: Sequence[torch.nn.Parameter]
    ) -> list[list[torch.Tensor | None]]:
        if self._split is None:
            return super().gradients(loss, parameters)
        (primary, inner), self._split = self._split, None
        params = list(parameters)
        first = torch.autograd.grad(primary, params, retain_graph=True, allow_unused=True)
        # At inner rate 0 the encoder takes no step from the inner terms: stop their backward
        # pass at the objective's own parameters (the exit heads).
        own = {id(p) for p in self.parameters()}
        wanted = [p for p in params if self.inner_rate > 0 or id(p) in own]
        found: dict[int, torch.Tensor | None] = {}
        if inner.requires_grad and wanted:
            grads = torch.autograd.grad(inner, wanted, allow_unused=True)
            found = dict(zip(map(id, wanted), grads, strict=True))
        second = [found.get(id(p)) for p in params]
        if self.gradient_priority:
            second = [deconflicted(g, f) for g, f in zip(second, first, strict=True)]
        if self.decoupled_updates:
            return [list(first), list(second)]
        return [[_add(f, g) for f, g in zip(first, second, strict=True)]]

    def _exit(self, index: int, batch: PairBatch) -> PairBatch:
        """Hidden state ``index``'s embeddings through its exit head (unchanged without)."""
        return batch.mapped(self.heads[str(index)]) if str(index) in self.heads else batch

    def save_artifacts(self, directory: Path) -> None:
        """The exit heads, keyed by the encoder's layer numbers (hidden-state indices)."""
        if len(self.heads):
            save_exit_heads(
                directory,
                {
                    int(i): (
                        _linear(head).weight.detach().cpu().numpy(),
                        _linear(head).bias.detach().cpu().numpy(),
                    )
                    for i, head in self.heads.items()
                },
            )

    def _expressed(self, batch: PairBatch) -> PairBatch:
        """What an inner layer's base loss sees: its first k dims under ``prefix_loss``."""
        return batch.prefix(self._compress_dim(batch)) if self.prefix_loss else batch


def _linear(module: torch.nn.Module) -> torch.nn.Linear:
    """An exit head, which is a Linear layer (the ModuleDict only knows it as a Module)."""
    assert isinstance(module, torch.nn.Linear)
    return module
