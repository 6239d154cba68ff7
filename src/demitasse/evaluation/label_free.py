"""A label-free quality estimate: how well a configuration keeps the full model's neighbourhoods.

Users rarely have relevance labels, but they have their corpus. The full (reference) model's
own nearest neighbours on that corpus are the target a compressed configuration should keep:

- **neighbour overlap@k** (k = 10): the share of the reference top-k documents that the
  candidate's search returns in its top k, averaged over queries;
- **rank correlation@depth** (depth = 100): Spearman's correlation between the reference
  model's similarities of its top-``depth`` documents and the candidate's ranking of those
  same documents, averaged over queries.

Both are computed against the candidate's *search*, exactly as it would answer (a
:class:`~demitasse.search.QuantizedIndex`: float, int8 or binary codes, with or
without rescoring). Under rescoring, a document among the first stage's ``depth·F``
candidates ranks by its rescored score, ahead of every other document, which ranks by its
first-stage score. Ties (frequent in Hamming distances) share their average rank.

Queries are the user's queries when given, else corpus documents (each then excluded from
its own neighbourhood). ``sample`` of them are drawn with ``seed``, so the estimate is
deterministic and costs O(sample × corpus) whatever the corpus size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from demitasse.errors import DataError
from demitasse.evaluation.tasks import Score
from demitasse.metrics import average_ranks
from demitasse.search import QuantizedIndex, exact_search


@dataclass(frozen=True)
class NeighbourhoodAgreement:
    """Both estimates in [0, 1] (rank correlation in [-1, 1]), and what they were taken on."""

    overlap: float
    rank_correlation: float
    n_queries: int
    k: int
    depth: int
    queries_from: str  # "queries" or "corpus"

    def scores(self, dataset: str, extra: dict[str, Any] | None = None) -> list[Score]:
        """The two estimates ×100 as task scores (``overlap@10``, ``rank_correlation@100``)."""
        described = {
            "label_free": True,
            "sampled_queries": self.n_queries,
            "queries_from": self.queries_from,
            **(extra or {}),
        }
        return [
            Score(dataset, f"overlap@{self.k}", 100 * self.overlap, dict(described)),
            Score(
                dataset, f"rank_correlation@{self.depth}", 100 * self.rank_correlation, described
            ),
        ]


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise DataError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _sample_rows(n: int, sample: int | None, seed: int) -> np.ndarray:
    if sample is None or sample >= n:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=_positive(sample, "sample"), replace=False))


def _without_self(rows: np.ndarray, own: np.ndarray | None, keep: int) -> np.ndarray:
    """Each row's first ``keep`` entries once the query's own document (``own``) is removed."""
    if own is None:
        return rows[:, :keep]
    kept = np.empty((rows.shape[0], keep), rows.dtype)
    for i, (hits, me) in enumerate(zip(rows, own, strict=True)):
        kept[i] = hits[hits != me][:keep]
    return kept


def _candidate_order_values(
    candidate: QuantizedIndex,
    rows: np.ndarray,
    queries: np.ndarray,
    rescore_queries: np.ndarray | None,
    rescore_multiplier: float | None,
    pool: int,
) -> np.ndarray:
    """For each query, a value per document in ``rows`` whose descending order is the
    candidate search's order of them (equal values: tied in the search)."""
    first = candidate.first_stage_scores(queries, rows).astype(np.float64)
    if rescore_multiplier is None or candidate.rescore_vectors is None:
        return first
    depth = min(candidate.n_documents, math.ceil(pool * rescore_multiplier))
    _, shortlisted = candidate.first_stage(queries, depth)
    rescored = candidate.rescore_scores(
        queries if rescore_queries is None else rescore_queries, rows
    ).astype(np.float64)
    values = np.empty(rows.shape)
    for i in range(rows.shape[0]):
        inside = np.isin(rows[i], shortlisted[i])
        # Ranks within each group, the shortlisted group above every other document.
        values[i, inside] = rows.shape[1] + average_ranks(rescored[i, inside])
        values[i, ~inside] = average_ranks(first[i, ~inside])
    return values


