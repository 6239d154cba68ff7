"""The trainer's settings of the learned compressors (:mod:`demitasse.compress.learned`): one
hyperparameter, ``training``, shared by every learned compressor."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import Any, ClassVar, NamedTuple

from demitasse.compress._estimator import Interval, StrOptions
from demitasse.compress.params import Integers, ParamGroup


@dataclass(frozen=True, repr=False)
class TrainingSettings(ParamGroup):
    """The shared trainer's settings (see the module doc), one hyperparameter of every learned
    compressor: ``MatryoshkaAdaptor(training=TrainingSettings(max_epochs=5))``.

    A field left None takes the compressor's default: batches of 256 rows, at most 20 epochs,
    patience 3, learning rate 1e-3, no weight decay, a tenth of the rows for validation, seed
    0, the GPU where there is one, no progress bar (MCR²: batches of 512, 30 epochs, patience
    11); ``training=None`` takes them all. By name (``make_compressor``, ``method:key=value``
    on the command line) each field may also be given on its own:
    ``make_compressor("adaptor", max_epochs=5)``.
    """

    #: Rows per mini-batch.
    batch_size: int | None = None
    #: Epochs at most (of each separately trained part, such as a SMEC stage).
    max_epochs: int | None = None
    #: Epochs in a row without a better validation loss after which training stops.
    patience: int | None = None
    #: AdamW's learning rate and weight decay.
    learning_rate: float | None = None
    weight_decay: float | None = None
    #: Share of the fit rows (and of each supervision set) held out for the validation loss.
    validation_fraction: float | None = None
    #: Seeds torch, the split and the batches: a fit is reproducible on one device.
    seed: int | None = None
    #: "auto" (the GPU when there is one), "cpu" or "cuda".
    device: str | None = None
    #: Show a progress bar.
    progress: bool | None = None

    #: An interval open at a right end of None leaves out infinity: ``[0, inf)`` means finite.
    constraints: ClassVar[dict[str, list[Any]]] = {
        "batch_size": [Integers(1)],
        "max_epochs": [Integers(1)],
        "patience": [Integers(1)],
        "learning_rate": [Interval(Real, 0, None, closed="left")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "validation_fraction": [Interval(Real, 0, 0.5, closed="neither")],
        "seed": [Integers(0)],
        "device": [StrOptions({"auto", "cpu", "cuda"})],
        "progress": ["boolean"],
    }


#: The trainer's defaults of the learned compressors (MCR² changes three).
DEFAULT_TRAINING = TrainingSettings(
    batch_size=256,
    max_epochs=20,
    patience=3,
    learning_rate=1e-3,
    weight_decay=0.0,
    validation_fraction=0.1,
    seed=0,
    device="auto",
    progress=False,
)


class _Trainer(NamedTuple):
    """The trainer's settings a fit uses: ``training``'s, the compressor's default for each
    it leaves None."""

    batch_size: int
    max_epochs: int
    patience: int
    learning_rate: float
    weight_decay: float
    validation_fraction: float
    seed: int
    device: str
    progress: bool
