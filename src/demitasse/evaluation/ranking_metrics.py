"""Ranking metrics for retrieval runs, as BEIR reports them (pytrec_eval / trec_eval definitions).

A *run* maps each query id to its ranked document ids, best first; *qrels* map each query id to
``{doc_id: grade}``. Definitions, per query:

- ``ndcg@k``: DCG of the first k documents, gain = grade (negative grades count 0), discount
  ``log2(rank + 1)``, divided by the DCG of the best possible ordering of the query's judged
  documents; 0 when no judged document has a positive grade.
- ``recall@k``: relevant documents (grade > 0) among the first k, over all relevant ones.
- ``mrr@k``: 1 / rank of the first relevant document within the first k, else 0.

Means are taken over every query in the qrels (a query missing from the run scores 0; one whose
judgements are all 0 scores 0, as pytrec_eval reports it and BEIR averages it) and multiplied by
100, as the BEIR and MTEB tables print them. Ties are the run's business: rankings are used in
the order given.

A document whose id is the query's own id is dropped from that query's ranking before scoring,
as BEIR and MTEB do by default (``ignore_identical_ids``): in ArguAna and Quora every query is
also a document of the corpus under the same id, and finding the query itself says nothing.
A search for such a data set should therefore return one hit more than the deepest cutoff
(:func:`search_depth`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from demitasse.errors import DataError

Ranking = Sequence[str]
Judgements = Mapping[str, int]

DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10")


def ndcg_at_k(ranking: Ranking, judged: Judgements, k: int = 10) -> float:
    """Normalised discounted cumulative gain of the first ``k`` documents, in [0, 1]."""
    ideal_gains = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    ideal = sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal_gains))
    if ideal == 0:
        return 0.0
    dcg = sum(
        max(judged.get(doc, 0), 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:k])
    )
    return dcg / ideal


def recall_at_k(ranking: Ranking, judged: Judgements, k: int = 100) -> float:
    """Share of the relevant documents (grade > 0) found in the first ``k``, in [0, 1]."""
    relevant = {doc for doc, g in judged.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def reciprocal_rank_at_k(ranking: Ranking, judged: Judgements, k: int = 10) -> float:
    """1 / rank of the first relevant document within the first ``k``, else 0."""
    for rank, doc in enumerate(ranking[:k], start=1):
        if judged.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


METRIC_FUNCTIONS: dict[str, Callable[[Ranking, Judgements, int], float]] = {
    "ndcg": ndcg_at_k,
    "recall": recall_at_k,
    "mrr": reciprocal_rank_at_k,
}


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg@10"`` → ``("ndcg", 10)``."""
    kind, sep, cutoff = name.partition("@")
    if kind not in METRIC_FUNCTIONS or not sep or not cutoff.isdigit() or int(cutoff) < 1:
        known = ", ".join(f"{m}@k" for m in METRIC_FUNCTIONS)
        raise DataError(f"unknown ranking metric {name!r}; use one of {known} (k ≥ 1)")
    return kind, int(cutoff)


def max_cutoff(metrics: Sequence[str]) -> int:
    """The deepest rank any of ``metrics`` looks at: how many hits a search must return."""
    return max(parse_metric(m)[1] for m in metrics)


def search_depth(cutoff: int, query_ids: Iterable[str], corpus_ids: Iterable[str]) -> int:
    """Hits a search must return so that ``cutoff`` remain once each query's own id is
    dropped: one more when some query id also names a document."""
    shared = not set(corpus_ids).isdisjoint(query_ids)
    return cutoff + 1 if shared else cutoff


def per_query(
    run: Mapping[str, Ranking],
    qrels: Mapping[str, Judgements],
    metric: str,
    *,
    ignore_identical_ids: bool = True,
) -> list[float]:
    """``metric`` of each query in ``qrels``, in their order, in [0, 1]."""
    kind, k = parse_metric(metric)
    score = METRIC_FUNCTIONS[kind]
    values = []
    for query_id, judged in qrels.items():
        ranking = run.get(query_id, ())
        if ignore_identical_ids:
            ranking = [doc for doc in ranking if doc != query_id]
        values.append(score(ranking, judged, k))
    return values


def evaluate_run(
    run: Mapping[str, Ranking],
    qrels: Mapping[str, Judgements],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    ignore_identical_ids: bool = True,
) -> dict[str, float]:
    """Mean of each metric over the queries in ``qrels``, ×100."""
    if not qrels:
        raise DataError("no judged queries to evaluate")
    means = {}
    for name in metrics:
        values = per_query(run, qrels, name, ignore_identical_ids=ignore_identical_ids)
        means[name] = 100.0 * sum(values) / len(qrels)
    return means
