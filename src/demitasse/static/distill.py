"""Fine-tune static word vectors on the teacher's sentence similarities (Wada et al., step 3).

For a batch of corpus sentences, the teacher's and the static model's cosine similarities are
turned into row-wise distributions over the *other* sentences of the batch (softmax at
temperature 0.05, diagonal excluded); the word vectors learn to make the static distribution
match the teacher's (KL divergence, i.e. soft cross-entropy). Adam on sparse rows, early
stopping on a validation split of the corpus.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)
from tqdm.auto import tqdm

from demitasse.compress.similarity_losses import cosine_matrix
from demitasse.errors import DataError, DemitasseError
from demitasse.static.model import StaticModel


def similarity_distribution_loss(
    student: torch.Tensor, teacher: torch.Tensor, temperature: float = 0.05
) -> torch.Tensor:
    """Mean over rows of KL(teacher ‖ student) between in-batch similarity distributions."""
    diagonal = torch.eye(len(student), dtype=torch.bool, device=student.device)
    log_student = _masked_log_softmax(cosine_matrix(student) / temperature, diagonal)
    log_teacher = _masked_log_softmax(cosine_matrix(teacher) / temperature, diagonal)
    return F.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean")


def _masked_log_softmax(logits: torch.Tensor, diagonal: torch.Tensor) -> torch.Tensor:
    # The diagonal gets probability zero; its log is then set to 0 on both sides, so that
    # exp(0)·(0 − 0) adds nothing to the KL instead of −inf·0 = nan.
    return logits.masked_fill(diagonal, -math.inf).log_softmax(dim=1).masked_fill(diagonal, 0.0)


class TokenBatches:
    """Texts as token ids, served as ``EmbeddingBag`` inputs (flat ids + offsets)."""

    def __init__(self, ids: Sequence[Sequence[int]]) -> None:
        self.lengths = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
        self.flat = torch.as_tensor(np.concatenate([np.asarray(r, dtype=np.int64) for r in ids]))
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])

    def batch(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        pieces = [
            self.flat[s : s + n] for s, n in zip(self.starts[rows], self.lengths[rows], strict=True)
        ]
        offsets = np.concatenate([[0], np.cumsum(self.lengths[rows])[:-1]])
        return torch.cat(pieces), torch.as_tensor(offsets)


class SimilarityDistiller:
    """Distil a teacher's in-batch similarity distributions into a :class:`StaticModel`.

    ``max_steps`` Adam steps of ``batch_size`` sentences; every ``eval_every`` steps the loss
    on the validation split (``validation_fraction`` of the texts) is measured and training
    stops after ``patience`` evaluations without improvement; the best vectors are kept.
    """

    def __init__(
        self,
        temperature: float = 0.05,
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        max_steps: int = 10_000,
        eval_every: int = 250,
        patience: int = 4,
        validation_fraction: float = 0.02,
        seed: int = 0,
        show_progress: bool = False,
    ) -> None:
        self.temperature = temperature
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.seed = seed
        self.show_progress = show_progress

    def fit(
        self, model: StaticModel, texts: Sequence[str], teacher_embeddings: np.ndarray
    ) -> SimilarityDistiller:
        """Learn from ``texts`` and their teacher embeddings; sets ``model_``, ``history_``
        (step, train loss, validation loss), ``best_step_``, ``seconds_``."""
        started = time.perf_counter()
        if len(texts) != len(teacher_embeddings):
            raise DataError(f"{len(texts)} texts but {len(teacher_embeddings)} teacher embeddings")
        ids = model.token_ids(texts)
        keep = np.flatnonzero([len(row) > 0 for row in ids])
        if len(keep) < 4 * self.batch_size:
            raise DataError(
                f"distillation needs at least {4 * self.batch_size} texts with known tokens, "
                f"got {len(keep)}"
            )
        if not self.temperature > 0:
            raise DemitasseError(f"temperature must be positive, got {self.temperature}")
        rng = np.random.default_rng(self.seed)
        keep = rng.permutation(keep)
        n_valid = max(self.batch_size, round(len(keep) * self.validation_fraction))
        valid_rows, train_rows = keep[:n_valid], keep[n_valid:]
        batches = TokenBatches([ids[i] for i in range(len(ids))])
        targets = torch.as_tensor(np.asarray(teacher_embeddings, dtype=np.float32))

        torch.manual_seed(self.seed)
        bag = torch.nn.EmbeddingBag.from_pretrained(
            torch.from_numpy(model.vectors.copy()), freeze=False, mode="mean", sparse=True
        )
        optimiser = torch.optim.SparseAdam(bag.parameters(), lr=self.learning_rate)

        def loss_of(rows: np.ndarray) -> torch.Tensor:
            flat, offsets = batches.batch(rows)
            return similarity_distribution_loss(
                bag(flat, offsets), targets[torch.as_tensor(rows)], self.temperature
            )

        def validation_loss() -> float:
            with torch.no_grad():
                losses = [
                    float(loss_of(valid_rows[s : s + self.batch_size]))
                    for s in range(0, len(valid_rows) - self.batch_size + 1, self.batch_size)
                ]
            return float(np.mean(losses))

        best_loss, best_step = validation_loss(), 0
        best_vectors = bag.weight.detach().clone()
        self.history_: list[dict[str, float]] = [
            {"step": 0, "train_loss": math.nan, "validation_loss": best_loss}
        ]
        order, cursor, running, waited = rng.permutation(train_rows), 0, [], 0
        bar = tqdm(range(1, self.max_steps + 1), desc="distilling", disable=not self.show_progress)
        for step in bar:
            if cursor + self.batch_size > len(order):
                order, cursor = rng.permutation(train_rows), 0
            rows = order[cursor : cursor + self.batch_size]
            cursor += self.batch_size
            optimiser.zero_grad()
            loss = loss_of(rows)
            loss.backward()
            optimiser.step()
            running.append(loss.item())
            if step % self.eval_every and step != self.max_steps:
                continue
            current = validation_loss()
            self.history_.append(
                {"step": step, "train_loss": float(np.mean(running)), "validation_loss": current}
            )
            bar.set_postfix(validation=f"{current:.4f}", best=f"{best_loss:.4f}")
            running = []
            if current < best_loss:
                best_loss, best_step, waited = current, step, 0
                best_vectors = bag.weight.detach().clone()
            else:
                waited += 1
                if waited >= self.patience:
                    break
        bar.close()
        self.best_step_ = best_step
        self.best_validation_loss_ = best_loss
        self.model_ = StaticModel(
            best_vectors.numpy(),
            model.tokenizer,
            name=model.name,
            normalize=model.normalize,
            metadata={**model.metadata, "distillation": self._summary(len(train_rows))},
        )
        self.seconds_ = time.perf_counter() - started
        return self

    def _summary(self, n_train: int) -> dict[str, object]:
        return {
            "temperature": self.temperature,
            "learning_rate": self.learning_rate,
            "batch_size": self.batch_size,
            "best_step": self.best_step_,
            "train_sentences": n_train,
        }
