"""``demitasse tune``: the smallest and fastest configuration of a model that still keeps what
the user needs on their own data.

- :mod:`~demitasse.tune.space`: the configurations swept (layer cut, encoder, compressor,
  width, precision, rescoring factor);
- :mod:`~demitasse.tune.data`: the user's data (judged retrieval, scored pairs, or a corpus
  alone for the label-free estimate);
- :mod:`~demitasse.tune.sweep`: the resumable sweep (:mod:`~demitasse.tune.store` holds its
  finished measurements), scored as the written model searches
  (:mod:`~demitasse.tune.scoring`);
- :mod:`~demitasse.tune.choice`: the Pareto front and the choice rule;
- :mod:`~demitasse.tune.output`, :mod:`~demitasse.tune.report`: the model directory, the
  records and the report; :func:`tune` runs it all.
"""

from demitasse.tune.choice import (
    LABEL_FREE_SLOPE,
    NoConfigurationError,
    Outcome,
    Requirement,
    Target,
    choose,
    pareto_front,
    requirement,
)
from demitasse.tune.data import TuneData, load_tune_data
from demitasse.tune.run import TuneResult, tune
from demitasse.tune.space import Configuration, SweepSpace, parse_methods
from demitasse.tune.sweep import Sweep, SweepSettings

__all__ = [
    "LABEL_FREE_SLOPE",
    "Configuration",
    "NoConfigurationError",
    "Outcome",
    "Requirement",
    "Sweep",
    "SweepSettings",
    "SweepSpace",
    "Target",
    "TuneData",
    "TuneResult",
    "choose",
    "load_tune_data",
    "pareto_front",
    "parse_methods",
    "requirement",
    "tune",
]
