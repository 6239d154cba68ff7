# ruff: noqa: N803  (scikit-learn convention: matrices are capitalised)
"""Per-step gradient statistics of a learned compressor's training, for analyses such as SMEC's
sequential vs parallel training (``smec_analyses.py``, the paper's Figure 6).

The library ships no analysis code: a learned compressor calls its step hook
(:meth:`~demitasse.compress.learned.LearnedCompressor._after_backward`) after each backward
pass, and :class:`GradientRecording` fills ``history_`` from it. The fit itself is the same
with or without the recording (the statistics are read under ``no_grad`` and draw no random
numbers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from demitasse.compress.smec import SMEC

if TYPE_CHECKING:
    import torch

    from demitasse.compress.learned_loop import TrainingStep


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


class GradientRecording:
    """Mixin for a learned compressor: ``history_`` lists, per training step of its own
    network, ``{"run", "epoch", "step", "loss", "grad_sq_norm"[, "grad_variance"]}`` (see
    :class:`GradientLog`; one log per training run, so steps and windows restart with each)."""

    history_: list[dict[str, Any]]
    _gradient_log: GradientLog

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        self.history_ = []
        super()._fit(X, **supervision)  # type: ignore[misc]

    def _after_backward(self, step: TrainingStep) -> None:
        if step.step == 1:  # a new training run
            self._gradient_log = GradientLog(step.modules)
        entry = self._gradient_log.record(step.loss)
        self.history_.append({"run": step.run, "epoch": step.epoch, **entry})


class GradientRecordingSMEC(GradientRecording, SMEC):
    """SMEC whose ``fit`` (and ``extend``, afresh) records per-step gradient statistics of its
    stages' training in ``history_``; the distilled width networks' fits are not recorded."""

    def extend(
        self, X: Any, min_dim: int, *, fit_data: str | None = None, **supervision: Any
    ) -> Self:
        self.history_ = []
        return super().extend(X, min_dim, fit_data=fit_data, **supervision)


def variance_series(history: list[dict[str, Any]], run: str, module: int) -> np.ndarray:
    """(step within the run, window variance, relative variance) of one trained module.

    Relative variance = window variance / mean ‖g‖² over the window: the share of the
    gradient's energy that is mini-batch noise (0: every batch agrees, 1: pure noise).
    """
    window_steps = GradientLog.window
    rows, window = [], []
    for entry in history:
        if entry["run"] != run:
            continue
        window = [*window[-(window_steps - 1) :], entry["grad_sq_norm"][module]]
        if "grad_variance" in entry:
            variance = entry["grad_variance"][module]
            rows.append((entry["step"], variance, variance / max(np.mean(window), 1e-30)))
    return np.array(rows, dtype=float).reshape(-1, 3)
