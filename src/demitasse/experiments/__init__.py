"""What benchmark scripts share: experiment grids from TOML, data for compressor fits, jobs in
worker processes with a set thread budget, and seed averaging.

It sits above the library (it may import data, encoders, compress and evaluation); nothing
in the library imports it except the command line.
"""

from demitasse.experiments.fitting import (
    Embedded,
    FitJob,
    FitOutcome,
    FitSetting,
    Judged,
    SeedSummary,
    fit_and_judge,
    judge,
    seed_jobs,
    summarise_seeds,
)
from demitasse.experiments.grids import load_grid
from demitasse.experiments.parallel import run_in_workers
from demitasse.experiments.settings import (
    evaluation_texts,
    held_out_sts_training,
    held_out_unlabeled,
    retrieval_setting,
    scifact_training,
    sts_and_scifact,
    supervised_setting,
    unsupervised_setting,
)

__all__ = [
    "Embedded",
    "FitJob",
    "FitOutcome",
    "FitSetting",
    "Judged",
    "SeedSummary",
    "evaluation_texts",
    "fit_and_judge",
    "held_out_sts_training",
    "held_out_unlabeled",
    "judge",
    "load_grid",
    "retrieval_setting",
    "run_in_workers",
    "scifact_training",
    "seed_jobs",
    "sts_and_scifact",
    "summarise_seeds",
    "supervised_setting",
    "unsupervised_setting",
]
