"""Keep the STS evaluation pairs out of training data.

STS-B was assembled from the STS 2012–2016 shared tasks, so most STS-B *train* pairs are also
STS12–16 *test* pairs, with the same gold score: 4,759 of its 5,749 pairs in the shared data.
Training on them is training on the test sets. SICK's train and test splits also share a few
pairs. Every training path that reads scored pairs drops such pairs first, and fits that
read STS-B train sentences without labels (PCA, quantiser ranges) drop every STS test or dev
sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from demitasse.data.pairs import ScoredPairs
from demitasse.data.sts import STS_SUITE, load_sts, load_sts_suite

# Model selection reads these dev splits, so they are held out from training as well.
DEV_SPLITS = ("STS-B", "SICK-R")

UnorderedPair = tuple[str, str]

#: How results name a fit on :func:`stsb_fit_sentences` (not all of STS-B train).
STSB_FIT_DATA = "stsb-train-clean"


def unordered_pair(first: str, second: str) -> UnorderedPair:
    """A pair key that ignores which sentence came first (STS scores are symmetric)."""
    return (first, second) if first <= second else (second, first)


def pair_keys(sentences1: Sequence[str], sentences2: Sequence[str]) -> set[UnorderedPair]:
    return {unordered_pair(a, b) for a, b in zip(sentences1, sentences2, strict=True)}


def evaluation_splits(
    data_dir: str | Path | None = None, names: Iterable[str] = STS_SUITE
) -> list[ScoredPairs]:
    """The STS test splits of ``names`` and the STS-B / SICK-R dev splits."""
    tests = list(load_sts_suite(data_dir, names).values())
    return tests + [load_sts(name, data_dir, split="dev") for name in DEV_SPLITS]


def evaluation_pairs(
    data_dir: str | Path | None = None, names: Iterable[str] = STS_SUITE
) -> set[UnorderedPair]:
    """Every sentence pair of :func:`evaluation_splits`, order ignored."""
    held_out: set[UnorderedPair] = set()
    for pairs in evaluation_splits(data_dir, names):
        held_out |= pair_keys(pairs.sentences1, pairs.sentences2)
    return held_out


def evaluation_sentences(
    data_dir: str | Path | None = None, names: Iterable[str] = STS_SUITE
) -> set[str]:
    """Every sentence of :func:`evaluation_splits`: what an unsupervised fit (PCA, quantiser
    ranges) must not see either."""
    return {text for pairs in evaluation_splits(data_dir, names) for text in pairs.texts()}


def held_out_mask(
    sentences1: Sequence[str], sentences2: Sequence[str], held_out: set[UnorderedPair]
) -> np.ndarray:
    """True where the pair (either order) is one of ``held_out``."""
    return np.array(
        [unordered_pair(a, b) in held_out for a, b in zip(sentences1, sentences2, strict=True)],
        dtype=bool,
    )


def without_pairs(pairs: ScoredPairs, held_out: set[UnorderedPair]) -> ScoredPairs:
    """``pairs`` less those in ``held_out``, in their order and under the same name."""
    keep = ~held_out_mask(pairs.sentences1, pairs.sentences2, held_out)
    return ScoredPairs(
        pairs.name,
        [s for s, k in zip(pairs.sentences1, keep, strict=True) if k],
        [s for s, k in zip(pairs.sentences2, keep, strict=True) if k],
        pairs.scores[keep],
    )


def stsb_fit_sentences(data_dir: str | Path | None = None) -> list[str]:
    """The STS-B train sentences that occur in no STS test or dev split (1,644 of 10,518 in
    the shared data): the default fit data of the post-hoc compressors."""
    held_out = evaluation_sentences(data_dir)
    return [
        text for text in load_sts("STS-B", data_dir, split="train").texts() if text not in held_out
    ]
