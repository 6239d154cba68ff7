"""Fine-tuning a sentence encoder on the shared training loop (:mod:`demitasse.loop`).

:func:`fine_tune` describes its work to :func:`demitasse.loop.run_loop` as a task: a step is
the learning-rate schedule (linear warm-up, then linear decay), the forward pass, the
gradients of each update part (:mod:`demitasse.training.updates`: decoupled updates, gradient
priority) and the optimiser steps with gradient clipping; validation is the score on a dev set
of scored pairs (STS-B dev by default in the CLI: higher is better, the untrained model scored
first), every ``eval_every`` steps and at each epoch end, with early stopping after
``patience`` validations without improvement. Checkpoints are written atomically so an
interrupted run resumes where it stopped. Runs on the GPU when the model is on one.

Layout of ``output_dir``::

    checkpoint/   see :mod:`demitasse.training.checkpoint`
    best/         the sentence-transformers model with the best dev score (the result)
    last/         the model at the end of training (fixed-budget comparisons)
    training.json the configuration, dev scores per validation, steps and seconds

A resumed run replays the same batch order (it is a function of the seed and the epoch) and
skips the batches already done; dropout noise after the resume differs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from demitasse.data.nli import NLI_LABELS, NLIPairs, Triples
from demitasse.data.overlap import UnorderedPair, held_out_mask
from demitasse.data.pairs import ScoredPairs
from demitasse.errors import DataError, DemitasseError
from demitasse.io import atomic_write_json
from demitasse.loop import LoopSettings, LoopState, run_loop
from demitasse.metrics import spearman_x100
from demitasse.training.checkpoint import _Checkpoint
from demitasse.training.checkpoint import check_run_directory as check_run_directory
from demitasse.training.losses import ModelLoss, PairBatch
from demitasse.training.model import SentenceModel
from demitasse.training.updates import Updates, parameter_groups

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class TrainingSet:
    """Training examples of one kind: (anchor, positive[, negative]), graded or labelled pairs.

    Every batch comes from one set, so a batch is scored, labelled or neither.
    """

    name: str
    anchors: list[str]
    positives: list[str]
    negatives: list[str] | None = None
    scores: np.ndarray | None = None
    labels: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.anchors)
        if n < 2 or len(self.positives) != n:
            raise DataError(f"{self.name}: needs >= 2 examples with a positive each")
        if self.negatives is not None and len(self.negatives) != n:
            raise DataError(f"{self.name}: {len(self.negatives)} negatives for {n} anchors")
        if self.scores is not None and len(self.scores) != n:
            raise DataError(f"{self.name}: {len(self.scores)} scores for {n} pairs")
        if self.labels is not None and len(self.labels) != n:
            raise DataError(f"{self.name}: {len(self.labels)} labels for {n} pairs")

    def __len__(self) -> int:
        return len(self.anchors)

    def without_pairs(self, held_out: set[UnorderedPair]) -> TrainingSet:
        """The examples whose (anchor, positive) and (anchor, negative) pairs are not in
        ``held_out``, in their order and under the same name."""
        drop = held_out_mask(self.anchors, self.positives, held_out)
        if self.negatives is not None:
            drop |= held_out_mask(self.anchors, self.negatives, held_out)
        keep = ~drop
        if keep.sum() < 2:
            raise DataError(
                f"{self.name}: {int(keep.sum())} of {len(self)} examples left once the "
                "evaluation pairs are removed; training needs at least 2"
            )
        return self._rows(keep)

    def head(self, n: int) -> TrainingSet:
        """The first ``n`` examples (all of them when there are fewer), under the same name."""
        keep = np.arange(len(self)) < n
        return self if keep.all() else self._rows(keep)

    def _rows(self, keep: np.ndarray) -> TrainingSet:
        def kept(items: list[str]) -> list[str]:
            return [item for item, k in zip(items, keep, strict=True) if k]

        return TrainingSet(
            self.name,
            kept(self.anchors),
            kept(self.positives),
            None if self.negatives is None else kept(self.negatives),
            None if self.scores is None else self.scores[keep],
            None if self.labels is None else self.labels[keep],
        )

    @classmethod
    def from_scored_pairs(cls, pairs: ScoredPairs, low: float, high: float) -> TrainingSet:
        """Graded pairs with scores mapped from [low, high] onto [0, 1] (sets mix in one run)."""
        scores = (np.asarray(pairs.scores, dtype=np.float32) - low) / (high - low)
        return cls(pairs.name, pairs.sentences1, pairs.sentences2, None, scores)

    @classmethod
    def from_triples(cls, name: str, triples: Triples) -> TrainingSet:
        return cls(name, triples.anchors, triples.positives, triples.negatives)

    @classmethod
    def from_nli(cls, name: str, pairs: NLIPairs) -> TrainingSet:
        """Premise–hypothesis pairs with label indices in ``NLI_LABELS`` order."""
        labels = np.array([NLI_LABELS.index(label) for label in pairs.labels], dtype=np.int64)
        return cls(name, pairs.premises, pairs.hypotheses, labels=labels)

    @classmethod
    def unlabeled(cls, name: str, texts: list[str]) -> TrainingSet:
        """Each sentence paired with itself: unsupervised SimCSE (dropout makes two views)."""
        return cls(name, list(texts), list(texts))


@dataclass(frozen=True)
class TrainingConfig:
    """Hyperparameters of the loop and of the updates (the objective carries its own).

    ``max_epochs``, ``max_steps``, ``eval_every``, ``patience`` and ``checkpoint_every`` mean
    what they mean in :class:`demitasse.loop.LoopSettings`.
    """

    max_epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    max_steps: int | None = None
    eval_every: int = 100
    patience: int | None = 5
    checkpoint_every: int = 100
    seed: int = 0
    #: False trains only the objective's own parameters (e.g. a pooler head): encoder frozen.
    train_backbone: bool = True
    #: Learning rate of the objective's own parameters and the exit heads; None: the
    #: backbone's. Small new modules starting from scratch want a far larger rate than a
    #: pretrained encoder does.
    objective_learning_rate: float | None = None
    #: The inner layers' gradient loses its component against the last layer's (see
    #: :mod:`demitasse.training.updates`; needs a layer-wise objective).
    gradient_priority: bool = False
    #: The last layer's and the inner layers' terms update with their own AdamW moments.
    decoupled_updates: bool = False
    #: With decoupled updates: the learning-rate factor of the inner layers' update of the
    #: encoder (0: their terms train only the exit heads and the objective's parameters).
    inner_rate: float = 1.0

    def __post_init__(self) -> None:
        for name in ("max_epochs", "batch_size", "eval_every", "checkpoint_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise DemitasseError(f"training: {name} must be a positive integer")
        if self.batch_size < 2:
            raise DemitasseError("training: batch_size must be >= 2 (in-batch losses)")
        if self.max_steps is not None and self.max_steps < 1:
            raise DemitasseError("training: max_steps must be a positive integer")
        if self.patience is not None and self.patience < 1:
            raise DemitasseError("training: patience must be a positive integer")
        if not self.learning_rate > 0 or not 0 <= self.warmup_ratio < 1:
            raise DemitasseError("training: learning_rate must be > 0, warmup_ratio in [0, 1)")
        if self.objective_learning_rate is not None and not self.objective_learning_rate > 0:
            raise DemitasseError("training: objective_learning_rate must be > 0")
        if self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise DemitasseError("training: weight_decay >= 0 and max_grad_norm > 0 needed")
        if self.inner_rate < 0 or (self.inner_rate != 1.0 and not self.decoupled_updates):
            raise DemitasseError(
                "training: inner_rate must be >= 0 and applies with decoupled_updates"
            )

    @property
    def update_rates(self) -> list[float]:
        """The backbone's learning-rate factor of each update part."""
        return [1.0, self.inner_rate] if self.decoupled_updates else [1.0]


