"""Exit heads on a frozen encoder, end to end: features once, heads fitted, model saved.

:func:`fit_frozen_exit_heads` is what ``demitasse train --exit-heads --frozen-encoder
--distil N`` runs: the per-layer features of the unlabeled texts and of the training pairs are
computed once (cached under ``out/features``, so a rerun or an interrupted run resumes), an
:class:`~demitasse.training.heads.ExitHeadDistiller` fits the heads, and the model is written
to ``out/best`` with its encoder untouched. ``out/training.json`` records the settings, the
sizes, the wall time of each stage and every layer's STS-B dev score with and without its head.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from demitasse.data.pairs import ScoredPairs
from demitasse.training.heads import (
    ExitHeadDistiller,
    LayerFeatures,
    compute_layer_features,
    pair_features,
    save_model_with_heads,
    write_fit_summary,
)
from demitasse.training.model import SentenceModel
from demitasse.training.trainer import TrainingSet, dev_texts, pairs_score

logger = logging.getLogger(__name__)


@dataclass
class FrozenHeadsResult:
    """``model_dir``: the model with its heads; ``dev``: layer → (STS-B dev without the head,
    with it); ``seconds``: wall time of each stage."""

    model_dir: Path
    dev: dict[int, tuple[float, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def training_texts(sets: Sequence[TrainingSet]) -> list[str]:
    """Every distinct text of ``sets``, in first-seen order."""
    texts: list[str] = []
    for training_set in sets:
        texts += training_set.anchors + training_set.positives + (training_set.negatives or [])
    return list(dict.fromkeys(texts))


def dev_layer_scores(
    features: LayerFeatures, dev: ScoredPairs, distiller: ExitHeadDistiller
) -> dict[int, tuple[float, float]]:
    """Each layer's Spearman ×100 on ``dev`` from its features, without and with its head."""
    texts = dev_texts(dev)
    scores = {}
    for layer in sorted(distiller.heads_):
        raw = features.layers[layer][features.rows(texts)]
        scores[layer] = (
            pairs_score(raw, texts, dev),
            pairs_score(distiller.transform(raw, layer), texts, dev),
        )
    return scores


def fit_frozen_exit_heads(
    model: SentenceModel,
    output_dir: str | Path,
    distiller: ExitHeadDistiller,
    unlabeled: Sequence[str],
    training_sets: Sequence[TrainingSet] = (),
    dev: ScoredPairs | None = None,
    batch_size: int = 64,
    progress: bool = True,
) -> FrozenHeadsResult:
    """Fit ``distiller`` on ``model``'s frozen features of ``unlabeled`` and of the pairs of
    ``training_sets``; write the model with the heads to ``output_dir/best``."""
    output_dir = Path(output_dir)
    cache = output_dir / "features"
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    texts = list(dict.fromkeys(list(unlabeled) + training_texts(training_sets)))
    if dev is not None:
        texts += [t for t in dev_texts(dev) if t not in set(texts)]
    features = compute_layer_features(model, texts, cache, batch_size, progress)
    seconds["features"] = time.perf_counter() - start
    start = time.perf_counter()
    unlabeled_features = features.subset(list(dict.fromkeys(unlabeled))) if unlabeled else None
    pairs = [pair_features(s, features) for s in training_sets]
    distiller.fit(unlabeled_features, pairs)
    seconds["heads"] = time.perf_counter() - start
    model_dir = save_model_with_heads(model, distiller.heads_, output_dir / "best")
    result = FrozenHeadsResult(model_dir, seconds={k: round(v, 1) for k, v in seconds.items()})
    if dev is not None:
        result.dev = dev_layer_scores(features, dev, distiller)
    write_fit_summary(
        output_dir / "training.json",
        {
            "recipe": "exit heads on the frozen encoder (distillation + supervision)",
            "distiller": distiller.get_params(),
            "unlabeled_texts": len(unlabeled),
            "sets": [[s.name, len(s)] for s in training_sets],
            "loss_per_epoch": [round(x, 5) for x in distiller.history_],
            "seconds": result.seconds,
            "dev": {
                str(k): {"without_head": round(a, 2), "with_head": round(b, 2)}
                for k, (a, b) in result.dev.items()
            },
            "dev_mean_with_heads": (
                round(float(np.mean([b for _, b in result.dev.values()])), 2)
                if result.dev
                else None
            ),
        },
    )
    return result
