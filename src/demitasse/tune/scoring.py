"""How a tune scores one configuration: exactly as the model it would write searches.

A configuration's documents are indexed the way :meth:`CompressedModel.search_index` indexes
them (its codes in memory; with rescoring, int8 codes of the normalised full encoder output
kept aside) and its queries searched as :meth:`CompressedModel.search` does, for the top
:data:`TOP_K`: with rescoring factor F the codes find ``TOP_K × F`` candidates. That is what an
application asking for ten results gets, so nDCG@10 is computed on that search (a deeper
search, say the top 100 for Recall@100, would rescore ten times the candidates and flatter
small codes).

Quality by kind of data: nDCG@10 (and MRR@10, Recall@10) against the judgements; the
Spearman correlation of the pairs' similarities (as the codes' index scores them); or the
label-free estimate, the full model's top-10 neighbours the search keeps (overlap@10, and the
rank correlation of its top 100), against the full model's own neighbourhoods.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from demitasse.compress import Quantizer
from demitasse.errors import DataError
from demitasse.evaluation.label_free import neighbourhood_agreement
from demitasse.evaluation.ranking_metrics import evaluate_run, per_query, search_depth
from demitasse.latency import SearchLatency, measure_search_latency
from demitasse.metrics import spearman_x100
from demitasse.pipeline import RescoreStore, fit_rescore_store, search_prepared
from demitasse.search import QuantizedIndex
from demitasse.tune.data import TuneData

TOP_K = 10
RETRIEVAL_METRICS: tuple[str, ...] = ("ndcg@10", "mrr@10", "recall@10")
#: Queries the label-free estimate samples, and its neighbourhood depths.
LABEL_FREE_SAMPLE = 1000
LABEL_FREE_K = 10
LABEL_FREE_DEPTH = 100
#: Queries timed one at a time for the latency, and passes over them (the best one counts).
LATENCY_QUERIES = 64
LATENCY_REPEATS = 2


class TextRows:
    """Row of each text in the matrix of every text a tune embedded."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._row = {text: i for i, text in enumerate(texts)}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        try:
            return np.fromiter((self._row[t] for t in texts), np.int64, count=len(texts))
        except KeyError as exc:
            raise DataError(f"text was not embedded: {str(exc)[:80]}") from None


@dataclass(frozen=True)
class LayerVectors:
    """One encoder layer's full output of the tune's texts, in the roles a score needs.

    ``documents`` are the indexed documents in the judgements' order (the corpus itself when
    there are none); ``queries`` the queries (None: the documents stand in for them).
    """

    corpus: np.ndarray
    documents: np.ndarray
    queries: np.ndarray | None
    left: np.ndarray | None = None
    right: np.ndarray | None = None

    @classmethod
    def of(cls, data: TuneData, vectors: np.ndarray, rows: TextRows) -> LayerVectors:
        if data.kind == "pairs":
            assert data.pairs is not None
            return cls(
                vectors[rows(data.corpus)],
                vectors[rows(data.corpus)],
                None,
                vectors[rows(data.pairs.sentences1)],
                vectors[rows(data.pairs.sentences2)],
            )
        documents = data.corpus if data.dataset is None else data.dataset.corpus_texts
        queries = vectors[rows(data.queries)] if data.queries else None
        return cls(vectors[rows(data.corpus)], vectors[rows(documents)], queries)

    def rescoring(self) -> RescoreStore:
        """The rescoring store as a model that rescores keeps it: int8 codes of the full
        output, ranges fitted on the normalised corpus vectors."""
        return fit_rescore_store(self.corpus, "int8")


@dataclass(frozen=True)
class SearchSide:
    """A configuration's index and the queries it searches with: the compressed float
    vectors (the first stage quantises them as the documents) and, when it keeps a rescoring
    store, the normalised full encoder output."""

    index: QuantizedIndex
    queries: np.ndarray
    rescore_queries: np.ndarray | None

    def search(
        self, factor: float | None, queries: slice = slice(None), k: int = TOP_K
    ) -> np.ndarray:
        """Rows of the top ``k`` documents of each query (of ``queries``)."""
        rescore = None if self.rescore_queries is None else self.rescore_queries[queries]
        return search_prepared(self.index, self.queries[queries], rescore, k, factor)[1]


