"""Sentence-embedding objectives on one layer's embeddings, and wrappers that pick layers and dims.

A *base loss* maps a :class:`PairBatch` (the embeddings of one layer for one batch) to a scalar:
CoSENT, in-batch negatives (InfoNCE), the AnglE angle term, or the AnglE combination of the
three. Base losses wrap base losses: :class:`PrefixLoss` (the first k dims),
:class:`NestedPrefixLoss` (several prefixes, as Matryoshka training) and :class:`WeightedSum`.
A *model loss* maps the embeddings of every layer to a scalar and wraps a base loss, as
sentence-transformers' MatryoshkaLoss wraps its inner loss: :class:`LastLayerLoss` (plain
training), :class:`MatryoshkaLoss` (prefixes of the last layer) and, in
:mod:`demitasse.training.espresso`, the layer-wise loss behind Espresso.

A model loss also says how its value splits into update parts (:meth:`ModelLoss.split`): the
last layer's terms and the others'. How the trainer turns the parts into updates (one gradient,
gradient priority, decoupled optimisers) is the trainer's business
(:mod:`demitasse.training.updates`), not the loss's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)

from demitasse.errors import DemitasseError
from demitasse.losses import cosent_loss, pairwise_ranking_loss


@dataclass
class PairBatch:
    """One layer's embeddings for a batch: row i of ``anchors`` pairs with row i of ``positives``.

    ``negatives`` (hard negatives, row-aligned), ``scores`` (graded similarity of each pair)
    and ``labels`` (class of each pair, e.g. NLI) are optional; a batch has scores (STS-like
    data), labels, or positives without either (NLI triples, SimCSE).
    """

    anchors: torch.Tensor
    positives: torch.Tensor
    negatives: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    labels: torch.Tensor | None = None

    def mapped(self, embedding_map: Callable[[torch.Tensor], torch.Tensor]) -> PairBatch:
        """The same pairs with ``embedding_map`` applied to every embedding (e.g. a head)."""
        negatives = None if self.negatives is None else embedding_map(self.negatives)
        return PairBatch(
            embedding_map(self.anchors),
            embedding_map(self.positives),
            negatives,
            self.scores,
            self.labels,
        )

    def prefix(self, dim: int) -> PairBatch:
        """The same batch keeping only the first ``dim`` dimensions."""
        return self.mapped(lambda embeddings: embeddings[:, :dim])

    def all_rows(self) -> torch.Tensor:
        """Every embedding of the batch stacked: anchors, positives, then negatives."""
        parts = [self.anchors, self.positives]
        if self.negatives is not None:
            parts.append(self.negatives)
        return torch.cat(parts)

    def graded_pairs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(left, right, score) of every pair; without scores positives grade 1, negatives 0."""
        if self.scores is not None:
            return self.anchors, self.positives, self.scores
        ones = torch.ones(len(self.anchors), device=self.anchors.device)
        if self.negatives is None:
            return self.anchors, self.positives, ones
        left = torch.cat([self.anchors, self.anchors])
        right = torch.cat([self.positives, self.negatives])
        return left, right, torch.cat([ones, torch.zeros_like(ones)])


class BaseLoss(Protocol):
    def __call__(self, batch: PairBatch) -> torch.Tensor: ...


class CoSENTLoss:
    """CoSENT over the graded pairs of the batch (pairs of higher grade should be closer)."""

    def __init__(self, scale: float = 20.0) -> None:
        self.scale = scale

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        left, right, grades = batch.graded_pairs()
        return cosent_loss(left, right, grades, self.scale)


class InBatchNegativesLoss:
    """InfoNCE: each anchor against every positive and hard negative of the batch.

    Scored or labelled batches have no designated positives, so they contribute zero. With the
    sentence itself as its positive and dropout on, this is unsupervised SimCSE (scale 20 is
    SimCSE's temperature 0.05).
    """

    def __init__(self, scale: float = 20.0) -> None:
        self.scale = scale

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        if batch.scores is not None or batch.labels is not None:
            return batch.anchors.sum() * 0.0
        candidates = batch.positives
        if batch.negatives is not None:
            candidates = torch.cat([batch.positives, batch.negatives])
        logits = self.scale * F.normalize(batch.anchors, dim=-1) @ F.normalize(candidates).T
        target = torch.arange(len(batch.anchors), device=logits.device)
        return F.cross_entropy(logits, target)


