"""Data loaders: STS (files or the Hugging Face hub), SentEval classification, BEIR retrieval,
parallel text, user pair and text files, and precomputed embeddings.

Every user-caused problem raises :class:`DataError`. Text that is not valid Unicode (invalid
UTF-8, lone surrogates) is replaced with U+FFFD under one policy, with a warning that counts it
(:mod:`demitasse.data.unicode`).
"""

from demitasse.data._tables import check_columns
from demitasse.data.augment import perturb_sentence, perturb_sentences
from demitasse.data.beir import BeirDataset, load_beir, load_beir_folders, load_retrieval
from demitasse.data.documents import read_documents
from demitasse.data.embeddings import (
    check_embeddings_target,
    check_finite,
    load_embeddings,
    save_embeddings,
)
from demitasse.data.files import check_texts, load_scored_pairs, read_corpus, read_texts
from demitasse.data.hub import HUB_REPOS, load_hf_sts
from demitasse.data.nli import NLI_LABELS, NLIPairs, Triples, load_snli, nli_triples
from demitasse.data.overlap import (
    STSB_FIT_DATA,
    evaluation_pairs,
    evaluation_sentences,
    stsb_fit_sentences,
    without_pairs,
)
from demitasse.data.pairs import ScoredPairs, concat_pairs
from demitasse.data.parallel import ParallelTexts, load_multi30k, load_parallel
from demitasse.data.paths import DATA_ENV, resolve_data_dir
from demitasse.data.senteval_classification import (
    CLASSIFICATION_SUITE,
    LabeledPairs,
    LabeledSplits,
    LabeledTexts,
    load_binary_line_files,
    load_classification_set,
    load_cr,
    load_mr,
    load_mrpc,
    load_sst,
    load_sst2,
    load_trec,
)
from demitasse.data.sts import (
    STS_SUITE,
    canonical_sts_name,
    load_senteval_sts,
    load_sickr,
    load_sts,
    load_sts_path,
    load_sts_set,
    load_sts_suite,
    load_stsb,
)
from demitasse.data.unicode import Replacements, argument_text, decode_utf8, replace_in_texts
from demitasse.data.unlabeled import load_unlabeled

__all__ = [
    "CLASSIFICATION_SUITE",
    "DATA_ENV",
    "HUB_REPOS",
    "NLI_LABELS",
    "STSB_FIT_DATA",
    "STS_SUITE",
    "BeirDataset",
    "LabeledPairs",
    "LabeledSplits",
    "LabeledTexts",
    "NLIPairs",
    "ParallelTexts",
    "Replacements",
    "ScoredPairs",
    "Triples",
    "argument_text",
    "canonical_sts_name",
    "check_columns",
    "check_embeddings_target",
    "check_finite",
    "check_texts",
    "concat_pairs",
    "decode_utf8",
    "evaluation_pairs",
    "evaluation_sentences",
    "load_beir",
    "load_beir_folders",
    "load_binary_line_files",
    "load_classification_set",
    "load_cr",
    "load_embeddings",
    "load_hf_sts",
    "load_mr",
    "load_mrpc",
    "load_multi30k",
    "load_parallel",
    "load_retrieval",
    "load_scored_pairs",
    "load_senteval_sts",
    "load_sickr",
    "load_snli",
    "load_sst",
    "load_sst2",
    "load_sts",
    "load_sts_path",
    "load_sts_set",
    "load_sts_suite",
    "load_stsb",
    "load_trec",
    "load_unlabeled",
    "nli_triples",
    "perturb_sentence",
    "perturb_sentences",
    "read_corpus",
    "read_documents",
    "read_texts",
    "replace_in_texts",
    "resolve_data_dir",
    "save_embeddings",
    "stsb_fit_sentences",
    "without_pairs",
]
