"""How a fine-tuning step turns the objective's loss into parameter updates.

The objective gives its value in parts (:meth:`demitasse.training.losses.ModelLoss.split`): the
last layer's terms and, for a layer-wise loss such as Espresso, the inner layers' terms. By
default the trainer backpropagates their sum. Two options change that:

* **Gradient priority** gives the last layer's terms right of way: wherever, in one parameter
  tensor, the inner layers' gradient points against the last layer's, its component along the
  last layer's gradient is removed before the two are added (the one-sided form of PCGrad, Yu
  et al., NeurIPS 2020). To first order the inner layers then cost the last layer nothing;
  each step takes a second backward pass.
* **Decoupled updates** make the two parts two updates with their own AdamW moments (one
  optimiser per part). Summed into one gradient, AdamW divides the last layer's share by the
  combined magnitude, so in the shared lower blocks the last layer's loss trains at a fraction
  of the rate it gets in plain training; decoupled, each part moves at the full rate (the inner
  part at ``inner_rate`` times it: under AdamW a loss weight such as alpha no longer sets a
  part's step size). Also a second backward pass per step. At ``inner_rate=0`` the inner
  part's backward pass stops at the parameters of the objective's own and the exit heads.

Parameter groups: the backbone's matrices decay and its vectors and LayerNorms do not; the
objective's own parameters and the model's exit heads train at their own rate (their
matrices decay too). Weight decay is applied once per step, by the first part's optimiser.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import torch

from demitasse.errors import DemitasseError
from demitasse.training.losses import LossSplit, ModelLoss
from demitasse.training.model import SentenceModel

Gradients = list[torch.Tensor | None]


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


def part_gradients(
    split: LossSplit,
    parameters: Sequence[torch.nn.Parameter],
    *,
    priority: bool = False,
    decoupled: bool = False,
    auxiliary_reaches: Collection[int] | None = None,
) -> list[Gradients]:
    """The gradients of ``parameters`` for each update part of ``split``: one part (the sum,
    the auxiliary gradient deconflicted under ``priority``), or two when ``decoupled``.

    ``auxiliary_reaches``: ids of the only parameters the auxiliary part's backward pass goes
    to (the others get None from it); all of them when None.
    """
    params = list(parameters)
    if split.auxiliary is None or not (priority or decoupled):
        for parameter in params:
            parameter.grad = None
        split.total.backward()
        return [[p.grad for p in params]]
    first = torch.autograd.grad(split.primary, params, retain_graph=True, allow_unused=True)
    wanted = [p for p in params if auxiliary_reaches is None or id(p) in auxiliary_reaches]
    found: dict[int, torch.Tensor | None] = {}
    if split.auxiliary.requires_grad and wanted:
        grads = torch.autograd.grad(split.auxiliary, wanted, allow_unused=True)
        found = dict(zip(map(id, wanted), grads, strict=True))
    second = [found.get(id(p)) for p in params]
    if priority:
        second = [deconflicted(g, f) for g, f in zip(second, first, strict=True)]
    if decoupled:
        return [list(first), second]
    return [[_add(f, g) for f, g in zip(first, second, strict=True)]]


def parameter_groups(
    model: SentenceModel,
    objective: ModelLoss,
    learning_rate: float,
    own_rate: float,
    weight_decay: float,
    train_backbone: bool,
) -> list[dict[str, Any]]:
    """AdamW parameter groups; ``rate`` is a group's peak learning rate and ``backbone``
    whether an update part's rate factor applies to it (it sets how far each part moves the
    shared encoder)."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    own_decay: list[torch.nn.Parameter] = []
    own_no_decay: list[torch.nn.Parameter] = []
    model.backbone.requires_grad_(train_backbone)
    if train_backbone:
        for name, parameter in model.backbone.named_parameters():
            (no_decay if parameter.ndim < 2 or "LayerNorm" in name else decay).append(parameter)
    for parameter in [*objective.parameters(), *model.exit_heads.parameters()]:
        if parameter.requires_grad:  # heads and classifiers: decay their matrices too
            (own_decay if parameter.ndim >= 2 else own_no_decay).append(parameter)
    groups = [
        {"params": params, "weight_decay": wd, "rate": rate, "backbone": backbone}
        for params, wd, rate, backbone in (
            (decay, weight_decay, learning_rate, True),
            (no_decay, 0.0, learning_rate, True),
            (own_decay, weight_decay, own_rate, False),
            (own_no_decay, 0.0, own_rate, False),
        )
    ]
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise DemitasseError("training: nothing to train (frozen backbone, no loss parameters)")
    return groups


class Updates:
    """The optimisers of one run (one AdamW per update part) and the step they take."""

    def __init__(
        self,
        groups: list[dict[str, Any]],
        own: Collection[int],
        *,
        learning_rate: float,
        max_grad_norm: float,
        part_rates: Sequence[float],
        priority: bool,
    ) -> None:
        self.parameters = [p for g in groups for p in g["params"]]
        self.part_rates = list(part_rates)
        self.decoupled = len(self.part_rates) > 1
        self.priority = priority
        self.max_grad_norm = max_grad_norm
        # At inner rate 0 the encoder takes no step from the inner terms: stop their backward
        # pass at the objective's own parameters and the exit heads.
        self.auxiliary_reaches = set(own) if self.decoupled and not self.part_rates[1] else None
        self.optimisers = [torch.optim.AdamW(groups, lr=learning_rate)] + [
            torch.optim.AdamW([{**g, "weight_decay": 0.0} for g in groups], lr=learning_rate)
            for _ in self.part_rates[1:]
        ]

    def set_learning_rates(self, factor: float) -> None:
        """Every group at ``factor`` × its peak rate (× its part's rate on the backbone)."""
        for optimiser, rate in zip(self.optimisers, self.part_rates, strict=True):
            for group in optimiser.param_groups:
                group["lr"] = group["rate"] * factor * (rate if group["backbone"] else 1.0)

    def step(self, split: LossSplit) -> None:
        """Backpropagate ``split`` and step each part's optimiser on its clipped gradients."""
        parts = part_gradients(
            split,
            self.parameters,
            priority=self.priority,
            decoupled=self.decoupled,
            auxiliary_reaches=self.auxiliary_reaches,
        )
        for optimiser, gradients in zip(self.optimisers, parts, strict=True):
            for parameter, gradient in zip(self.parameters, gradients, strict=True):
                parameter.grad = gradient
            torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
            optimiser.step()
