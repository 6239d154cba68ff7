"""The shared training loop's task for learned compressors (:func:`demitasse.loop.run_loop`
runs it; :meth:`~demitasse.compress.learned.LearnedCompressor.run_training` sets it up), and
the per-step gradient statistics it records for analyses such as SMEC's sequential vs
parallel training.

torch is imported inside the functions, so that ``import demitasse.compress`` stays free of it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from demitasse.compress.learned import BatchLoss, LearnedCompressor


class GradientLog:
    """Per-step gradient statistics of each trained module (importance logits excluded).

    Each step records the loss and every module's squared gradient norm; every ``window``
    steps also the gradient variance of each module over that window of mini-batches,
    mean ||g_i||² − ||mean g_i||² (the trace of the gradient covariance), as in SMEC's
    comparison of sequential and parallel Matryoshka training.
    """

    window: ClassVar[int] = 5

    def __init__(self, modules: list[torch.nn.Module]) -> None:
        self.parameters = [
            [p for name, p in m.named_parameters() if name != "logits"] for m in modules
        ]
        self.step = 0
        self._sums: list[torch.Tensor | None] = [None] * len(modules)
        self._squares = [0.0] * len(modules)

    def record(self, loss: torch.Tensor) -> dict[str, Any]:
        import torch

        self.step += 1
        norms, variances = [], []
        with torch.no_grad():
            for i, params in enumerate(self.parameters):
                grads = [p.grad.flatten() for p in params if p.grad is not None]
                g = torch.cat(grads) if grads else torch.zeros(1)
                squared = float(g.pow(2).sum())
                norms.append(squared)
                total = self._sums[i]
                summed = g.clone() if total is None else total + g
                self._sums[i] = summed
                self._squares[i] += squared
                if self.step % self.window == 0:
                    mean = summed / self.window
                    variances.append(self._squares[i] / self.window - float(mean.pow(2).sum()))
                    self._sums[i], self._squares[i] = None, 0.0
        entry: dict[str, Any] = {
            "step": self.step,
            "loss": float(loss.detach()),
            "grad_sq_norm": norms,
        }
        if variances:
            entry["grad_variance"] = variances
        return entry


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
        record: bool = True,
    ) -> None:
        self.compressor, self.modules, self.optimisers = compressor, modules, optimisers
        self.batch_loss, self.description = batch_loss, description
        recording = record and getattr(compressor, "record_gradients", False)
        self.log = GradientLog(modules) if recording else None
        self.epoch = 0
        self.best: list[dict[str, Any]] = []

    def steps_per_epoch(self) -> int:
        """Mini-batches per epoch (a last batch of one row is left out, see ``_batches``)."""
        n, size = len(self.compressor._train_rows), int(self.compressor.batch_size)
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
        if self.log is not None:
            entry = {"run": self.description, "epoch": self.epoch, **self.log.record(loss)}
            self.compressor.history_.append(entry)
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
