"""The shared training loop's task for learned compressors (:func:`demitasse.loop.run_loop`
runs it; :meth:`~demitasse.compress.learned.LearnedCompressor.run_training` sets it up), and
what its step hook sees (:class:`TrainingStep`).

torch is imported inside the functions, so that ``import demitasse.compress`` stays free of it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from demitasse.compress.learned import BatchLoss, LearnedCompressor


@dataclass(frozen=True)
class TrainingStep:
    """One training step, as :meth:`LearnedCompressor._after_backward
    <demitasse.compress.learned.LearnedCompressor._after_backward>` sees it: after the backward
    pass, before the optimiser step."""

    run: str  #: the training run's description (``"smec: stage 16"``)
    epoch: int  #: the epoch, from 0
    step: int  #: the step within the run, from 1
    loss: torch.Tensor  #: the batch loss (its backward pass done)
    modules: list[torch.nn.Module]  #: the trained modules; their parameters hold ``.grad``


class CompressorTraining:
    """The shared loop's task for a learned compressor: one optimiser step per mini-batch of
    the training rows, the validation loss over all validation rows, the best weights kept as
    copies in memory."""

    def __init__(
        self,
        compressor: LearnedCompressor,
        modules: list[torch.nn.Module],
        optimisers: list[torch.optim.Optimizer],
        batch_loss: BatchLoss,
        description: str,
        observed: bool = True,
    ) -> None:
        self.compressor, self.modules, self.optimisers = compressor, modules, optimisers
        self.batch_loss, self.description = batch_loss, description
        self.observed = observed  # whether steps go to the compressor's _after_backward
        self.epoch = 0
        self.step = 0
        self.best: list[dict[str, Any]] = []

    def steps_per_epoch(self) -> int:
        """Mini-batches per epoch (a last batch of one row is left out, see ``_batches``)."""
        n, size = len(self.compressor._train_rows), int(self.compressor._training.batch_size)
        return n // size + (n % size >= 2)

    def epoch_batches(self, epoch: int) -> Iterator[torch.Tensor]:
        # Not a pure function of the epoch, as the loop would like for resuming: the shuffle
        # continues the compressor's seeded generator, which the supervised terms draw from
        # too. These fits are never resumed from a checkpoint.
        self.epoch = epoch
        return self.compressor._batches(self.compressor._train_rows, shuffle=True)

    def train_step(self, rows: torch.Tensor) -> float:
        for module in self.modules:
            module.train()
        loss = self.batch_loss(rows, True)
        for optimiser in self.optimisers:
            optimiser.zero_grad(set_to_none=True)
        loss.backward()
        self.step += 1
        if self.observed:
            step = TrainingStep(self.description, self.epoch, self.step, loss, self.modules)
            self.compressor._after_backward(step)
        for optimiser in self.optimisers:
            optimiser.step()
        return float(loss.detach())

    def validate(self) -> float:
        """The mean loss per validation row."""
        import torch

        compressor = self.compressor
        for module in self.modules:
            module.eval()
        with torch.no_grad():
            total = sum(
                float(self.batch_loss(rows, False)) * len(rows)
                for rows in compressor._batches(compressor._val_rows, shuffle=False)
            )
        return total / max(1, len(compressor._val_rows))

    def keep_best(self) -> None:
        self.best = [copy.deepcopy(module.state_dict()) for module in self.modules]

    def restore_best(self) -> None:
        for module, state in zip(self.modules, self.best, strict=True):
            module.load_state_dict(state)
            module.eval()
