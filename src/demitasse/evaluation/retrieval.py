"""Exact nearest-neighbour retrieval with faiss, and the retrieval task (BEIR nDCG@10 & co).

Search spaces, matching how each precision is stored and compared elsewhere:

- ``"cosine"`` (default): inner product of L2-normalised float32 vectors (``IndexFlatIP``).
  int8 codes are searched as normalised float32 copies, i.e. the cosine of the integer codes,
  which is what ``Int8Quantizer.similarity`` computes.
- ``"l2"``: Euclidean distance of the raw vectors (``IndexFlatL2``), Espresso's RAG setting.
- ``"hamming"``: packed binary codes (``IndexBinaryFlat``); similarity = bits agreeing,
  as in ``BinaryQuantizer.similarity``.

Ties: hits come best first, and equal scores are ordered by corpus row, earlier first. faiss
also keeps the earlier rows when a tie straddles the k-th place, so the top k is the first k
of a stable sort by score (checked against numpy in the tests). Hamming distances are exact
integers, so this holds for every tie of binary codes; cosine scores are rounded float32, so
two documents whose exact cosines tie (say, int8 codes pointing the same way) may differ in
the last bit and then rank by that.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from demitasse.data.beir import BeirDataset
from demitasse.errors import DataError, DemitasseError
from demitasse.evaluation.ranking_metrics import DEFAULT_METRICS, evaluate_run, max_cutoff
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task, with_average

if TYPE_CHECKING:
    import faiss

SEARCH_METRICS: tuple[str, ...] = ("cosine", "l2", "hamming")
METRIC_SPACES: tuple[str, ...] = ("cosine", "l2")


def _faiss() -> ModuleType:
    # faiss is the optional "retrieval" extra; everything else here works without it.
    try:
        import faiss
    except ImportError:
        raise DemitasseError(
            "retrieval search needs faiss: pip install 'demitasse[retrieval]' (faiss-cpu)"
        ) from None
    return faiss


def _check_metric(metric: str) -> None:
    if metric not in SEARCH_METRICS:
        raise DataError(
            f"unknown search metric {metric!r}; choose from {', '.join(SEARCH_METRICS)}"
        )


def _as_float_vectors(array: np.ndarray, metric: str, what: str) -> np.ndarray:
    """float32 C-contiguous rows; L2-normalised for cosine (zero rows stay zero)."""
    if array.dtype.kind not in "fi":
        raise DataError(
            f"{what} must be float or int8 vectors for {metric} search, not {array.dtype}"
        )
    vectors = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(vectors).all():
        raise DataError(f"{what} contain NaN or infinite values")
    if metric == "cosine":
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    return vectors


def _as_packed_bits(array: np.ndarray, what: str) -> np.ndarray:
    if array.dtype != np.uint8:
        raise DataError(f"{what} must be packed binary codes (uint8) for hamming search")
    return np.ascontiguousarray(array)


def _check_pair(queries: np.ndarray, corpus: np.ndarray) -> None:
    for what, array in (("queries", queries), ("corpus", corpus)):
        if not isinstance(array, np.ndarray) or array.ndim != 2 or 0 in array.shape:
            raise DataError(f"{what} must be a non-empty 2-D array")
    if queries.shape[1] != corpus.shape[1]:
        raise DataError(
            f"queries have {queries.shape[1]} columns but the corpus has {corpus.shape[1]}"
        )


def build_index(corpus: np.ndarray, metric: str = "cosine") -> faiss.Index | faiss.IndexBinary:
    """An exact (flat) faiss index over ``corpus`` rows, for ``metric`` (see module docs)."""
    _check_metric(metric)
    faiss = _faiss()
    if metric == "hamming":
        bits = _as_packed_bits(corpus, "corpus")
        index = faiss.IndexBinaryFlat(8 * bits.shape[1])
        index.add(bits)
        return index
    vectors = _as_float_vectors(corpus, metric, "corpus")
    index = (
        faiss.IndexFlatIP(vectors.shape[1])
        if metric == "cosine"
        else faiss.IndexFlatL2(vectors.shape[1])
    )
    index.add(vectors)
    return index


def exact_search(
    queries: np.ndarray,
    corpus: np.ndarray,
    *,
    k: int = 100,
    metric: str = "cosine",
    dim: int | None = None,
    batch_size: int = 4096,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` corpus rows for each query, best first.

    Returns ``(scores, rows)``, both ``[n_queries, min(k, n_corpus)]``; higher scores are
    better: cosine similarity, minus the squared L2 distance, or bits agreeing (out of ``dim``,
    default all ``8 × bytes`` bits; padding bits agree in every pair, so rankings don't depend
    on it). Equal scores are ordered by corpus row.
    """
    _check_pair(queries, corpus)
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise DataError(f"k must be a positive integer, got {k!r}")
    index = build_index(corpus, metric)
    k = min(int(k), corpus.shape[0])
    if metric == "hamming":
        queries = _as_packed_bits(queries, "queries")
        n_bits = 8 * queries.shape[1] if dim is None else int(dim)
    else:
        queries = _as_float_vectors(queries, metric, "queries")
    scores = np.empty((queries.shape[0], k), np.float32)
    rows = np.empty((queries.shape[0], k), np.int64)
    starts = range(0, queries.shape[0], batch_size)
    for start in tqdm(starts, desc=f"{metric} search", disable=len(starts) < 4, leave=False):
        stop = start + batch_size
        distances, found = index.search(queries[start:stop], k)
        if metric == "hamming":
            scores[start:stop] = n_bits - distances
        elif metric == "l2":
            scores[start:stop] = -distances
        else:
            scores[start:stop] = distances
        rows[start:stop] = found
    # faiss's heaps already order ties by row; sorting again makes that a guarantee.
    order = np.lexsort((rows, -scores), axis=1)
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


