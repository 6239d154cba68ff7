"""The optimisers of the learned compressors: ``torch.optim.AdamW`` for the network weights and
:class:`MaxNormalizedSGD` for SMEC's importance logits.

This module imports torch at the top; the compressors import it only when they train, so that
``import demitasse.compress`` stays free of torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class MaxNormalizedSGD(torch.optim.Optimizer):
    """Plain gradient steps scaled so that each parameter's largest coordinate moves by ``lr``
    and the others in proportion.

    For importance logits that rank input dimensions: Adam would blow tiny but consistent
    gradients up to full-size steps, which ruins the ranking.
    """

    def __init__(self, params: Iterable[Any], lr: float, eps: float = 1e-8) -> None:
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise NotImplementedError("MaxNormalizedSGD takes no closure")
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    largest = float(p.grad.abs().max())
                    p.add_(p.grad, alpha=-group["lr"] / (largest + group["eps"]))


def compressor_optimisers(
    groups: list[dict[str, Any]], lr: float, weight_decay: float
) -> list[torch.optim.Optimizer]:
    """AdamW over the parameter groups, and :class:`MaxNormalizedSGD` over those marked
    ``"max_normalized": True``; a group's own ``"lr"`` overrides ``lr``. Step them together."""
    plain, normalized = [], []
    for group in groups:
        group = {**group, "params": list(group["params"])}
        if group.pop("max_normalized", False):
            normalized.append(group)
        else:
            plain.append(group)
    optimisers: list[torch.optim.Optimizer] = []
    if plain:
        optimisers.append(torch.optim.AdamW(plain, lr=lr, weight_decay=weight_decay))
    if normalized:
        optimisers.append(MaxNormalizedSGD(normalized, lr=lr))
    return optimisers
