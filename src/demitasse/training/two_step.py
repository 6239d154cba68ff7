"""Two-step training of low-dimensional poolers (Wang et al., Algorithm 1).

Training encoder and a small pooler end to end damages the encoder at small d. So:

* **Step 1:** train encoder + pooler_d' end to end for the target dims and a set of candidate
  dims; score each encoder_d' alone (its output without the pooler) on the dev set and keep the
  best as encoder_opt.
* **Step 2:** put pooler_d (as trained end to end, not re-initialised) on encoder_opt and train
  only the pooler, the encoder frozen.

Every run lives in its own directory under ``out_dir`` (``end-to-end/d<d>``, ``two-step/d<d>``,
or step 2 under another ``step2_name`` to compare its settings on the same step-1 models) and is
resumable, so asking for a new target later trains only what is missing. A model
directory holds the sentence-transformers encoder and its head in ``pooler/`` (a
:class:`demitasse.compress.Pooler`). With the NLI objective the classifier is part of the loss,
not of the model: step 2 trains a fresh one next to the pooler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from demitasse.compress import load_compressor
from demitasse.data.pairs import ScoredPairs
from demitasse.encoders import load_transformer
from demitasse.errors import DemitasseError
from demitasse.training.losses import InBatchNegativesLoss
from demitasse.training.model import SentenceModel
from demitasse.training.pooler import POOLER_DIR, HeadLoss, PoolerHead, SoftmaxLoss
from demitasse.training.trainer import (
    TrainingConfig,
    TrainingSet,
    dev_score,
    dev_texts,
    fine_tune,
    pairs_score,
)

OBJECTIVES = ("simcse", "nli")


@dataclass
class TwoStepResult:
    """Directories of every trained model and the encoder selection of step 1."""

    end_to_end: dict[int, Path]
    encoder_scores: dict[int, float]
    encoder_dim: int
    two_step: dict[int, Path]


def pooler_objective(
    objective: str, in_dim: int, out_dim: int, activation: str = "tanh", normalize: bool = True
) -> HeadLoss:
    """SimCSE (in-batch negatives at temperature 0.05) or the SBERT NLI classifier on a head."""
    head = PoolerHead(in_dim, out_dim, activation, normalize_input=normalize)
    if objective == "simcse":
        return HeadLoss(InBatchNegativesLoss(scale=20.0), head)
    if objective == "nli":
        return HeadLoss(SoftmaxLoss(out_dim), head)
    raise DemitasseError(f"unknown pooler objective {objective!r}; choose from {OBJECTIVES}")


def load_head(head: PoolerHead, model_dir: Path) -> None:
    """Copy the pooler saved in ``model_dir`` into ``head``."""
    pooler = load_compressor(model_dir / POOLER_DIR)
    if pooler.weight_.shape != tuple(head.linear.weight.shape):
        raise DemitasseError(f"{model_dir}: pooler shape {pooler.weight_.shape} does not fit")
    with torch.no_grad():
        head.linear.weight.copy_(torch.from_numpy(pooler.weight_))
        head.linear.bias.copy_(torch.from_numpy(pooler.bias_))


def encoder_dev_score(model_dir: Path, dev: ScoredPairs) -> float:
    """STS-B-style dev score of a trained encoder's own output (its pooler ignored)."""
    return dev_score(SentenceModel.load(model_dir), dev)


def two_step(
    model: str | Path,
    target_dims: Sequence[int],
    candidate_dims: Sequence[int],
    train_sets: Sequence[TrainingSet],
    out_dir: str | Path,
    dev: ScoredPairs,
    objective: str = "simcse",
    config: TrainingConfig | None = None,
    pooler_config: TrainingConfig | None = None,
    activation: str = "tanh",
    progress: bool = True,
    step2_name: str = "two-step",
) -> TwoStepResult:
    """Algorithm 1: end-to-end runs for targets and candidates, encoder selection, pooler-only
    fine-tuning of each target's pooler on the selected encoder."""
    if not target_dims:
        raise DemitasseError("two-step: no target dims")
    out_dir = Path(out_dir)
    config = config or TrainingConfig()
    pooler_config = dataclasses.replace(pooler_config or config, train_backbone=False)

    def train(
        start: str | Path, dim: int, init: Path | None, run: str, settings: TrainingConfig
    ) -> Path:
        """One encoder + pooler_dim run from ``start``; the head starts from ``init``'s."""
        network = SentenceModel.load(start)
        loss = pooler_objective(objective, network.dim, dim, activation, network.encoder.normalize)
        if init is not None:
            load_head(loss.head, init)
        return fine_tune(
            network,
            loss,
            train_sets,
            out_dir / run,
            settings,
            dev=dev,
            progress=progress,
            description=run,
        ).model_dir

    end_to_end: dict[int, Path] = {}
    scores: dict[int, float] = {}
    for dim in sorted({*target_dims, *candidate_dims}, reverse=True):
        end_to_end[dim] = train(model, dim, None, f"end-to-end/d{dim}", config)
        scores[dim] = encoder_dev_score(end_to_end[dim], dev)
    best = max(scores, key=lambda d: (scores[d], d))
    two = {
        dim: train(end_to_end[best], dim, end_to_end[dim], f"{step2_name}/d{dim}", pooler_config)
        for dim in target_dims
    }
    return TwoStepResult(end_to_end, scores, best, two)


def pooled_dev_scores(
    encoder_dir: Path, pooler_dirs: Sequence[Path], dev: ScoredPairs
) -> list[float]:
    """Dev score of ``encoder_dir``'s output through each saved pooler (the
    :class:`~demitasse.compress.Pooler` reproduces the trained head), encoding the dev sentences
    once; NaN for a pooler that takes another width than the encoder gives."""
    texts = dev_texts(dev)
    vectors = load_transformer(encoder_dir, cache=False).encode(texts)
    scores = []
    for pooler_dir in pooler_dirs:
        pooler = load_compressor(pooler_dir / POOLER_DIR)
        if pooler.n_features_in_ != vectors.shape[1]:
            scores.append(float("nan"))
            continue
        scores.append(pairs_score(pooler.transform(vectors), texts, dev))
    return scores


def pooler_swap_matrix(
    encoders: dict[int, Path], poolers: dict[int, Path], dev: ScoredPairs
) -> np.ndarray:
    """Dev score of every encoder_i (rows, ``encoders`` order) with every pooler_j (columns):
    the paper's Figure 4. Poolers of other widths than an encoder's input are skipped (NaN)."""
    return np.array(
        [
            pooled_dev_scores(encoder_dir, list(poolers.values()), dev)
            for encoder_dir in encoders.values()
        ]
    )
