"""Named training data and objectives, shared by the CLI and the benchmarks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from demitasse.data import load_sickr, load_snli, load_stsb, nli_triples
from demitasse.data.overlap import evaluation_pairs
from demitasse.errors import DemitasseError
from demitasse.training.espresso import EspressoLoss
from demitasse.training.losses import LastLayerLoss, MatryoshkaLoss, ModelLoss, make_base_loss
from demitasse.training.trainer import TrainingSet

logger = logging.getLogger(__name__)

DataDir = str | Path | None

TRAINING_SETS: dict[str, Callable[[DataDir], TrainingSet]] = {
    "stsb-train": lambda d: TrainingSet.from_scored_pairs(load_stsb("train", d), 0.0, 5.0),
    "sick-train": lambda d: TrainingSet.from_scored_pairs(load_sickr("train", d), 1.0, 5.0),
    # SNLI is no evaluation set here: its dev and test splits (the only ones shipped) train.
    "snli": lambda d: TrainingSet.from_triples("snli", nli_triples(load_snli(d, ("dev", "test")))),
}
# The data: SNLI triples and STS-B train. SICK train is available but not a default:
# on STS-B dev it drags the fine-tuned model down (its captions are not the STS domains).
DEFAULT_TRAINING_DATA = ("stsb-train", "snli")
METHODS = ("raw", "mrl", "ese")
MRL_DIMS = (384, 256, 128, 64, 32, 16, 8)
#: Espresso settings that say how the trainer updates from the objective's parts: they go to
#: :class:`TrainingConfig`, the others to :class:`EspressoLoss`.
UPDATE_OPTIONS = ("gradient_priority", "decoupled_updates", "inner_rate")


def load_training_sets(
    names: Sequence[str], data_dir: DataDir = None, max_examples: int | None = None
) -> list[TrainingSet]:
    """Training sets by name: ``stsb-train``, ``sick-train``, ``snli`` (triples), less every
    pair that is also an STS test or dev pair (most of STS-B train is STS12–16 test: see
    :mod:`demitasse.data.overlap`), then at most the first ``max_examples`` of each; each set
    that lost examples to the evaluation sets is logged (INFO)."""
    unknown = [n for n in names if n not in TRAINING_SETS]
    if unknown or not names:
        raise DemitasseError(
            f"unknown training data {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(TRAINING_SETS)}"
        )
    held_out = evaluation_pairs(data_dir)
    sets = []
    for name in names:
        full = TRAINING_SETS[name](data_dir)
        kept = full.without_pairs(held_out)
        sets.append(kept if max_examples is None else kept.head(max_examples))
        if len(kept) < len(full):
            logger.info(
                "%s: %d of %d examples kept; the other %d are STS test or dev pairs",
                name, len(kept), len(full), len(full) - len(kept),
            )  # fmt: skip
    return sets


def make_objective(
    method: str,
    num_layers: int,
    dim: int,
    loss: str = "angle",
    mrl_dims: Sequence[int] = MRL_DIMS,
    **espresso: Any,
) -> ModelLoss:
    """``raw`` (last layer), ``mrl`` (Matryoshka over ``mrl_dims`` ≤ dim) or ``ese``.

    ``espresso`` options go to :class:`EspressoLoss` (:func:`split_options` separates them
    from the trainer's); ``compress_dim`` defaults to dim / 3 rounded to a multiple of 8 (128
    for a 384-d model, 256 for 768-d: the paper's k = 128 on BERT-base-sized models scaled to
    the width).
    """
    base = make_base_loss(loss)
    if method == "raw":
        return LastLayerLoss(base)
    if method == "mrl":
        return MatryoshkaLoss(base, [d for d in mrl_dims if d <= dim] or [dim])
    if method == "ese":
        espresso.setdefault("compress_dim", max(8, (dim // 3) // 8 * 8))
        return EspressoLoss(base, num_layers, **espresso)
    raise DemitasseError(f"unknown training method {method!r}; choose from {', '.join(METHODS)}")


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A method's options as (:func:`make_objective` keywords, :class:`TrainingConfig`
    keywords): the update options (:data:`UPDATE_OPTIONS`) are the trainer's."""
    objective = {k: v for k, v in options.items() if k not in UPDATE_OPTIONS}
    updates = {k: v for k, v in options.items() if k in UPDATE_OPTIONS}
    return objective, updates