@dataclass(frozen=True)
class PairSide:
    """A configuration's codes of both sides of the scored pairs."""

    quantizer: Quantizer
    left: np.ndarray
    right: np.ndarray
    dim: int


class Scorer:
    """Scores configurations of one tune's data; ``reference`` is the full model's layer
    (its last, uncompressed), whose neighbourhoods the label-free estimate keeps."""

    def __init__(self, data: TuneData, reference: LayerVectors) -> None:
        self.data = data
        self.reference = reference
        # A query that is also a document finds itself; scoring drops that hit (as BEIR
        # does), so such a search asks for one more. Known once for every configuration.
        dataset = data.dataset
        self.depth = (
            TOP_K if dataset is None else search_depth(TOP_K, dataset.query_ids, dataset.corpus_ids)
        )

    def quality(self, side: SearchSide | PairSide, factor: float | None) -> dict[str, float]:
        """Every metric of the data's kind, ×100 (the headline one first)."""
        return self.measure(side, factor)[0]

    def measure(
        self, side: SearchSide | PairSide, factor: float | None
    ) -> tuple[dict[str, float], np.ndarray | None]:
        """:meth:`quality`, and the headline metric of each query ×100 where the headline is
        a mean over queries (judged retrieval; None otherwise)."""
        if isinstance(side, PairSide):
            assert self.data.pairs is not None
            similarity = side.quantizer.similarity(side.left, side.right, dim=side.dim)
            return {"spearman": spearman_x100(similarity, self.data.pairs.scores)}, None
        if self.data.kind == "retrieval":
            return self._judged(side, factor)
        return self._label_free(side, factor), None

    def _judged(
        self, side: SearchSide, factor: float | None
    ) -> tuple[dict[str, float], np.ndarray]:
        dataset = self.data.dataset
        assert dataset is not None
        ids = np.asarray(dataset.corpus_ids, dtype=object)
        rows = side.search(factor, k=self.depth)
        run = {q: ids[hits].tolist() for q, hits in zip(dataset.query_ids, rows, strict=True)}
        headline = per_query(run, dataset.qrels, RETRIEVAL_METRICS[0])
        return evaluate_run(run, dataset.qrels, RETRIEVAL_METRICS), 100 * np.asarray(headline)

    def _label_free(self, side: SearchSide, factor: float | None) -> dict[str, float]:
        agreement = neighbourhood_agreement(
            self.reference.documents,
            side.index,
            side.queries,
            reference_queries=self.reference.queries,
            rescore_multiplier=factor if side.rescore_queries is not None else None,
            rescore_queries=side.rescore_queries,
            k=LABEL_FREE_K,
            depth=LABEL_FREE_DEPTH,
            sample=LABEL_FREE_SAMPLE,
        )
        return {
            f"overlap@{agreement.k}": 100 * agreement.overlap,
            f"rank_correlation@{agreement.depth}": 100 * agreement.rank_correlation,
        }

    def latency(self, side: SearchSide | PairSide, factor: float | None) -> SearchLatency | None:
        """p50/p99 of one query per search call (none for pairs: nothing is searched)."""
        if isinstance(side, PairSide):
            return None
        n = min(LATENCY_QUERIES, len(side.queries))
        rescore = None if side.rescore_queries is None else side.rescore_queries[:n]
        return measure_search_latency(
            side.index,
            side.queries[:n],
            TOP_K,
            rescore_multiplier=factor if rescore is not None else None,
            rescore_queries=rescore,
            repeats=LATENCY_REPEATS,
        )


def headline_of(scores: dict[str, float]) -> float:
    """The first (headline) score; an undefined one counts as no quality at all."""
    value = next(iter(scores.values()))
    return value if math.isfinite(value) else 0.0