@dataclass
class TrainingResult:
    """``model_dir``: the best dev checkpoint (the final model without dev); ``last_dir``: the
    final model, for comparisons at a fixed budget."""

    model_dir: Path
    last_dir: Path
    best_score: float | None
    steps: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)


def epoch_batches(
    sets: Sequence[TrainingSet], batch_size: int, seed: int, epoch: int
) -> list[tuple[int, np.ndarray]]:
    """(set index, row indices) of every batch of one epoch, in training order.

    Rows are shuffled within each set and the batches of all sets shuffled together; a last
    batch smaller than 2 rows is dropped.
    """
    rng = np.random.default_rng([seed, epoch])
    batches = []
    for index, training_set in enumerate(sets):
        order = rng.permutation(len(training_set))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            if len(rows) >= 2:
                batches.append((index, rows))
    return [batches[i] for i in rng.permutation(len(batches))]


def _layer_batches(
    model: SentenceModel, training_set: TrainingSet, rows: np.ndarray
) -> list[PairBatch]:
    """Embed one batch with gradients and split it into one PairBatch per hidden state, each
    through its exit head where the model has one."""
    texts = [training_set.anchors[i] for i in rows] + [training_set.positives[i] for i in rows]
    if training_set.negatives is not None:
        texts += [training_set.negatives[i] for i in rows]
    scores = labels = None
    if training_set.scores is not None:
        scores = torch.as_tensor(training_set.scores[rows], device=model.device)
    if training_set.labels is not None:
        labels = torch.as_tensor(training_set.labels[rows], device=model.device)
    n = len(rows)
    layers = []
    for pooled in model(texts):
        negatives = pooled[2 * n :] if training_set.negatives is not None else None
        layers.append(PairBatch(pooled[:n], pooled[n : 2 * n], negatives, scores, labels))
    return model.exit_heads.apply_to(layers)