def angle_distance(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Mean absolute angle (in units of π) of ``left / right`` in complex space, per pair.

    Each embedding is read as a complex vector: first half real parts, second half imaginary
    parts. The angle of the element-wise quotient does not saturate where cosine does, which is
    AnglE's point. Each element's angle weighs by its magnitude |left_j|·|right_j|: an element
    near 0 has no meaningful angle, and an unweighted mean hands it a gradient of order
    1/magnitude (all-MiniLM-L6-v2's last layer has such elements, whose gradient norm reached
    1e5–1e6 and swamped every other term of the loss under gradient clipping).
    """
    half = left.shape[-1] // 2
    a, b = left[:, :half], left[:, half : 2 * half]
    c, d = right[:, :half], right[:, half : 2 * half]
    # (a + bi) / (c + di) ∝ (ac + bd) + (bc − ad) i; only its angle matters.
    real, imaginary = a * c + b * d, b * c - a * d
    angles = torch.atan2(imaginary, real).abs()
    # |left_j|·|right_j| = |real + imaginary·i|; detached so the weights only weigh.
    weights = torch.sqrt(real.detach() ** 2 + imaginary.detach() ** 2)
    total = weights.sum(dim=-1).clamp_min(torch.finfo(weights.dtype).tiny)
    return (weights * angles).sum(dim=-1) / total / torch.pi


class AngleLoss:
    """AnglE's angle term: pairs of higher grade should have a smaller angle distance."""

    def __init__(self, scale: float = 20.0) -> None:
        self.scale = scale

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        left, right, grades = batch.graded_pairs()
        return pairwise_ranking_loss(-self.scale * angle_distance(left, right), grades)


class AnglELoss:
    """AnglE (Li & Li, ACL 2024): ``w_cos·CoSENT + w_ibn·in-batch negatives + w_angle·angle``.

    Defaults: all three weights 1 and scale 20 (temperature 0.05) in each term.
    """

    def __init__(
        self,
        cosine_weight: float = 1.0,
        ibn_weight: float = 1.0,
        angle_weight: float = 1.0,
        scale: float = 20.0,
    ) -> None:
        self.terms: list[tuple[float, Callable[[PairBatch], torch.Tensor]]] = [
            (cosine_weight, CoSENTLoss(scale)),
            (ibn_weight, InBatchNegativesLoss(scale)),
            (angle_weight, AngleLoss(scale)),
        ]

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        total = batch.anchors.sum() * 0.0
        for weight, term in self.terms:
            if weight:
                total = total + weight * term(batch)
        return total


class PrefixLoss:
    """A base loss on the first ``dim`` dimensions of the embeddings (all of them when fewer)."""

    def __init__(self, base: BaseLoss, dim: int) -> None:
        if dim < 1:
            raise DemitasseError("PrefixLoss needs a positive dim")
        self.base = base
        self.dim = dim

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        return self.base(batch.prefix(min(self.dim, batch.anchors.shape[-1])))


class NestedPrefixLoss:
    """A base loss summed over several prefixes of the embeddings (weight 1 each, as
    sentence-transformers' MatryoshkaLoss does by default)."""

    def __init__(self, base: BaseLoss, dims: Sequence[int]) -> None:
        if not dims or any(int(d) < 1 for d in dims):
            raise DemitasseError("MatryoshkaLoss needs positive dims")
        self.base = base
        self.dims = sorted({int(d) for d in dims}, reverse=True)

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        width = batch.anchors.shape[-1]
        return torch.stack([self.base(batch.prefix(min(d, width))) for d in self.dims]).sum()


class WeightedSum:
    """``Σ weight · term(batch)`` over base losses, added in the order given."""

    def __init__(self, terms: Sequence[tuple[float, BaseLoss]]) -> None:
        if not terms:
            raise DemitasseError("WeightedSum needs at least one term")
        self.terms = list(terms)

    def __call__(self, batch: PairBatch) -> torch.Tensor:
        (first_weight, first), *rest = self.terms
        total = first_weight * first(batch)
        for weight, term in rest:
            total = total + weight * term(batch)
        return total


BASE_LOSSES = {
    "angle": AnglELoss,
    "cosent": CoSENTLoss,
    "ibn": InBatchNegativesLoss,
}


def make_base_loss(name: str) -> BaseLoss:
    """A base loss by name: ``angle`` (AnglE, default), ``cosent`` or ``ibn``."""
    if name not in BASE_LOSSES:
        raise DemitasseError(f"unknown loss {name!r}; choose one of {', '.join(BASE_LOSSES)}")
    return BASE_LOSSES[name]()


@dataclass
class LossSplit:
    """A model loss's value in update parts: ``primary`` (the last layer's terms) and
    ``auxiliary`` (the other layers' terms; None for a loss that has none)."""

    primary: torch.Tensor
    auxiliary: torch.Tensor | None = None

    @functools.cached_property
    def total(self) -> torch.Tensor:
        """The loss's value (one node of the graph, however often it is asked for)."""
        return self.primary if self.auxiliary is None else self.primary + self.auxiliary


class ModelLoss(torch.nn.Module):
    """A loss over every layer's embeddings: ``layers[i]`` is the batch at hidden state i.

    Index 0 is the embedding layer's output and index n the last transformer block. It is a
    Module so that losses with learnable parts (Espresso's dynamic layer weights) train with the
    model and are checkpointed with it.
    """

    #: The hidden states this loss reads through the model's exit heads (the trainer gives the
    #: model a head for each; the model owns, trains and saves them).
    exit_layers: tuple[int, ...] = ()

    def forward(self, layers: Sequence[PairBatch]) -> torch.Tensor:
        raise NotImplementedError

    def split(self, layers: Sequence[PairBatch]) -> LossSplit:
        """The loss in update parts; a loss over the last layer alone has one."""
        return LossSplit(self(layers))

    @property
    def has_auxiliary_part(self) -> bool:
        """Whether :meth:`split` gives an auxiliary part (terms beyond the last layer's)."""
        return False

    def embed(self, last: torch.Tensor) -> torch.Tensor:
        """The sentence embedding this objective trains, from the last layer's pooled output
        (the output itself; a pooler head maps it)."""
        return last

    def save_artifacts(self, directory: Path) -> None:
        """Write what the objective learned besides the encoder (nothing by default)."""

    def describe(self) -> dict[str, object]:
        """Class and scalar settings (base loss included): what a checkpoint must match."""
        settings: dict[str, object] = {"loss": type(self).__name__}
        for name, value in sorted(vars(self).items()):
            if name.startswith("_") or name == "training":
                continue
            if isinstance(value, bool | int | float | str) or value is None:
                settings[name] = value
            elif isinstance(value, list | tuple) and all(isinstance(v, int) for v in value):
                settings[name] = list(value)
            elif name == "base":
                settings["base"] = type(value).__name__
        return settings


class LastLayerLoss(ModelLoss):
    """Plain training: the base loss on the last layer at full width."""

    def __init__(self, base: BaseLoss) -> None:
        super().__init__()
        self.base = base

    def forward(self, layers: Sequence[PairBatch]) -> torch.Tensor:
        return self.base(layers[-1])


class MatryoshkaLoss(ModelLoss):
    """Matryoshka representation learning: the base loss summed over prefixes of the last layer
    (weight 1 each, as sentence-transformers' MatryoshkaLoss does by default)."""

    def __init__(self, base: BaseLoss, dims: Sequence[int]) -> None:
        super().__init__()
        self._prefixes = NestedPrefixLoss(base, dims)
        self.base = base
        self.dims = self._prefixes.dims

    def forward(self, layers: Sequence[PairBatch]) -> torch.Tensor:
        return self._prefixes(layers[-1])
