# ruff: noqa: N803, N806  (matrices are capitalised, as in scikit-learn)
"""Translation retrieval (bitext mining, as on Tatoeba): find each sentence's translation.

Every source sentence is a query against ALL target sentences; it scores when its own
translation is the most similar. Accuracy ×100 is reported in both directions. Similarity is
what an index at the precision computes: cosine of the codes for float32 and int8, the number
of agreeing bits (``d`` − Hamming) for binary.

Ties are split fairly: a query whose translation shares the top score with ``t - 1`` other
candidates scores ``1/t`` (the expected accuracy of breaking the tie at random). Binary codes
at small ``d`` tie often, and taking the first index would reward or punish them by list
order. Identical candidate texts are one candidate, so duplicates never tie with each other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from demitasse.data.parallel import ParallelTexts
from demitasse.errors import DataError
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task, with_average

#: Similarity entries computed at once (64 MB of float32); rows per chunk follow from it.
BLOCK_ELEMENTS = 1 << 24


def _unit_rows(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)


def translation_accuracy(
    queries: np.ndarray,
    candidates: np.ndarray,
    gold: np.ndarray,
    *,
    hamming: bool = False,
    chunk_rows: int | None = None,
) -> float:
    """Share ×100 of queries whose most similar candidate is ``candidates[gold[i]]``.

    ``queries`` [n, d] and ``candidates`` [m, d] are float features: vectors or int8 codes
    (compared by cosine), or, with ``hamming=True``, bits as 0/1 (compared by agreeing bits).
    Ties count ``1/t`` (see the module docstring). Queries are scored ``chunk_rows`` at a time
    against all candidates; by default as many as fit in :data:`BLOCK_ELEMENTS` entries.
    """
    Q = np.asarray(queries, dtype=np.float32)
    C = np.asarray(candidates, dtype=np.float32)
    gold = np.asarray(gold, dtype=np.int64).reshape(-1)
    if Q.ndim != 2 or C.ndim != 2 or Q.shape[1] != C.shape[1]:
        raise DataError(f"query shape {Q.shape} and candidate shape {C.shape} do not match")
    if len(gold) != len(Q):
        raise DataError(f"{len(gold)} gold indices for {len(Q)} queries")
    if len(Q) == 0 or len(C) == 0:
        raise DataError("translation retrieval needs at least one query and one candidate")
    if gold.min() < 0 or gold.max() >= len(C):
        raise DataError(f"gold indices must lie in [0, {len(C)})")
    if chunk_rows is None:
        chunk_rows = max(1, BLOCK_ELEMENTS // len(C))
    elif chunk_rows < 1:
        raise DataError(f"chunk_rows must be positive, got {chunk_rows}")

    if hamming:
        # agreeing bits = d - |q| - |c| + 2 q·c; per-query terms change neither the ranking
        # nor ties, so 2 q·c - |c| suffices, and it is an exact integer in float32.
        C_t = (2.0 * C).T
        offset = -C.sum(axis=1, dtype=np.float32)
    else:
        Q, C_t, offset = _unit_rows(Q), _unit_rows(C).T, None
    C_t = np.ascontiguousarray(C_t)

    # Per-query credits, summed once at the end: the total must not depend on the chunking.
    credit = np.empty(len(Q))
    for start in range(0, len(Q), chunk_rows):
        S = Q[start : start + chunk_rows] @ C_t
        if offset is not None:
            S += offset
        best = S.max(axis=1)
        tied = np.count_nonzero(best[:, None] == S, axis=1)
        hit = S[np.arange(len(S)), gold[start : start + chunk_rows]] == best
        credit[start : start + len(S)] = hit / tied
    return 100.0 * float(credit.mean())


def _direction_accuracy(
    embedded: EmbeddedTexts,
    queries: Sequence[str],
    candidates: Sequence[str],
    chunk_rows: int | None,
) -> float:
    unique = list(dict.fromkeys(candidates))
    index = {text: i for i, text in enumerate(unique)}
    gold = np.fromiter((index[t] for t in candidates), dtype=np.int64, count=len(candidates))
    # features_of: float32 vectors, int8 bucket centres, or binary codes as 0/1 bits.
    return translation_accuracy(
        embedded.features_of(queries),
        embedded.features_of(unique),
        gold,
        hamming=embedded.precision == "binary",
        chunk_rows=chunk_rows,
    )


class TranslationTask(Task):
    """Translation retrieval accuracy ×100 in both directions of each parallel corpus.

    Datasets are named ``"<corpus> <src>→<tgt>"`` and ``"<corpus> <tgt>→<src>"``; ``avg`` is
    their mean (over all directions of all corpora).
    """

    name = "translation"

    def __init__(
        self,
        corpora: ParallelTexts | Sequence[ParallelTexts],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        corpora = [corpora] if isinstance(corpora, ParallelTexts) else list(corpora)
        if not corpora:
            raise DataError("no parallel corpora to evaluate")
        names = [c.name for c in corpora]
        for corpus in corpora:
            if not isinstance(corpus, ParallelTexts):
                raise DataError(f"expected ParallelTexts, got {type(corpus).__name__}")
            if len(corpus) == 0:
                raise DataError(f"parallel corpus {corpus.name!r} is empty")
            if names.count(corpus.name) > 1:
                raise DataError(f"parallel corpus name {corpus.name!r} is used twice")
        self.corpora = corpora
        self.chunk_rows = chunk_rows

    def texts(self) -> list[str]:
        return [t for corpus in self.corpora for t in corpus.texts()]

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        scores = []
        for corpus in self.corpora:
            directions = (
                (corpus.source, corpus.target, corpus.source_lang, corpus.target_lang),
                (corpus.target, corpus.source, corpus.target_lang, corpus.source_lang),
            )
            for queries, candidates, query_lang, candidate_lang in directions:
                accuracy = _direction_accuracy(embedded, queries, candidates, self.chunk_rows)
                scores.append(
                    Score(
                        f"{corpus.name} {query_lang}→{candidate_lang}",
                        "accuracy",
                        accuracy,
                        {"queries": len(queries), "candidates": len(set(candidates))},
                    )
                )
        return with_average(scores, "accuracy")
