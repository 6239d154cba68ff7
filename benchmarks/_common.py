"""What the post-hoc compression benchmarks share: the model, STS-B train fit data, the grid."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import STSB_FIT_DATA, stsb_fit_sentences
from demitasse.encoders import TransformerEncoder
from demitasse.evaluation import ResultRecord, Task, evaluate_grid
from demitasse.loading import load_encoder


def run_posthoc_grid(
    tasks: Sequence[Task],
    *,
    model: str,
    data_dir: str | Path | None,
    compressors: str,
    dims: Sequence[int],
    precisions: Sequence[str],
) -> tuple[TransformerEncoder, list[ResultRecord], float]:
    """Score ``tasks`` for the model's last layer with compressors and int8 ranges fitted on the
    STS-B train sentences that are in no STS test or dev split (most of the others are STS12–16
    test sentences); returns the wall time too."""
    started = time.perf_counter()
    encoder = load_encoder(model)
    records = evaluate_grid(
        encoder,
        tasks,
        specs=parse_compressor_specs(compressors),
        dims=dims,
        precisions=precisions,
        fit_texts=stsb_fit_sentences(data_dir),
        fit_data=STSB_FIT_DATA,
    )
    return encoder, records, time.perf_counter() - started
