"""Fine-tuning sentence encoders: the training loop, objectives and Espresso (ESE).

``fine_tune(model, objective, train_sets, output_dir)`` trains a :class:`SentenceModel` with a
model loss — :class:`LastLayerLoss` (plain), :class:`MatryoshkaLoss` or :class:`EspressoLoss` —
around a base loss (AnglE by default, CoSENT or in-batch negatives); ``two_step`` trains
low-dimensional pooler heads as Wang et al.'s Algorithm 1.
"""

from demitasse.training.espresso import EspressoLoss, compression_target
from demitasse.training.losses import (
    AnglELoss,
    AngleLoss,
    CoSENTLoss,
    InBatchNegativesLoss,
    LastLayerLoss,
    MatryoshkaLoss,
    ModelLoss,
    PairBatch,
    make_base_loss,
)
from demitasse.training.model import SentenceModel
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
    "AnglELoss",
    "AngleLoss",
    "CoSENTLoss",
    "EspressoLoss",
    "HeadLoss",
    "InBatchNegativesLoss",
    "LastLayerLoss",
    "MatryoshkaLoss",
    "ModelLoss",
    "PairBatch",
    "PoolerHead",
    "SentenceModel",
    "SoftmaxLoss",
    "TrainingConfig",
    "TrainingResult",
    "TrainingSet",
    "TwoStepResult",
    "compression_target",
    "dev_score",
    "epoch_batches",
    "fine_tune",
    "make_base_loss",
    "pooler_swap_matrix",
    "two_step",
]
