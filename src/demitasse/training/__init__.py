"""Fine-tuning sentence encoders: the training loop, objectives and Espresso (ESE).

``fine_tune(model, objective, train_sets, output_dir)`` trains a :class:`SentenceModel` with a
model loss — :class:`LastLayerLoss` (plain), :class:`MatryoshkaLoss` or :class:`EspressoLoss`
(a :class:`LayerwiseLoss` composed of one-layer pieces) — around a base loss (AnglE by
default, CoSENT or in-batch negatives), on the shared loop of :mod:`demitasse.loop`. The
model owns its exit heads; how a step updates from the loss's parts (gradient priority,
decoupled updates) is the trainer's (:mod:`demitasse.training.updates`). ``two_step`` trains
low-dimensional pooler heads as Wang et al.'s Algorithm 1.
"""

from demitasse.training.espresso import (
    AlignmentLoss,
    EspressoLoss,
    LayerwiseLoss,
    compression_target,
)
from demitasse.training.losses import (
    AnglELoss,
    AngleLoss,
    CoSENTLoss,
    InBatchNegativesLoss,
    LastLayerLoss,
    LossSplit,
    MatryoshkaLoss,
    ModelLoss,
    NestedPrefixLoss,
    PairBatch,
    PrefixLoss,
    WeightedSum,
    make_base_loss,
)
from demitasse.training.model import ExitHeads, SentenceModel
from demitasse.training.pooler import HeadLoss, PoolerHead, SoftmaxLoss
from demitasse.training.trainer import (
    TrainingConfig,
    TrainingResult,
    TrainingSet,
    dev_score,
    epoch_batches,
    fine_tune,
)
from demitasse.training.two_step import TwoStepResult, pooler_swap_matrix, two_step

__all__ = [
    "AlignmentLoss",
    "AnglELoss",
    "AngleLoss",
    "CoSENTLoss",
    "EspressoLoss",
    "ExitHeads",
    "HeadLoss",
    "InBatchNegativesLoss",
    "LastLayerLoss",
    "LayerwiseLoss",
    "LossSplit",
    "MatryoshkaLoss",
    "ModelLoss",
    "NestedPrefixLoss",
    "PairBatch",
    "PoolerHead",
    "PrefixLoss",
    "SentenceModel",
    "SoftmaxLoss",
    "TrainingConfig",
    "TrainingResult",
    "TrainingSet",
    "TwoStepResult",
    "WeightedSum",
    "compression_target",
    "dev_score",
    "epoch_batches",
    "fine_tune",
    "make_base_loss",
    "pooler_swap_matrix",
    "two_step",
]
