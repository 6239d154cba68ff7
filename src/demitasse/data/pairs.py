"""The scored sentence-pair container shared by every STS loader."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from demitasse.data.unicode import replace_in_texts


@dataclass(frozen=True, eq=False)
class ScoredPairs:
    """Sentence pairs with one gold similarity score each.

    ``eq=False``: comparing thousands of sentences and an array field by value is never what a
    caller wants, and the generated ``__eq__`` would fail on the array anyway.
    """

    name: str
    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray

    def __post_init__(self) -> None:
        # Lone surrogates become U+FFFD (demitasse.data.unicode): pairs built in Python or
        # read from a hub data set reach the encoder as every other text does.
        s1 = replace_in_texts(list(self.sentences1), f"{self.name}: first sentences")
        s2 = replace_in_texts(list(self.sentences2), f"{self.name}: second sentences")
        scores = np.array(self.scores, dtype=np.float64).reshape(-1)
        if not len(s1) == len(s2) == len(scores):
            raise ValueError(
                f"{self.name}: {len(s1)} first sentences, {len(s2)} second sentences and "
                f"{len(scores)} scores; they must be equal"
            )
        # A frozen dataclass should not hand out a writable array either.
        scores.setflags(write=False)
        object.__setattr__(self, "sentences1", s1)
        object.__setattr__(self, "sentences2", s2)
        object.__setattr__(self, "scores", scores)

    def __len__(self) -> int:
        return len(self.scores)

    def __repr__(self) -> str:
        return f"ScoredPairs(name={self.name!r}, pairs={len(self)})"

    def texts(self) -> list[str]:
        """Unique sentences of both sides in first-seen order (pair by pair, left then right)."""
        seen: dict[str, None] = {}
        for a, b in zip(self.sentences1, self.sentences2, strict=True):
            seen.setdefault(a)
            seen.setdefault(b)
        return list(seen)

    def head(self, n: int) -> ScoredPairs:
        """The first ``n`` pairs, under the same name."""
        if n < 0:
            raise ValueError(f"head() needs n >= 0, got {n}")
        return ScoredPairs(self.name, self.sentences1[:n], self.sentences2[:n], self.scores[:n])


def concat_pairs(name: str, parts: Sequence[ScoredPairs]) -> ScoredPairs:
    """Concatenate ``parts`` in order into one set called ``name``."""
    s1 = [s for p in parts for s in p.sentences1]
    s2 = [s for p in parts for s in p.sentences2]
    scores = np.concatenate([p.scores for p in parts]) if parts else np.zeros(0)
    return ScoredPairs(name, s1, s2, scores)