def dev_score(
    model: SentenceModel,
    dev: ScoredPairs,
    layers: Sequence[int] | None = None,
    batch_size: int = 64,
    head: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> float:
    """Mean Spearman ×100 of cosine on ``dev`` over hidden-state ``layers`` (default: last),
    through ``head`` (e.g. a pooler) when given."""
    layers = [model.num_layers] if layers is None else list(layers)
    texts = dev_texts(dev)
    was_training = model.training
    model.eval()
    pooled: dict[int, list[torch.Tensor]] = {layer: [] for layer in layers}
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            outputs = model(texts[start : start + batch_size])
            for layer in layers:
                vectors = outputs[layer] if head is None else head(outputs[layer])
                pooled[layer].append(vectors.float())
    model.train(was_training)
    scores = [pairs_score(torch.cat(pooled[layer]).cpu().numpy(), texts, dev) for layer in layers]
    return float(np.mean(scores))


def dev_texts(dev: ScoredPairs) -> list[str]:
    """The distinct sentences of ``dev``, in first-seen order."""
    return list(dict.fromkeys(dev.sentences1 + dev.sentences2))


def pairs_score(vectors: np.ndarray, texts: Sequence[str], dev: ScoredPairs) -> float:
    """Spearman ×100 of the cosine of each pair of ``dev``, row i of ``vectors`` being
    ``texts[i]``."""
    row = {text: i for i, text in enumerate(texts)}
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    left = unit[[row[t] for t in dev.sentences1]]
    right = unit[[row[t] for t in dev.sentences2]]
    return spearman_x100((left * right).sum(axis=1), np.asarray(dev.scores))


def _learning_rate_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


class _FineTuneTask:
    """One fine-tuning run as a :class:`demitasse.loop.LoopTask`; batches are (set index, rows)
    as :func:`epoch_batches` gives them."""

    def __init__(
        self,
        model: SentenceModel,
        objective: ModelLoss,
        train_sets: Sequence[TrainingSet],
        config: TrainingConfig,
        dev: ScoredPairs | None,
        dev_layers: Sequence[int] | None,
        best_dir: Path,
    ) -> None:
        self.model, self.objective, self.train_sets = model, objective, train_sets
        self.config, self.dev, self.dev_layers, self.best_dir = config, dev, dev_layers, best_dir
        own_rate = config.objective_learning_rate or config.learning_rate
        groups = parameter_groups(
            model, objective, config.learning_rate, own_rate, config.weight_decay,
            config.train_backbone,
        )  # fmt: skip
        own = [*objective.parameters(), *model.exit_heads.parameters()]
        self.updates = Updates(
            groups,
            {id(p) for p in own},
            learning_rate=config.learning_rate,
            max_grad_norm=config.max_grad_norm,
            part_rates=config.update_rates,
            priority=config.gradient_priority,
        )
        self.steps_per_epoch = len(self.epoch_batches(0))
        self.total = self.steps_per_epoch * config.max_epochs
        if config.max_steps is not None:
            self.total = min(self.total, config.max_steps)
        self.warmup = max(1, round(config.warmup_ratio * self.total))
        self.step = 0  # the loop's step count, which the learning-rate schedule follows

    def epoch_batches(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        return epoch_batches(self.train_sets, self.config.batch_size, self.config.seed, epoch)

    def train_step(self, batch: tuple[int, np.ndarray]) -> float:
        set_index, rows = batch
        self.updates.set_learning_rates(_learning_rate_factor(self.step, self.warmup, self.total))
        split = self.objective.split(_layer_batches(self.model, self.train_sets[set_index], rows))
        loss = split.total
        if not torch.isfinite(loss):
            raise DemitasseError(f"training: loss became {float(loss)} at step {self.step}")
        self.updates.step(split)
        self.step += 1
        return float(loss.detach())

    def validate(self) -> float:
        assert self.dev is not None  # the loop validates only when there is a dev set
        return dev_score(self.model, self.dev, self.dev_layers, head=self.objective.embed)

    def keep_best(self) -> None:
        self.model.save(self.best_dir, self.objective.save_artifacts)

    def restore_best(self) -> None:
        """Nothing to do: the best model stays in ``best/``; the model in memory is the final
        one, which ``last/`` keeps."""


class _RunStore:
    """The run's checkpoint as the loop's :class:`demitasse.loop.CheckpointStore`; when the
    run finishes it also writes ``last/`` (and ``best/`` without a dev set) and
    ``training.json``, before the checkpoint that marks it finished."""

    def __init__(self, task: _FineTuneTask, output_dir: Path, signature: dict[str, Any]) -> None:
        self.task, self.output_dir, self.signature = task, output_dir, signature
        self.checkpoint = _Checkpoint(output_dir / "checkpoint")

    def load(self) -> LoopState | None:
        if not self.checkpoint.exists():
            return None
        if self.checkpoint.read_state().get("signature") != self.signature:
            raise DemitasseError(
                f"{self.checkpoint.directory} belongs to a run with other settings; "
                "use another output directory or delete it"
            )
        task = self.task
        saved = self.checkpoint.load(task.model, task.objective, task.updates.optimisers)
        state = LoopState.from_json(saved)
        task.step = state.step
        if not state.finished:
            logger.info("resuming %s at step %d", self.output_dir, state.step)
        return state

    def save(self, state: LoopState) -> None:
        task = self.task
        if state.finished:
            task.model.save(self.output_dir / "last", task.objective.save_artifacts)
            if task.dev is None:
                task.model.save(task.best_dir, task.objective.save_artifacts)
        saved = {**state.to_json(), "signature": self.signature}
        self.checkpoint.save(task.model, task.objective, task.updates.optimisers, saved)
        if state.finished:
            atomic_write_json(
                self.output_dir / "training.json",
                {
                    "signature": self.signature,
                    "best_dev": state.best,
                    "steps": state.step,
                    "seconds": round(state.seconds, 1),
                    "history": _dev_history(state),
                },
            )


def fine_tune(
    model: SentenceModel,
    objective: ModelLoss,
    train_sets: Sequence[TrainingSet],
    output_dir: str | Path,
    config: TrainingConfig | None = None,
    dev: ScoredPairs | None = None,
    dev_layers: Sequence[int] | None = None,
    progress: bool = True,
    description: str = "training",
) -> TrainingResult:
    """Train ``model`` on ``train_sets`` with ``objective``; the best model goes to
    ``output_dir/best`` (the last one when there is no ``dev``). Resumes from
    ``output_dir/checkpoint`` when it was written with the same configuration.

    The model gets the exit heads the objective reads inner layers through; they train at the
    objective's own rate and are saved with the model."""
    config = config or TrainingConfig()
    if not train_sets:
        raise DataError("training: no training data")
    if (config.gradient_priority or config.decoupled_updates) and not objective.has_auxiliary_part:
        raise DemitasseError(
            "training: gradient_priority and decoupled_updates need an objective with "
            "inner-layer terms (Espresso)"
        )
    output_dir = Path(output_dir)
    model.add_exit_heads(objective.exit_layers)
    torch.manual_seed(config.seed)
    model.train()
    objective.to(model.device)
    task = _FineTuneTask(model, objective, train_sets, config, dev, dev_layers, output_dir / "best")
    signature = {
        "config": dataclasses.asdict(config),
        "sets": [[s.name, len(s)] for s in train_sets],
        "objective": objective.describe(),
    }
    state = run_loop(
        task,
        _loop_settings(config, validates=dev is not None, progress=progress),
        description=description,
        steps_per_epoch=task.steps_per_epoch,
        store=_RunStore(task, output_dir, signature),
    )
    return TrainingResult(
        model_dir=output_dir / "best",
        last_dir=output_dir / "last",
        best_score=state.best,
        steps=state.step,
        seconds=state.seconds,
        history=_dev_history(state),
    )


def _loop_settings(config: TrainingConfig, validates: bool, progress: bool) -> LoopSettings:
    """The loop's settings for ``config``: validation (with a dev set) every ``eval_every``
    steps, at each epoch end and before the first step."""
    return LoopSettings(
        max_epochs=config.max_epochs,
        max_steps=config.max_steps,
        eval_every=config.eval_every if validates else None,
        eval_each_epoch=validates,
        patience=config.patience,
        higher_is_better=True,
        validate_at_start=True,  # the starting point counts: training must beat it
        checkpoint_every=config.checkpoint_every,
        progress=progress,
    )


def _dev_history(state: LoopState) -> list[dict[str, Any]]:
    """The dev score of every validation, by step (rounded as training.json records it)."""
    return [{"step": h["step"], "dev": round(h["validation"], 4)} for h in state.history]
