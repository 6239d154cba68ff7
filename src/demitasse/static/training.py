"""The loop that fine-tunes static word vectors: SparseAdam on an ``EmbeddingBag``, early
stopping on a validation loss, the best vectors kept. Distillation and cross-lingual alignment
differ only in the batch loss."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

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
        show_progress: bool = False,
    ) -> None:
        self.temperature = temperature
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.patience = patience
        self.seed = seed
        self.show_progress = show_progress

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


def train_word_vectors(
    vectors: np.ndarray,
    batch_loss: BatchLoss,
    train_rows: np.ndarray,
    valid_rows: np.ndarray,
    settings: WordVectorTrainer,
    description: str = "training word vectors",
) -> VectorTraining:
    """Minimise ``batch_loss`` over shuffled batches of ``train_rows``; every ``eval_every``
    steps measure it on ``valid_rows`` and stop after ``patience`` evaluations without
    improvement."""
    size = settings.batch_size
    rng = np.random.default_rng(settings.seed)
    bag = torch.nn.EmbeddingBag.from_pretrained(
        torch.from_numpy(np.array(vectors, dtype=np.float32)),
        freeze=False,
        mode="mean",
        sparse=True,
    )
    # Sparse rows: each step moves only the words of its batch (lazy Adam).
    optimiser = torch.optim.SparseAdam(bag.parameters(), lr=settings.learning_rate)

    def validation_loss() -> float:
        starts = range(0, len(valid_rows) - size + 1, size)
        with torch.no_grad():
            return float(
                np.mean(
                    [batch_loss(bag, "validation", valid_rows[s : s + size]).item() for s in starts]
                )
            )

    best_loss, best_step, waited = validation_loss(), 0, 0
    best = bag.weight.detach().clone()
    history = [{"step": 0, "train_loss": math.nan, "validation_loss": best_loss}]
    order, cursor, running = rng.permutation(train_rows), 0, []
    steps = tqdm(
        range(1, settings.max_steps + 1),
        desc=description,
        disable=not settings.show_progress,
    )
    for step in steps:
        if cursor + size > len(order):
            order, cursor = rng.permutation(train_rows), 0
        optimiser.zero_grad()
        loss = batch_loss(bag, "train", order[cursor : cursor + size])
        loss.backward()
        optimiser.step()
        cursor += size
        running.append(loss.item())
        if step % settings.eval_every and step != settings.max_steps:
            continue
        current = validation_loss()
        history.append(
            {"step": step, "train_loss": float(np.mean(running)), "validation_loss": current}
        )
        steps.set_postfix(validation=f"{current:.4f}", best=f"{best_loss:.4f}")
        running = []
        if current < best_loss:
            best_loss, best_step, waited = current, step, 0
            best = bag.weight.detach().clone()
        else:
            waited += 1
            if waited >= settings.patience:
                break
    steps.close()
    return VectorTraining(best.numpy(), best_step, best_loss, history)