class RetrievalTask(Task):
    """BEIR-style retrieval: embed queries and documents, exact search, nDCG@10 & co ×100.

    ``metric_space`` is how float32 and int8 vectors are compared (``"cosine"`` or ``"l2"``);
    binary codes are always compared by Hamming distance.
    """

    name = "retrieval"

    def __init__(
        self,
        datasets: BeirDataset | Sequence[BeirDataset],
        *,
        metric_space: str = "cosine",
        metrics: Sequence[str] = DEFAULT_METRICS,
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

    def texts(self) -> list[str]:
        return [t for d in self.datasets for t in (*d.query_texts, *d.corpus_texts)]

    def search_metric(self, precision: str) -> str:
        """The faiss search used for codes of ``precision``."""
        return "hamming" if precision == "binary" else self.metric_space

    def run(self, dataset: BeirDataset, embedded: EmbeddedTexts) -> dict[str, list[str]]:
        """Ranked document ids (top ``k``) for each of ``dataset``'s queries."""
        _, rows = exact_search(
            embedded.codes_of(dataset.query_texts),
            embedded.codes_of(dataset.corpus_texts),
            k=self.k,
            metric=self.search_metric(embedded.precision),
            dim=embedded.dim,
        )
        ids = np.asarray(dataset.corpus_ids, dtype=object)
        return {qid: ids[hits].tolist() for qid, hits in zip(dataset.query_ids, rows, strict=True)}

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        search = self.search_metric(embedded.precision)
        per_metric: dict[str, list[Score]] = {m: [] for m in self.metrics}
        for dataset in self.datasets:
            values = evaluate_run(self.run(dataset, embedded), dataset.qrels, self.metrics)
            extra = {
                "search": search,
                "queries": len(dataset.query_ids),
                "documents": len(dataset.corpus_ids),
            }
            for metric, value in values.items():
                per_metric[metric].append(Score(dataset.name, metric, value, dict(extra)))
        return [s for metric, scores in per_metric.items() for s in with_average(scores, metric)]
