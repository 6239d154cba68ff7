"""The one early-stopping training loop behind every trained part of demitasse.

Learned compressors, static word vectors and transformer fine-tuning differ in what a step
does (which optimiser, which loss, which parameters) and in how the best weights are kept
(a copy in memory, a folder on disk); they share everything else, which lives here:

- a budget in epochs, steps or both (whichever runs out first);
- validation every ``eval_every`` steps, at the end of every epoch, or both;
- early stopping after ``patience`` validations in a row that did not improve on the best;
- the best weights kept on every improvement and restored at the end;
- a progress bar and an INFO log line per validation;
- a resumable state: with a :class:`CheckpointStore`, a run that was stopped continues from
  its last checkpoint, skipping the batches it already took.

The caller describes its work as a :class:`LoopTask`. Settings use one vocabulary everywhere:
``max_epochs``, ``max_steps``, ``eval_every``, ``patience``, ``progress``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from demitasse.errors import DemitasseError
from demitasse.io import signals_held
from demitasse.progress import progress as show_progress

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopSettings:
    """When to stop, when to validate, and what to show.

    ``patience`` counts validations in a row without an improvement larger than
    ``min_delta``; ``None`` never stops early. With ``eval_every=None`` validation happens at
    the end of each epoch only; ``eval_each_epoch=False`` validates only every ``eval_every``
    steps (and after the last step). ``validate_at_start`` scores the untrained weights first,
    so that training has to beat them.
    """

    max_epochs: int | None = None
    max_steps: int | None = None
    eval_every: int | None = None
    eval_each_epoch: bool = True
    patience: int | None = None
    min_delta: float = 0.0
    higher_is_better: bool = False
    validate_at_start: bool = False
    checkpoint_every: int | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.max_epochs is None and self.max_steps is None:
            raise DemitasseError("training: set max_epochs, max_steps or both")
        for name in ("max_epochs", "max_steps", "eval_every", "patience", "checkpoint_every"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise DemitasseError(f"training: {name} must be a positive integer, got {value!r}")

    @property
    def validates(self) -> bool:
        """False when neither ``eval_every`` nor ``eval_each_epoch`` asks for validation."""
        return self.eval_each_epoch or self.eval_every is not None


@dataclass
class LoopState:
    """Where a run stands; plain JSON so a checkpoint can hold it."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best: float | None = None
    best_step: int | None = None
    stale: int = 0
    stopped_early: bool = False
    finished: bool = False
    seconds: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)
    train_losses: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> LoopState:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


class LoopTask(Protocol):
    """What a caller trains. Only ``epoch_batches``, ``train_step`` and ``validate`` are
    always called; ``keep_best``/``restore_best`` only when there is validation."""

    def epoch_batches(self, epoch: int) -> Iterable[Any]:
        """The batches of one epoch (a pure function of ``epoch`` when runs are resumed)."""
        ...

    def train_step(self, batch: Any) -> float:
        """One optimisation step on ``batch``; returns its loss."""
        ...

    def validate(self) -> float:
        """The validation figure (a loss unless ``higher_is_better``)."""
        ...

    def keep_best(self) -> None:
        """The current weights are the best so far: keep them."""
        ...

    def restore_best(self) -> None:
        """Put the kept weights back (at the end of training)."""
        ...


class CheckpointStore(Protocol):
    """Saves the caller's weights and optimiser state with the loop's :class:`LoopState`."""

    def load(self) -> LoopState | None:
        """The state of the last checkpoint (weights restored), or ``None`` to start afresh."""
        ...

    def save(self, state: LoopState) -> None: ...


