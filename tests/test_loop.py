"""The shared early-stopping loop: budgets, validation schedule, patience, best weights and
resumption, on a scripted task whose validation figures are chosen by the test."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from demitasse.errors import DemitasseError
from demitasse.loop import LoopSettings, LoopState, run_loop


class ScriptedTask:
    """Batches are integers; 'weights' are the number of steps taken; validation returns the
    next figure of a script (or a function of the weights)."""

    def __init__(self, batches_per_epoch: int, figures: list[float] | None = None) -> None:
        self.batches_per_epoch = batches_per_epoch
        self.figures = list(figures or [])
        self.weights = 0
        self.kept: int | None = None
        self.seen: list[tuple[int, Any]] = []
        self.validated_at: list[int] = []

    def epoch_batches(self, epoch: int) -> Iterable[Any]:
        return [(epoch, i) for i in range(self.batches_per_epoch)]

    def train_step(self, batch: Any) -> float:
        self.weights += 1
        self.seen.append(batch)
        return 1.0 / self.weights

    def validate(self) -> float:
        self.validated_at.append(self.weights)
        return self.figures.pop(0) if self.figures else 1.0

    def keep_best(self) -> None:
        self.kept = self.weights

    def restore_best(self) -> None:
        assert self.kept is not None
        self.weights = self.kept


def test_epochs_validate_at_each_end_and_restore_the_best():
    task = ScriptedTask(3, [5.0, 3.0, 4.0, 3.5, 9.0])
    state = run_loop(task, LoopSettings(max_epochs=10, patience=3))
    assert task.validated_at == [3, 6, 9, 12, 15]
    assert state.stopped_early and state.best == 3.0 and state.best_step == 6
    assert task.weights == 6  # the best weights are back in place
    assert [h["validation"] for h in state.history] == [5.0, 3.0, 4.0, 3.5, 9.0]


def test_step_budget_and_eval_every_without_epoch_validation():
    task = ScriptedTask(4, [3.0, 2.0, 1.0])
    state = run_loop(task, LoopSettings(max_steps=10, eval_every=4, eval_each_epoch=False))
    assert state.step == 10 and not state.stopped_early
    assert task.validated_at == [4, 8, 10]  # the last steps are validated too
    assert task.weights == 10 and state.best_step == 10


def test_higher_is_better_and_min_delta():
    task = ScriptedTask(1, [0.5, 0.505, 0.6, 0.59])
    settings = LoopSettings(max_epochs=4, higher_is_better=True, min_delta=0.01)
    state = run_loop(task, settings)
    assert state.best == 0.6 and state.best_step == 3 and task.weights == 3


def test_validate_at_start_means_training_must_beat_the_untrained_weights():
    task = ScriptedTask(2, [1.0, 2.0, 3.0])
    state = run_loop(task, LoopSettings(max_epochs=5, patience=2, validate_at_start=True))
    assert task.validated_at == [0, 2, 4]
    assert state.best_step == 0 and task.weights == 0 and state.stopped_early


def test_without_validation_the_last_weights_stay():
    task = ScriptedTask(3)
    state = run_loop(task, LoopSettings(max_epochs=2, eval_each_epoch=False))
    assert task.validated_at == [] and task.weights == 6 and state.history == []


class MemoryStore:
    """Keeps checkpoints in memory together with the task's weights."""

    def __init__(self, task: ScriptedTask, stop_after_saves: int | None = None) -> None:
        self.task = task
        self.saved: tuple[dict[str, Any], int, int | None] | None = None
        self.saves = 0
        self.stop_after_saves = stop_after_saves

    def load(self) -> LoopState | None:
        if self.saved is None:
            return None
        state, self.task.weights, self.task.kept = self.saved
        return LoopState.from_json(state)

    def save(self, state: LoopState) -> None:
        self.saved = (state.to_json(), self.task.weights, self.task.kept)
        self.saves += 1
        if self.stop_after_saves is not None and self.saves >= self.stop_after_saves:
            raise KeyboardInterrupt


def test_a_stopped_run_resumes_where_its_checkpoint_left_it():
    figures = [4.0, 3.0, 3.5, 2.0, 2.5, 2.6]
    settings = LoopSettings(max_epochs=3, eval_every=2, checkpoint_every=3, patience=5)
    whole = ScriptedTask(4, list(figures))
    expected = run_loop(whole, settings)

    first = ScriptedTask(4, list(figures))
    store = MemoryStore(first, stop_after_saves=2)
    with pytest.raises(KeyboardInterrupt):
        run_loop(first, settings, store=store)
    resumed = ScriptedTask(4)
    assert store.saved is not None
    resumed.figures = figures[len(first.validated_at) :]
    store.task, store.stop_after_saves = resumed, None
    state = run_loop(resumed, settings, store=store)
    assert first.seen + resumed.seen == whole.seen  # no batch taken twice or skipped
    assert state.history == expected.history and state.best_step == expected.best_step
    assert resumed.weights == whole.weights
    assert run_loop(resumed, settings, store=store).finished  # a finished run returns at once


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"max_epochs": 0}, {"max_steps": 5, "eval_every": 0}, {"max_steps": 2, "patience": -1}],
)
def test_settings_are_checked(kwargs):
    with pytest.raises(DemitasseError):
        LoopSettings(**kwargs)


def test_a_non_finite_loss_stops_with_one_line():
    task = ScriptedTask(2)
    task.train_step = lambda batch: float("nan")  # type: ignore[method-assign]
    with pytest.raises(DemitasseError, match="loss became nan at step 0"):
        run_loop(task, LoopSettings(max_epochs=1))
