"""The fine-tuning loop shared by every training method (Espresso, its baselines, poolers).

AdamW with linear warm-up then linear decay, gradient clipping, evaluation on a dev set of
scored pairs (STS-B dev by default in the CLI) every ``eval_steps`` and at each epoch end,
early stopping after ``patience`` evaluations without improvement, and checkpoints written
atomically so an interrupted run resumes where it stopped. Runs on the GPU when the model is
on one.

Layout of ``output_dir``::

    checkpoint/   backbone.safetensors, optimizer.safetensors, loss.safetensors, state.json
    best/         the sentence-transformers model with the best dev score (the result)
    last/         the model at the end of training (fixed-budget comparisons)
    training.json the configuration, dev scores per evaluation, steps and seconds

A resumed run replays the same batch order (it is a function of the seed and the epoch) and
skips the batches already done; dropout noise after the resume differs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from tqdm.auto import tqdm

from demitasse.data.nli import NLI_LABELS, NLIPairs, Triples
from demitasse.data.overlap import UnorderedPair, held_out_mask
from demitasse.data.pairs import ScoredPairs
from demitasse.errors import DataError, DemitasseError, one_line
from demitasse.io import atomic_directory, atomic_write_json, read_json, strict_json
from demitasse.metrics import spearman_x100
from demitasse.training.losses import ModelLoss, PairBatch
from demitasse.training.model import SentenceModel


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
    """Hyperparameters of the loop (the objective carries its own)."""

    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    max_steps: int | None = None
    eval_steps: int = 100
    patience: int | None = 5
    checkpoint_steps: int = 100
    seed: int = 0
    #: False trains only the objective's own parameters (e.g. a pooler head): encoder frozen.
    train_backbone: bool = True
    #: Learning rate of the objective's own parameters (heads, layer weights); None: the
    #: backbone's. Small new modules starting from scratch want a far larger rate than a
    #: pretrained encoder does.
    objective_learning_rate: float | None = None

    def __post_init__(self) -> None:
        positive = ("epochs", "batch_size", "eval_steps", "checkpoint_steps")
        for name in positive:
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
    """Embed one batch with gradients and split it into one PairBatch per hidden state."""
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
    return layers


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


class _Checkpoint:
    """Atomic save and load of everything needed to resume: weights, optimiser, loop state."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def exists(self) -> bool:
        return (self.directory / "state.json").is_file()

    @staticmethod
    def _earlier_checkpoint(path: Path) -> bool:
        return (path / "state.json").is_file() and (path / "backbone.safetensors").is_file()

    def save(
        self,
        model: SentenceModel,
        objective: ModelLoss,
        optimisers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
    ) -> None:
        with atomic_directory(
            self.directory, kind="training checkpoint", recognise=self._earlier_checkpoint
        ) as tmp:
            save_model(model.backbone, str(tmp / "backbone.safetensors"))
            loss_state = {k: v.contiguous() for k, v in objective.state_dict().items()}
            save_file(loss_state, str(tmp / "loss.safetensors"))
            moments = {}
            for part, optimiser in enumerate(optimisers):
                for index, param_state in optimiser.state_dict()["state"].items():
                    for name, value in param_state.items():
                        key = f"{_part_prefix(part)}{index}.{name}"
                        moments[key] = torch.as_tensor(value).contiguous()
            save_file(moments, str(tmp / "optimizer.safetensors"))
            (tmp / "state.json").write_text(strict_json(state, indent=1), encoding="utf-8")

    def load(
        self,
        model: SentenceModel,
        objective: ModelLoss,
        optimisers: Sequence[torch.optim.Optimizer],
    ) -> dict[str, Any]:
        state = self.read_state()
        try:
            load_model(model.backbone, str(self.directory / "backbone.safetensors"))
            objective.load_state_dict(load_file(str(self.directory / "loss.safetensors")))
            moments = load_file(str(self.directory / "optimizer.safetensors"))
            per_part: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
            for key, value in moments.items():
                prefix, _, moment = key.rpartition(":")
                index, name = moment.split(".", 1)
                per_param = per_part.setdefault(prefix and prefix + ":", {})
                per_param.setdefault(int(index), {})[name] = value.to(model.device)
            for part, optimiser in enumerate(optimisers):
                saved = optimiser.state_dict()
                saved["state"] = per_part.get(_part_prefix(part), {})
                optimiser.load_state_dict(saved)
        except Exception as exc:  # any damage to the saved files: say so in one line
            raise DemitasseError(f"cannot resume from {self.directory}: {one_line(exc)}") from None
        return state

    def read_state(self) -> dict[str, Any]:
        """The checkpoint's state.json, checked field by field (one-line DemitasseError)."""
        path = self.directory / "state.json"
        try:
            state = read_json(path)
        except (OSError, ValueError, RecursionError) as exc:
            raise DemitasseError(f"corrupt checkpoint {path}: {one_line(exc)}") from None
        expected = {"step": int, "history": list, "stale": int, "seconds": int | float}
        if not isinstance(state, dict) or any(
            not isinstance(state.get(key), kind) or isinstance(state.get(key), bool)
            for key, kind in expected.items()
        ):
            raise DemitasseError(
                f"corrupt checkpoint {path}: expected an object with {', '.join(expected)}"
            )
        if not (state.get("best") is None or isinstance(state["best"], int | float)):
            raise DemitasseError(f"corrupt checkpoint {path}: 'best' is not a number")
        return state