class _Loop:
    def __init__(
        self,
        task: LoopTask,
        settings: LoopSettings,
        state: LoopState,
        store: CheckpointStore | None,
        bar: Any,
    ) -> None:
        self.task, self.settings, self.state, self.store, self.bar = (
            task,
            settings,
            state,
            store,
            bar,
        )
        self.started = time.perf_counter() - state.seconds

    def improved(self, value: float) -> bool:
        best = self.state.best
        if best is None:
            return True
        margin = self.settings.min_delta
        return value > best + margin if self.settings.higher_is_better else value < best - margin

    def validate(self) -> None:
        """Validate once per step; keep the best; count validations without improvement."""
        state = self.state
        if state.history and state.history[-1]["step"] == state.step:
            return
        value = float(self.task.validate())
        if math.isnan(value):
            raise DemitasseError(f"training: validation gave NaN at step {state.step}")
        entry: dict[str, Any] = {"step": state.step, "epoch": state.epoch, "validation": value}
        if state.train_losses:
            entry["train_loss"] = sum(state.train_losses) / len(state.train_losses)
            state.train_losses = []
        state.history.append(entry)
        if self.improved(value):
            state.best, state.best_step, state.stale = value, state.step, 0
            self.task.keep_best()
        else:
            state.stale += 1
            patience = self.settings.patience
            state.stopped_early = patience is not None and state.stale >= patience
        self.bar.set_postfix(validation=f"{value:.4f}", best=f"{state.best:.4f}")
        logger.info(
            "step %d: validation %.4f (best %.4f at step %s)",
            state.step,
            value,
            state.best,
            state.best_step,
        )

    def checkpoint(self) -> None:
        if self.store is not None:
            self.state.seconds = time.perf_counter() - self.started
            self.store.save(self.state)

    def out_of_steps(self) -> bool:
        limit = self.settings.max_steps
        return limit is not None and self.state.step >= limit

    def run_epoch(self) -> None:
        """Train one epoch (or its remainder after a resume); validate and checkpoint."""
        state, settings = self.state, self.settings
        for index, batch in enumerate(self.task.epoch_batches(state.epoch)):
            if index < state.batch_in_epoch:
                continue  # taken before the checkpoint this run resumed from
            with signals_held():  # a signal waits for the step (see demitasse.io)
                loss = float(self.task.train_step(batch))
            if not math.isfinite(loss):
                raise DemitasseError(f"training: loss became {loss} at step {state.step}")
            state.step += 1
            state.batch_in_epoch = index + 1
            state.train_losses.append(loss)
            self.bar.update(1)
            at_end = self.out_of_steps()
            due = settings.eval_every and state.step % settings.eval_every == 0
            if settings.validates and (due or at_end):
                self.validate()
            every = settings.checkpoint_every
            if (every and state.step % every == 0) or state.stopped_early or at_end:
                self.checkpoint()
            if state.stopped_early or at_end:
                return
        if settings.eval_each_epoch:
            self.validate()
        state.epoch += 1
        state.batch_in_epoch = 0
        self.checkpoint()

    def run(self) -> LoopState:
        state, settings = self.state, self.settings
        if (
            settings.validates
            and settings.validate_at_start
            and state.step == 0
            and not state.history
        ):
            self.validate()
        while not (state.stopped_early or self.out_of_steps()):
            if settings.max_epochs is not None and state.epoch >= settings.max_epochs:
                break
            before = state.step
            self.run_epoch()
            if state.step == before and state.batch_in_epoch == 0:
                raise DemitasseError("training: an epoch had no batches")
        if state.train_losses and not settings.eval_each_epoch and settings.eval_every:
            # Validation runs on the step count only: the steps since the last one count too.
            self.validate()
        if state.history:
            self.task.restore_best()
        state.finished = True
        state.seconds = time.perf_counter() - self.started
        if self.store is not None:
            self.store.save(state)
        return state


def total_steps(settings: LoopSettings, steps_per_epoch: int | None) -> int | None:
    """The number of steps a run takes at most (``None`` when it cannot be known)."""
    limits = []
    if settings.max_steps is not None:
        limits.append(settings.max_steps)
    if settings.max_epochs is not None and steps_per_epoch is not None:
        limits.append(settings.max_epochs * steps_per_epoch)
    return min(limits) if limits else None


def run_loop(
    task: LoopTask,
    settings: LoopSettings,
    *,
    description: str = "training",
    steps_per_epoch: int | None = None,
    store: CheckpointStore | None = None,
) -> LoopState:
    """Train ``task`` until its budget or patience runs out; the best weights end up in place.

    Returns the final :class:`LoopState` (history of validations, best value and step).
    With ``store``, a finished run is returned as it was and an unfinished one resumes.
    """
    state = (store.load() if store is not None else None) or LoopState()
    if state.finished:
        return state
    bar = show_progress(
        description,
        total=total_steps(settings, steps_per_epoch),
        unit="steps",
        initial=state.step,
        enabled=settings.progress,
    )
    try:
        return _Loop(task, settings, state, store, bar).run()
    finally:
        bar.close()
