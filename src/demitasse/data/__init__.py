"""Data loaders: STS benchmarks (SentEval files or the Hugging Face hub), user pair and text
files, and precomputed embeddings. Every user-caused problem raises :class:`DataError`."""

from demitasse.data.embeddings import check_finite, load_embeddings
from demitasse.data.files import load_scored_pairs, read_texts
from demitasse.data.hub import HUB_REPOS, load_hf_sts
from demitasse.data.pairs import ScoredPairs, concat_pairs
from demitasse.data.paths import DATA_ENV, resolve_data_dir
from demitasse.data.sts import (
    STS_SUITE,
    canonical_sts_name,
    load_senteval_sts,
    load_sickr,
    load_sts,
    load_sts_suite,
    load_stsb,
)

__all__ = [
    "DATA_ENV",
    "HUB_REPOS",
    "STS_SUITE",
    "ScoredPairs",
    "canonical_sts_name",
    "check_finite",
    "concat_pairs",
    "load_embeddings",
    "load_hf_sts",
    "load_scored_pairs",
    "load_senteval_sts",
    "load_sickr",
    "load_sts",
    "load_sts_suite",
    "load_stsb",
    "read_texts",
    "resolve_data_dir",
]