def _spearman(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Spearman's rho with tied values sharing their average rank; 0 when either side has no
    order at all (a candidate that ties every document ranks nothing)."""
    a, b = average_ranks(reference), average_ranks(candidate)
    a, b = a - a.mean(), b - b.mean()
    norm = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / norm if norm > 0 else 0.0


def _check_sides(
    reference_corpus: np.ndarray,
    candidate: QuantizedIndex,
    reference_queries: np.ndarray | None,
    candidate_queries: np.ndarray,
    rescore_queries: np.ndarray | None,
) -> np.ndarray:
    """The reference vectors the queries come from, once every side matches it."""
    n = reference_corpus.shape[0] if reference_corpus.ndim == 2 else 0
    if n != candidate.n_documents:
        raise DataError(
            f"the reference corpus has {n} documents but the candidate index "
            f"{candidate.n_documents}"
        )
    side, reference = (
        ("corpus", reference_corpus)
        if reference_queries is None
        else ("queries", reference_queries)
    )
    for name, array in (
        ("candidate_queries", candidate_queries),
        ("rescore_queries", rescore_queries),
    ):
        if array is not None and len(array) != len(reference):
            raise DataError(f"{name} have {len(array)} rows; the reference {side} {len(reference)}")
    return reference


def _reference_neighbours(
    queries: np.ndarray,
    corpus: np.ndarray,
    own: np.ndarray | None,
    depth: int,
    metric_space: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The reference model's top ``depth`` (similarities, rows) per query, without the
    query's own document (``own``) when the queries are corpus documents."""
    scores, rows = exact_search(
        queries, corpus, k=depth + int(own is not None), metric=metric_space
    )
    if own is None:
        return scores, rows
    kept = rows != own[:, None]
    scores = np.stack([s[m][:depth] for s, m in zip(scores, kept, strict=True)])
    return scores, _without_self(rows, own, depth)


def _mean_overlap(reference_rows: np.ndarray, found_rows: np.ndarray) -> float:
    """The share of each reference top-k that the candidate also returns, averaged."""
    k = reference_rows.shape[1]
    pairs = zip(reference_rows, found_rows, strict=True)
    return float(np.mean([len(set(a) & set(b)) / k for a, b in pairs]))


def _mean_rank_correlation(reference_scores: np.ndarray, candidate_values: np.ndarray) -> float:
    pairs = zip(reference_scores, candidate_values, strict=True)
    return float(np.mean([_spearman(r, c) for r, c in pairs]))


def _reachable_depth(depth: int, documents: int) -> int:
    if documents < 1:
        raise DataError("the corpus needs at least 2 documents when its documents are the queries")
    return min(depth, documents)


def neighbourhood_agreement(
    reference_corpus: np.ndarray,
    candidate: QuantizedIndex,
    candidate_queries: np.ndarray,
    *,
    reference_queries: np.ndarray | None = None,
    rescore_multiplier: float | None = None,
    rescore_queries: np.ndarray | None = None,
    k: int = 10,
    depth: int = 100,
    sample: int | None = 1000,
    seed: int = 0,
    metric_space: str = "cosine",
) -> NeighbourhoodAgreement:
    """How well ``candidate``'s search keeps the reference model's neighbourhoods.

    Args:
        reference_corpus: the full model's float vectors of the corpus [n, D].
        candidate: the candidate configuration's index over the same n documents, in order.
        candidate_queries: the queries as the candidate embeds them (float vectors in its
            first-stage space). Without ``reference_queries`` the queries are the corpus
            documents, so this holds the candidate's vectors of all n documents.
        reference_queries: the full model's vectors of the user's queries [m, D]; None to use
            corpus documents as queries.
        rescore_multiplier, rescore_queries: as in :meth:`QuantizedIndex.search`.
        k, depth: the overlap's and the rank correlation's cut-offs.
        sample: how many queries to draw (None: all), with ``seed``.
        metric_space: how the reference vectors are compared (``"cosine"`` or ``"l2"``).
    """
    k, depth = _positive(k, "k"), _positive(depth, "depth")
    reference_side = _check_sides(
        reference_corpus, candidate, reference_queries, candidate_queries, rescore_queries
    )
    from_corpus = reference_queries is None
    picked = _sample_rows(len(reference_side), sample, seed)
    own = picked if from_corpus else None
    extra = int(from_corpus)  # one more hit, to drop the query's own document
    keep_depth = _reachable_depth(depth, reference_corpus.shape[0] - extra)
    ref_scores, ref_rows = _reference_neighbours(
        reference_side[picked], reference_corpus, own, keep_depth, metric_space
    )
    queries = candidate_queries[picked]
    rescore = None if rescore_queries is None else rescore_queries[picked]
    keep_k = min(k, keep_depth)
    _, found = candidate.search(
        queries, keep_k + extra, rescore_multiplier=rescore_multiplier, rescore_queries=rescore
    )
    values = _candidate_order_values(
        candidate, ref_rows, queries, rescore, rescore_multiplier, keep_depth + extra
    )
    return NeighbourhoodAgreement(
        overlap=_mean_overlap(ref_rows[:, :keep_k], _without_self(found, own, keep_k)),
        rank_correlation=_mean_rank_correlation(ref_scores, values),
        n_queries=len(picked),
        k=keep_k,
        depth=keep_depth,
        queries_from="corpus" if from_corpus else "queries",
    )
