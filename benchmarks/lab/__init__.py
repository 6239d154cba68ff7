"""The lab beside the product: what benchmark scripts share. Experiment grids from TOML, data
for compressor fits, jobs in worker processes with a set thread budget, seed averaging, the
depth harness's checks, and the RESULTS.md pages filled from Markdown templates.

It is no part of the installed package: the scripts run as ``python benchmarks/<name>.py``, so
``benchmarks/`` is on ``sys.path`` and they import ``lab``. It may import anything in
``demitasse``; nothing in ``demitasse`` imports it.
"""

from lab.fitting import (
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
from lab.grids import load_grid
from lab.parallel import run_in_workers
from lab.settings import (
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
