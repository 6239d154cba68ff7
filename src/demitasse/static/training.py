"""Fine-tuning static word vectors on the shared training loop (:mod:`demitasse.loop`):
SparseAdam on an ``EmbeddingBag``, early stopping on a validation loss, the best vectors kept.
Distillation and cross-lingual alignment differ only in the batch loss."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from demitasse.loop import LoopSettings, run_loop
from demitasse.static.model import StaticModel

#: The loss of a batch: (the word vectors as a mean-pooling bag, split name, row indices).
BatchLoss = Callable[[torch.nn.EmbeddingBag, str, np.ndarray], torch.Tensor]


class TokenBatches:
    """Texts as token ids, served as ``EmbeddingBag`` inputs (flat ids + offsets)."""

    def __init__(self, ids: Sequence[Sequence[int]]) -> None:
        self.lengths = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
        self.flat = torch.as_tensor(
            np.concatenate([np.asarray(row, dtype=np.int64) for row in ids])
        )
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])

    def batch(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        pieces = [
            self.flat[start : start + n]
            for start, n in zip(self.starts[rows], self.lengths[rows], strict=True)
        ]
        offsets = np.concatenate([[0], np.cumsum(self.lengths[rows])[:-1]])
        return torch.cat(pieces), torch.as_tensor(offsets)


@dataclass
class VectorTraining:
    """Outcome of :func:`train_word_vectors`."""

    vectors: np.ndarray
    best_step: int
    best_validation_loss: float
    history: list[dict[str, float]]


class WordVectorTrainer:
    """Hyperparameters shared by the estimators that fine-tune word vectors with
    :func:`train_word_vectors` (temperature of their contrastive loss included)."""

    def __init__(
        self,
        temperature: float = 0.05,
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        max_steps: int = 10_000,
        eval_every: int = 250,
        patience: int = 4,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        self.temperature = temperature
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.patience = patience
        self.seed = seed
        self.progress = progress

    def _keep(
        self, trained: VectorTraining, start: StaticModel, metadata: dict[str, object]
    ) -> None:
        """Record a finished training: its history, best step and the resulting model."""
        self.history_ = trained.history
        self.best_step_ = trained.best_step
        self.best_validation_loss_ = trained.best_validation_loss
        self.model_ = StaticModel(
            trained.vectors,
            start.tokenizer,
            name=start.name,
            normalize=start.normalize,
            metadata={**start.metadata, **metadata},
        )


class _WordVectorTask:
    """The shared loop's task: SparseAdam on an ``EmbeddingBag`` of the word vectors, batches of
    shuffled training rows, the best vectors kept as a copy in memory."""

    def __init__(
        self,
        vectors: np.ndarray,
        batch_loss: BatchLoss,
        train_rows: np.ndarray,
        valid_rows: np.ndarray,
        settings: WordVectorTrainer,
    ) -> None:
        self.batch_loss, self.train_rows, self.valid_rows = batch_loss, train_rows, valid_rows
        self.size = settings.batch_size
        self.bag = torch.nn.EmbeddingBag.from_pretrained(
            torch.from_numpy(np.array(vectors, dtype=np.float32)),
            freeze=False,
            mode="mean",
            sparse=True,
        )
        # Sparse rows: each step moves only the words of its batch (lazy Adam).
        self.optimiser = torch.optim.SparseAdam(self.bag.parameters(), lr=settings.learning_rate)
        self.rng = np.random.default_rng(settings.seed)
        self.orders: list[np.ndarray] = []
        self.best = self.bag.weight.detach().clone()

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """The full batches of one permutation of the training rows (all of them in one batch
        when there are fewer than a batch); epoch ``e`` takes the ``e``-th permutation that the
        seeded generator draws, whenever it is asked for."""
        while len(self.orders) <= epoch:
            self.orders.append(self.rng.permutation(self.train_rows))
        order = self.orders[epoch]
        starts = range(0, max(1, len(order) - self.size + 1), self.size)
        return [order[start : start + self.size] for start in starts]

    def train_step(self, rows: np.ndarray) -> float:
        self.optimiser.zero_grad()
        loss = self.batch_loss(self.bag, "train", rows)
        loss.backward()
        self.optimiser.step()
        return loss.item()

    def validate(self) -> float:
        """The mean loss over the full batches of the validation rows."""
        rows, size = self.valid_rows, self.size
        with torch.no_grad():
            losses = [
                self.batch_loss(self.bag, "validation", rows[start : start + size]).item()
                for start in range(0, len(rows) - size + 1, size)
            ]
        return float(np.mean(losses))

    def keep_best(self) -> None:
        self.best = self.bag.weight.detach().clone()

    def restore_best(self) -> None:
        with torch.no_grad():
            self.bag.weight.copy_(self.best)


def train_word_vectors(
    vectors: np.ndarray,
    batch_loss: BatchLoss,
    train_rows: np.ndarray,
    valid_rows: np.ndarray,
    settings: WordVectorTrainer,
    description: str = "training word vectors",
) -> VectorTraining:
    """Minimise ``batch_loss`` over shuffled batches of ``train_rows`` on the shared loop
    (:func:`demitasse.loop.run_loop`): the untrained vectors are validated first, then every
    ``eval_every`` steps the loss on ``valid_rows`` is measured, and training stops after
    ``patience`` validations in a row without improvement; the best vectors are returned."""
    task = _WordVectorTask(vectors, batch_loss, train_rows, valid_rows, settings)
    loop = LoopSettings(
        max_steps=settings.max_steps,
        eval_every=settings.eval_every,
        eval_each_epoch=False,
        patience=settings.patience,
        validate_at_start=True,
        progress=settings.progress,
    )
    state = run_loop(task, loop, description=description)
    assert state.best is not None and state.best_step is not None  # validated at the start
    history = [
        {
            "step": entry["step"],
            "train_loss": entry.get("train_loss", math.nan),
            "validation_loss": entry["validation"],
        }
        for entry in state.history
    ]
    return VectorTraining(task.best.numpy(), state.best_step, state.best, history)