def check_run_directory(output_dir: str | Path) -> None:
    """Fail now, in one line, on a run folder :func:`fine_tune` could not use: a file under
    that name, or a checkpoint whose state cannot be read (before data and model load)."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise DemitasseError(f"{output_dir} is not a folder; training writes a run folder there")
    checkpoint = _Checkpoint(output_dir / "checkpoint")
    if checkpoint.exists():
        checkpoint.read_state()


def _part_prefix(part: int) -> str:
    """Key prefix of an update part's optimiser moments (none for the first, as before parts)."""
    return f"part{part}:" if part else ""


def _learning_rate_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


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
    ``output_dir/checkpoint`` when it was written with the same configuration."""
    config = config or TrainingConfig()
    if not train_sets:
        raise DataError("training: no training data")
    output_dir = Path(output_dir)
    torch.manual_seed(config.seed)
    model.train()
    objective.to(model.device)
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    own_decay: list[torch.nn.Parameter] = []
    own_no_decay: list[torch.nn.Parameter] = []
    model.backbone.requires_grad_(config.train_backbone)
    if config.train_backbone:
        for name, parameter in model.backbone.named_parameters():
            (no_decay if parameter.ndim < 2 or "LayerNorm" in name else decay).append(parameter)
    for parameter in objective.parameters():
        if parameter.requires_grad:  # heads and classifiers: decay their matrices too
            (own_decay if parameter.ndim >= 2 else own_no_decay).append(parameter)
    own_rate = config.objective_learning_rate or config.learning_rate
    # "rate": the group's peak learning rate; "backbone": whether an update part's rate
    # factor applies (it sets how far each part moves the shared encoder).
    groups: list[dict[str, Any]] = [
        {"params": params, "weight_decay": wd, "rate": rate, "backbone": backbone}
        for params, wd, rate, backbone in (
            (decay, config.weight_decay, config.learning_rate, True),
            (no_decay, 0.0, config.learning_rate, True),
            (own_decay, config.weight_decay, own_rate, False),
            (own_no_decay, 0.0, own_rate, False),
        )
    ]
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise DemitasseError("training: nothing to train (frozen backbone, no loss parameters)")
    # One AdamW per update part; weight decay is applied once, by the first.
    optimisers = [torch.optim.AdamW(groups, lr=config.learning_rate)] + [
        torch.optim.AdamW([{**g, "weight_decay": 0.0} for g in groups], lr=config.learning_rate)
        for _ in range(objective.update_parts - 1)
    ]
    trainable = [p for g in groups for p in g["params"]]

    per_epoch = len(epoch_batches(train_sets, config.batch_size, config.seed, 0))
    total = per_epoch * config.epochs
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    warmup = max(1, round(config.warmup_ratio * total))
    signature = {
        "config": dataclasses.asdict(config),
        "sets": [[s.name, len(s)] for s in train_sets],
        "objective": objective.describe(),
    }
    state: dict[str, Any] = {"step": 0, "best": None, "stale": 0, "history": [], "seconds": 0.0}
    checkpoint = _Checkpoint(output_dir / "checkpoint")
    if checkpoint.exists():
        saved = checkpoint.read_state()
        if not _same_run(saved.get("signature"), signature, objective.default_settings()):
            raise DemitasseError(
                f"{checkpoint.directory} belongs to a run with other settings; "
                "use another output directory or delete it"
            )
        state = checkpoint.load(model, objective, optimisers)
    if state.get("finished"):
        if not (output_dir / "last").is_dir():  # runs finished before last/ was kept
            model.save(output_dir / "last", objective.save_artifacts)
        return _result(output_dir, state)
    best_dir = output_dir / "best"

    def evaluate_and_keep() -> bool:
        """Evaluate on dev, keep the best model; True when training should stop early."""
        if dev is None or (state["history"] and state["history"][-1]["step"] == state["step"]):
            return False
        score = dev_score(model, dev, dev_layers, head=objective.embed)
        state["history"].append({"step": state["step"], "dev": round(score, 4)})
        if state["best"] is None or score > state["best"]:
            state["best"], state["stale"] = score, 0
            model.save(best_dir, objective.save_artifacts)
        else:
            state["stale"] += 1
        bar.set_postfix(dev=f"{score:.2f}", best=f"{state['best']:.2f}")
        return config.patience is not None and state["stale"] >= config.patience

    def save_checkpoint() -> None:
        checkpoint.save(model, objective, optimisers, {**state, "signature": signature})

    started = time.perf_counter() - state["seconds"]
    bar = tqdm(total=total, initial=state["step"], desc=description, disable=not progress)
    stop = False
    if dev is not None and state["step"] == 0 and state["best"] is None:
        stop = evaluate_and_keep()  # the starting point counts: training must beat it
    for epoch in range(config.epochs):
        if stop or state["step"] >= total:
            break
        batches = epoch_batches(train_sets, config.batch_size, config.seed, epoch)
        first = state["step"] - epoch * per_epoch
        if first >= len(batches):
            continue
        for set_index, rows in batches[max(0, first) :]:
            factor = _learning_rate_factor(state["step"], warmup, total)
            for optimiser, rate in zip(optimisers, objective.update_rates, strict=True):
                for group in optimiser.param_groups:
                    group["lr"] = group["rate"] * factor * (rate if group["backbone"] else 1.0)
            loss = objective(_layer_batches(model, train_sets[set_index], rows))
            if not torch.isfinite(loss):
                raise DemitasseError(f"training: loss became {float(loss)} at step {state['step']}")
            parts = objective.gradients(loss, trainable)
            for optimiser, gradients in zip(optimisers, parts, strict=True):
                for parameter, gradient in zip(trainable, gradients, strict=True):
                    parameter.grad = gradient
                torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm)
                optimiser.step()
            state["step"] += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
            state["seconds"] = time.perf_counter() - started
            at_end = state["step"] >= total
            if state["step"] % config.eval_steps == 0 or at_end:
                stop = evaluate_and_keep()
            if state["step"] % config.checkpoint_steps == 0 or stop or at_end:
                save_checkpoint()
            if stop or at_end:
                break
        else:
            stop = evaluate_and_keep()
            save_checkpoint()
    bar.close()
    model.save(output_dir / "last", objective.save_artifacts)
    if dev is None:
        model.save(best_dir, objective.save_artifacts)
    state["seconds"] = time.perf_counter() - started
    state["finished"] = True
    save_checkpoint()
    atomic_write_json(
        output_dir / "training.json",
        {
            "signature": signature,
            "best_dev": state["best"],
            "steps": state["step"],
            "seconds": round(state["seconds"], 1),
            "history": state["history"],
        },
    )
    return _result(output_dir, state)


def _same_run(
    saved: Any, current: dict[str, Any], objective_defaults: dict[str, object] | None = None
) -> bool:
    """Whether a checkpoint's signature matches; config fields and objective settings it
    predates count as their defaults."""
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        return False
    defaults = dataclasses.asdict(TrainingConfig())
    saved = {**saved, "config": {**defaults, **saved["config"]}}
    if isinstance(saved.get("objective"), dict):
        # An unset optional part (None) is what a checkpoint without it was trained with.
        known = {
            **(objective_defaults or {}),
            **{k: None for k, v in current.get("objective", {}).items() if v is None},
        }
        predated = {
            k: v
            for k, v in known.items()
            if k in current.get("objective", {}) and k not in saved["objective"]
        }
        saved["objective"] = {**predated, **saved["objective"]}
    return saved == current


def _result(output_dir: Path, state: dict[str, Any]) -> TrainingResult:
    return TrainingResult(
        model_dir=output_dir / "best",
        last_dir=output_dir / "last",
        best_score=state["best"],
        steps=state["step"],
        seconds=state["seconds"],
        history=list(state["history"]),
    )
