"""A pooler head of any output size (Wang et al., "On the Dimensionality of Sentence
Embeddings") and the objectives of that paper: SimCSE and the Sentence-BERT NLI classifier.

The head is ``activation(W·e + b)`` with W of shape [d, D], applied to the encoder's sentence
embedding e (normalised when the encoder normalises, so the trained head is exactly the
:class:`demitasse.compress.Pooler` compressor applied to the encoder's vectors). ``HeadLoss``
puts a head under any base loss, so the same loop trains encoder and head end to end, or only
the head with ``TrainingConfig(train_backbone=False)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)

from demitasse.errors import DemitasseError
from demitasse.training.losses import BaseLoss, ModelLoss, PairBatch

ACTIVATIONS = ("tanh", "identity")
#: Where a trained model directory keeps its pooler head (a Pooler compressor).
POOLER_DIR = "pooler"


class PoolerHead(torch.nn.Module):
    """``activation(linear(e))`` from ``in_dim`` to ``out_dim``."""

    def __init__(
        self, in_dim: int, out_dim: int, activation: str = "tanh", normalize_input: bool = True
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise DemitasseError(f"pooler: activation must be one of {ACTIVATIONS}")
        if not out_dim >= 1:
            raise DemitasseError("pooler: out_dim must be positive")
        self.linear = torch.nn.Linear(in_dim, out_dim)
        self.activation = activation
        self.normalize_input = normalize_input

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        if self.normalize_input:
            embeddings = F.normalize(embeddings, dim=-1)
        out = self.linear(embeddings)
        return torch.tanh(out) if self.activation == "tanh" else out

    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        """(weight [out, in], bias [out]) as float32 numpy arrays."""
        return (
            self.linear.weight.detach().cpu().numpy().astype(np.float32),
            self.linear.bias.detach().cpu().numpy().astype(np.float32),
        )


class SoftmaxLoss(torch.nn.Module):
    """Sentence-BERT's NLI objective: a classifier over (u, v, |u − v|), cross-entropy."""

    def __init__(self, dim: int, num_labels: int = 3) -> None:
        super().__init__()
        self.classifier = torch.nn.Linear(3 * dim, num_labels)

    def forward(self, batch: PairBatch) -> torch.Tensor:
        if batch.labels is None:
            raise DemitasseError("the softmax (NLI) loss needs labelled pairs, e.g. snli-labels")
        u, v = batch.anchors, batch.positives
        logits = self.classifier(torch.cat([u, v, (u - v).abs()], dim=-1))
        return F.cross_entropy(logits, batch.labels)


class HeadLoss(ModelLoss):
    """The base loss on the head's output of the last layer's embeddings."""

    def __init__(self, base: BaseLoss, head: PoolerHead) -> None:
        super().__init__()
        self.base = base
        self.head = head

    def embed(self, last: torch.Tensor) -> torch.Tensor:
        return self.head(last)

    def save_artifacts(self, directory: Path) -> None:
        """The head as a :class:`~demitasse.compress.Pooler` compressor in ``directory/pooler``."""
        from demitasse.compress.pooler import Pooler

        weight, bias = self.head.weights()
        Pooler.from_head(
            weight, bias, self.head.activation, self.head.normalize_input, fit_data="training"
        ).save(directory / POOLER_DIR)

    def forward(self, layers: Sequence[PairBatch]) -> torch.Tensor:
        return self.base(layers[-1].mapped(self.head))
