"""The retrieval task: embed queries and documents, search, score BEIR's nDCG@10 & co.

The search itself (exact faiss search, quantised search with rescoring, per-query latency)
lives in :mod:`demitasse.search`, shared with the model; its names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from demitasse.data.beir import BeirDataset
from demitasse.errors import DataError
from demitasse.evaluation.ranking_metrics import (
    DEFAULT_METRICS,
    evaluate_run,
    max_cutoff,
    search_depth,
)
from demitasse.evaluation.records import rescoring_extra
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task, with_average
from demitasse.latency import measure_search_latency
from demitasse.search import (
    METRIC_SPACES,
    QuantizedIndex,
    Rescoring,
    check_k,
    exact_search,
    search_metric_of,
)


class RetrievalTask(Task):
    """BEIR-style retrieval: embed queries and documents, exact search, nDCG@10 & co ×100.

    ``metric_space`` is how float32 and int8 vectors are compared (``"cosine"`` or ``"l2"``);
    binary codes are always compared by Hamming distance.

    ``rescoring`` adds, for int8 and binary codes, one set of scores per
    :class:`Rescoring` variant (a number F stands for ``Rescoring(F)``: int8 document vectors):
    the first stage returns ``k·F`` candidates, which the float query rescores against the
    documents' vectors kept at the variant's precision. ``latency=True`` adds each variant's
    per-query search time (``latency_p50_ms`` / ``latency_p99_ms``, one query per call, on
    ``latency_threads`` faiss threads). Every record says in ``extra`` how it searched:
    the rescoring factor (1: none), the rescoring precision, and the bytes per vector held in
    memory by the index and kept for rescoring.
    """

    name = "retrieval"

    def __init__(
        self,
        datasets: BeirDataset | Sequence[BeirDataset],
        *,
        metric_space: str = "cosine",
        metrics: Sequence[str] = DEFAULT_METRICS,
        rescoring: Sequence[Rescoring | float] = (),
        latency: bool = False,
        latency_repeats: int = 3,
        latency_threads: int | None = 1,
    ) -> None:
        self.datasets = [datasets] if isinstance(datasets, BeirDataset) else list(datasets)
        if not self.datasets:
            raise DataError("no retrieval data sets to evaluate")
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise DataError(f"retrieval data set names must differ, got {names}")
        if metric_space not in METRIC_SPACES:
            raise DataError(
                f"unknown metric_space {metric_space!r}; choose from {', '.join(METRIC_SPACES)}"
            )
        self.metric_space = metric_space
        self.metrics = list(metrics)
        self.k = max_cutoff(self.metrics)
        # Known once per data set (held here, so its id stays its own): every configuration
        # evaluated searches it.
        self._depths = {
            id(d): search_depth(self.k, d.query_ids, d.corpus_ids) for d in self.datasets
        }
        self.rescoring = [r if isinstance(r, Rescoring) else Rescoring(r) for r in rescoring]
        self.latency = bool(latency)
        self.latency_repeats = check_k(latency_repeats)
        self.latency_threads = latency_threads

    def texts(self) -> list[str]:
        return [t for d in self.datasets for t in (*d.query_texts, *d.corpus_texts)]

    def search_metric(self, embedded: EmbeddedTexts) -> str:
        """How ``embedded``'s codes are searched (:func:`~demitasse.search.search_metric_of`)."""
        return search_metric_of(embedded.quantizer, self.metric_space)

    def depth(self, dataset: BeirDataset) -> int:
        """Hits to search for: ``k``, and one more where a query can find itself (its id
        names a document too, as in ArguAna), since scoring drops that hit as BEIR does."""
        depth = self._depths.get(id(dataset))
        return (
            search_depth(self.k, dataset.query_ids, dataset.corpus_ids) if depth is None else depth
        )

    def run(self, dataset: BeirDataset, embedded: EmbeddedTexts) -> dict[str, list[str]]:
        """Ranked document ids (top :meth:`depth`) for each of ``dataset``'s queries."""
        if self.search_metric(embedded) == "asymmetric":
            _, rows = self.index(dataset, embedded).first_stage(
                embedded.vectors_of(dataset.query_texts), self.depth(dataset)
            )
            return self._ranked_ids(dataset, rows)
        _, rows = exact_search(
            embedded.codes_of(dataset.query_texts),
            embedded.codes_of(dataset.corpus_texts),
            k=self.depth(dataset),
            metric=self.search_metric(embedded),
            dim=embedded.dim,
        )
        return self._ranked_ids(dataset, rows)

    @staticmethod
    def _ranked_ids(dataset: BeirDataset, rows: np.ndarray) -> dict[str, list[str]]:
        ids = np.asarray(dataset.corpus_ids, dtype=object)
        return {qid: ids[hits].tolist() for qid, hits in zip(dataset.query_ids, rows, strict=True)}

    def index(
        self, dataset: BeirDataset, embedded: EmbeddedTexts, rescoring: Rescoring | None = None
    ) -> QuantizedIndex:
        """``dataset``'s documents indexed as ``embedded`` stores them, keeping document
        vectors for ``rescoring`` (at its precision, from its source) when given."""
        corpus = dataset.corpus_texts
        store = quantizer = None
        if rescoring is not None:
            store, quantizer = embedded.rescoring_store(corpus, rescoring)
        return QuantizedIndex(
            embedded.codes_of(corpus),
            embedded.quantizer,
            dim=embedded.dim,
            metric_space=self.metric_space,
            rescore_vectors=store,
            rescore_quantizer=quantizer,
        )

    def _variants(self, embedded: EmbeddedTexts) -> list[Rescoring | None]:
        if embedded.rescoring is not None:  # a model searches one way: its own
            return [embedded.rescoring]
        # Exact float32 search has nothing better to rescore with.
        return [None] if embedded.precision == "float32" else [None, *self.rescoring]

    def _scores(
        self, dataset: BeirDataset, embedded: EmbeddedTexts, variant: Rescoring | None
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """Metric values of one search variant and the ``extra`` that describes it."""
        needs_index = variant is not None or self.latency
        index = self.index(dataset, embedded, variant) if needs_index else None
        multiplier = None if variant is None else variant.multiplier
        rescore_queries = (
            None if variant is None else embedded.rescoring_queries(dataset.query_texts, variant)
        )
        if index is None or variant is None:
            run = self.run(dataset, embedded)
        else:
            _, rows = index.search(
                embedded.vectors_of(dataset.query_texts),
                self.depth(dataset),
                rescore_multiplier=multiplier,
                rescore_queries=rescore_queries,
            )
            run = self._ranked_ids(dataset, rows)
        extra = rescoring_extra(
            rescore=1 if variant is None else variant.multiplier,
            rescore_precision=None if variant is None else variant.precision,
            rescore_source=None if variant is None else variant.source,
            index_bytes_per_vector=embedded.quantizer.bytes_per_vector(embedded.dim),
            rescore_bytes_per_vector=0 if index is None else index.rescore_bytes_per_vector,
        )
        values = evaluate_run(run, dataset.qrels, self.metrics)
        if index is not None and self.latency:
            latency = measure_search_latency(
                index,
                embedded.vectors_of(dataset.query_texts),
                self.k,
                rescore_multiplier=multiplier,
                rescore_queries=rescore_queries,
                repeats=self.latency_repeats,
                threads=self.latency_threads,
            )
            values |= {"latency_p50_ms": latency.p50_ms, "latency_p99_ms": latency.p99_ms}
            extra |= latency.as_extra()
        return values, extra

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        search = self.search_metric(embedded)
        results: list[Score] = []
        for variant in self._variants(embedded):
            per_metric: dict[str, list[Score]] = {}
            variant_extra: dict[str, Any] = {}
            for dataset in self.datasets:
                values, variant_extra = self._scores(dataset, embedded, variant)
                extra = {
                    "search": search,
                    "queries": len(dataset.query_ids),
                    "documents": len(dataset.corpus_ids),
                    **variant_extra,
                }
                for metric, value in values.items():
                    per_metric.setdefault(metric, []).append(
                        Score(dataset.name, metric, value, dict(extra))
                    )
            described = {k: v for k, v in variant_extra.items() if not k.startswith("latency_")}
            for metric, scores in per_metric.items():
                results += [
                    s if s.dataset != "avg" else Score("avg", metric, s.score, dict(described))
                    for s in with_average(scores, metric)
                ]
        return results
