"""Scoring fine-tuned models at every layer and width, and the averages such runs compare.

Training benchmarks (Espresso, Matryoshka) judge a model by its STS average at each layer ×
truncation width; these helpers score that grid for a model directory under a label of the
run's choosing and read the averages back out of the records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from demitasse.data import ScoredPairs
from demitasse.evaluation import CompressorSpec, ResultRecord, STSTask, evaluate_grid
from demitasse.loading import load_encoder

#: The full-width vectors and their truncations (``none,truncate`` on the command line).
FULL_AND_TRUNCATED = [CompressorSpec("none", None), CompressorSpec("truncate", "truncate")]

#: (model, layer, dim) -> STS average over a suite.
LayerAverages = dict[tuple[str, int, int], float]


def score_every_layer(
    model_dir: str | Path, label: str, suite: Mapping[str, ScoredPairs], dims: Sequence[int]
) -> list[ResultRecord]:
    """STS on ``suite`` at every layer × (the full width, then ``dims`` by truncation), the
    records naming ``label`` as their model (runs of one backbone share its name)."""
    encoder = load_encoder(model_dir)
    records = evaluate_grid(
        encoder,
        [STSTask(suite)],
        specs=FULL_AND_TRUNCATED,
        dims=[encoder.dim, *dims],
        layers=list(range(1, encoder.num_layers + 1)),
    )
    return [dataclasses.replace(r, model=label) for r in records]


def layer_averages(records: Sequence[ResultRecord]) -> LayerAverages:
    """(model, layer, dim) -> STS average over the suite; for a suite of one set, which has
    no average record, that set's score."""
    single = {(r.model, int(r.layer or 0), r.dim): r.score for r in records if r.task == "sts"}
    averaged = {
        (r.model, int(r.layer or 0), r.dim): r.score
        for r in records
        if r.task == "sts" and r.dataset == "avg"
    }
    return averaged or single


def inner_layer_mean(averages: LayerAverages, model: str) -> float:
    """≺Avg (Espresso's Table 1): the mean over layers 1..n−1 at full width."""
    n = max(layer for m, layer, _ in averages if m == model)
    full = max(dim for m, _, dim in averages if m == model)
    return float(np.mean([averages[model, layer, full] for layer in range(1, n)]))
