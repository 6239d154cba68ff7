"""Perturbed copies of sentences: near-paraphrases for similarity-preserving training.

A random batch of unlabeled sentences holds almost no closely related pairs (on MiniLM the
median cosine of a sentence with its nearest neighbour among 30k others is 0.58, while half of
the STS-B dev pairs score above 0.63). A sentence and a lightly perturbed copy of it supply
such pairs from unlabeled text alone; the encoder's cosine for the pair is the training target,
so no label is involved.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

#: Probability of each edit: word dropout, deletion of one span, swaps of adjacent words.
_DROPOUT, _SPAN = 0.4, 0.3


def perturb_sentence(sentence: str, rng: random.Random, dropout: float = 0.2) -> str:
    """One perturbed copy: drop words (each with ``dropout``, at least one), delete a span of
    20–40 % of the words, or swap two pairs of adjacent words. Two words are always kept."""
    words = sentence.split()
    n = len(words)
    if n < 3:
        return sentence
    edit = rng.random()
    if edit < _DROPOUT:
        kept = [w for w in words if rng.random() >= dropout]
        if len(kept) == n:
            kept.pop(rng.randrange(n))
        words = kept if len(kept) >= 2 else words[:2]
    elif edit < _DROPOUT + _SPAN:
        length = max(1, round(n * rng.uniform(0.2, 0.4)))
        if n - length >= 2:
            start = rng.randrange(n - length + 1)
            words = words[:start] + words[start + length :]
    else:
        for _ in range(2):
            i = rng.randrange(n - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def perturb_sentences(sentences: Sequence[str], seed: int = 0) -> list[str]:
    """A perturbed copy of every sentence (see :func:`perturb_sentence`), reproducible by seed."""
    rng = random.Random(seed)
    return [perturb_sentence(s, rng) for s in sentences]
