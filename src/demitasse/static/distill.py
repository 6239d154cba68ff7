"""Fine-tune static word vectors on the teacher's sentence similarities (Wada et al., step 3).

For a batch of corpus sentences, the teacher's and the static model's cosine similarities are
turned into row-wise distributions over the *other* sentences of the batch (softmax at
temperature 0.05, diagonal excluded); the word vectors learn to make the static distribution
match the teacher's (KL divergence, i.e. soft cross-entropy). Adam on sparse rows, early
stopping on a validation split of the corpus. With ``regression_weight`` > 0 the loss adds that
weight times the mean cosine distance between each static sentence vector and its own target:
the teacher's embedding of that sentence in the static model's coordinates (the pipeline
projects it on the same PCA components), a pointwise pull next to the in-batch similarities.
With ``anchor_weight`` > 0 the training loss adds that weight times the mean squared distance
of the batch's words from their starting vectors (the validation loss, which stops training,
leaves the anchor out).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)

from demitasse.errors import DataError, DemitasseError
from demitasse.losses import cosine_matrix
from demitasse.static.model import StaticModel
from demitasse.static.training import TokenBatches, WordVectorTrainer, train_word_vectors


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


class SimilarityDistiller(WordVectorTrainer):
    """Distil a teacher's in-batch similarity distributions into a :class:`StaticModel`.

    ``max_steps`` Adam steps of ``batch_size`` sentences; every ``eval_every`` steps the loss
    on the validation split (``validation_fraction`` of the texts) is measured and training
    stops after ``patience`` evaluations without improvement; the best vectors are kept.
    """

    def __init__(
        self,
        validation_fraction: float = 0.02,
        anchor_weight: float = 0.0,
        regression_weight: float = 0.0,
        **training: Any,
    ) -> None:
        super().__init__(**training)  # WordVectorTrainer's hyperparameters
        self.validation_fraction = validation_fraction
        self.anchor_weight = anchor_weight
        self.regression_weight = regression_weight

    def fit(
        self,
        model: StaticModel,
        texts: Sequence[str],
        teacher_embeddings: np.ndarray,
        regression_targets: np.ndarray | None = None,
    ) -> SimilarityDistiller:
        """Learn from ``texts`` and their teacher embeddings; sets ``model_``, ``history_``
        (step, train loss, validation loss), ``best_step_``, ``seconds_``.

        ``regression_targets`` (texts × the model's dim) are what ``regression_weight`` pulls
        each sentence vector toward; needed only when that weight is positive."""
        started = time.perf_counter()
        if len(texts) != len(teacher_embeddings):
            raise DataError(f"{len(texts)} texts but {len(teacher_embeddings)} teacher embeddings")
        pulls = self._checked_regression_targets(model, len(texts), regression_targets)
        ids = model.token_ids(texts)
        keep = np.flatnonzero([len(row) > 0 for row in ids])
        if len(keep) < 4 * self.batch_size:
            raise DataError(
                f"distillation needs at least {4 * self.batch_size} texts with known tokens "
                f"at batch size {self.batch_size}, got {len(keep)}: give more texts or a "
                "smaller batch size (--batch-size)"
            )
        if not self.temperature > 0:
            raise DemitasseError(f"temperature must be positive, got {self.temperature}")
        if not self.anchor_weight >= 0:
            raise DemitasseError(f"anchor_weight must be >= 0, got {self.anchor_weight}")
        keep = np.random.default_rng(self.seed).permutation(keep)
        n_valid = max(self.batch_size, round(len(keep) * self.validation_fraction))
        valid_rows, train_rows = keep[:n_valid], keep[n_valid:]
        batches = TokenBatches(ids)
        targets = torch.as_tensor(np.asarray(teacher_embeddings, dtype=np.float32))

        start = torch.from_numpy(np.array(model.vectors, dtype=np.float32))

        def batch_loss(bag: torch.nn.EmbeddingBag, split: str, rows: np.ndarray) -> torch.Tensor:
            flat, offsets = batches.batch(rows)
            student, batch_rows = bag(flat, offsets), torch.as_tensor(rows)
            loss = similarity_distribution_loss(student, targets[batch_rows], self.temperature)
            if pulls is not None:
                distance = 1.0 - F.cosine_similarity(student, pulls[batch_rows], dim=1)
                loss = loss + self.regression_weight * distance.mean()
            if self.anchor_weight > 0 and split == "train":
                words = flat.unique()
                moved = F.embedding(words, bag.weight, sparse=True) - start[words]
                loss = loss + self.anchor_weight * moved.square().sum(1).mean()
            return loss

        trained = train_word_vectors(
            model.vectors, batch_loss, train_rows, valid_rows, self, "distilling"
        )
        self.best_step_ = trained.best_step
        self._keep(trained, model, {"distillation": self._summary(len(train_rows))})
        self.seconds_ = time.perf_counter() - started
        return self

    def _checked_regression_targets(
        self, model: StaticModel, n_texts: int, targets: np.ndarray | None
    ) -> torch.Tensor | None:
        if not self.regression_weight >= 0:
            raise DemitasseError(f"regression_weight must be >= 0, got {self.regression_weight}")
        if self.regression_weight == 0:
            return None
        if targets is None:
            raise DemitasseError(
                "regression_weight > 0 needs regression_targets: the teacher's embeddings in "
                "the static model's coordinates (StaticPCA.project_embeddings)"
            )
        if np.shape(targets) != (n_texts, model.dim):
            raise DataError(
                f"regression_targets must be {n_texts} × {model.dim} (texts × the model's "
                f"dim), got {' × '.join(map(str, np.shape(targets)))}"
            )
        return torch.as_tensor(np.asarray(targets, dtype=np.float32))

    def _summary(self, n_train: int) -> dict[str, object]:
        return {
            "temperature": self.temperature,
            "regression_weight": self.regression_weight,
            "anchor_weight": self.anchor_weight,
            "learning_rate": self.learning_rate,
            "batch_size": self.batch_size,
            "best_step": self.best_step_,
            "train_sentences": n_train,
        }
