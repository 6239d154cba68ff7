"""Nearest-neighbour search the way vector databases do it, shared by everything that searches.

Exact search (faiss's flat indexes where faiss is installed, the same search in numpy where it
is not: :class:`~demitasse.scan.FlatIndex`), and :class:`QuantizedIndex`: a first stage over
quantised codes held in memory, optionally rescoring the top ``k·F`` candidates against better
document vectors kept aside. The model builds its search index here
(:meth:`CompressedModel.search_index`), and the evaluation's retrieval task, the label-free
estimate and the tuner search through the same code, so a configuration scores exactly as it
answers. Per-query latency is measured by :mod:`demitasse.latency`.

Search spaces, matching how each precision is stored and compared elsewhere:

- ``"cosine"`` (default): inner product of L2-normalised float32 vectors (``IndexFlatIP``).
  :func:`exact_search` given int8 codes searches them as normalised float32 copies (the cosine
  of the integer codes); :class:`QuantizedIndex` scores int8 codes asymmetrically instead.
- ``"l2"``: Euclidean distance of the raw vectors (``IndexFlatL2``), Espresso's RAG setting.
- ``"hamming"``: packed binary codes (``IndexBinaryFlat``); similarity = bits agreeing,
  as in ``BinaryQuantizer.similarity``.
- ``"asymmetric"``: codes whose quantiser scores a float query against them
  (``quantizer.asymmetric``: int8 codes as their bucket centres, product and residual codes
  through lookup tables, :class:`~demitasse.scan.AsymmetricScan`); the query is never coded.
  Used by :class:`QuantizedIndex` only; it scores in ``metric_space``.

Ties: hits come best first, and equal scores are ordered by corpus row, earlier first. When a
tie straddles the k-th place, the numpy index and faiss's L2 and binary indexes keep the earlier
rows, so the top k is the first k of a stable sort by score (checked in the tests); faiss's
``IndexFlatIP`` (1.15) keeps the later ones, so there documents of exactly equal cosine
(duplicates) at the cut differ from the numpy index's. Hamming distances are exact integers, so
the rule holds for every tie of binary codes; cosine scores are rounded float32, so two
documents whose exact cosines tie (say, int8 codes pointing the same way) may differ in the
last bit and then rank by that (and faiss's BLAS and numpy's may round them differently).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from demitasse.compress import CodebookQuantizer, Int8Quantizer, Quantizer
from demitasse.errors import DataError, IncompatibleInputError, UnknownNameError
from demitasse.progress import tracked
from demitasse.scan import POPCOUNT, AsymmetricScan, FlatIndex, best_first

if TYPE_CHECKING:
    import faiss

__all__ = [
    "METRIC_SPACES",
    "RESCORE_POOL_K",
    "RESCORE_PRECISIONS",
    "RESCORE_SOURCES",
    "SEARCH_METRICS",
    "AsymmetricScan",
    "QuantizedIndex",
    "Rescoring",
    "build_index",
    "check_k",
    "check_rescore_multiplier",
    "exact_search",
    "faiss_or_none",
    "rescore_depth",
    "search_metric_of",
]

SEARCH_METRICS: tuple[str, ...] = ("cosine", "l2", "hamming")
METRIC_SPACES: tuple[str, ...] = ("cosine", "l2")


def faiss_or_none() -> ModuleType | None:
    """faiss where it is installed (the ``eval`` extra), else None: search runs in numpy."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def _check_metric(metric: str) -> None:
    if metric not in SEARCH_METRICS:
        raise UnknownNameError(
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
        raise IncompatibleInputError(
            f"queries have {queries.shape[1]} columns but the corpus has {corpus.shape[1]}"
        )


def build_index(
    corpus: np.ndarray, metric: str = "cosine"
) -> faiss.Index | faiss.IndexBinary | FlatIndex:
    """An exact (flat) index over ``corpus`` rows, for ``metric`` (see module docs): faiss's
    where faiss is installed, else :class:`~demitasse.scan.FlatIndex`, which answers alike."""
    _check_metric(metric)
    faiss = faiss_or_none()
    if metric == "hamming":
        bits = _as_packed_bits(corpus, "corpus")
        if faiss is None:
            return FlatIndex(bits, "hamming")
        index = faiss.IndexBinaryFlat(8 * bits.shape[1])
        index.add(bits)
        return index
    vectors = _as_float_vectors(corpus, metric, "corpus")
    if faiss is None:
        return FlatIndex(vectors, "ip" if metric == "cosine" else "l2")
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
    for start in tracked(
        starts, f"{metric} search", unit="batches", enabled=len(starts) >= 4, leave=False
    ):
        stop = start + batch_size
        distances, found = index.search(queries[start:stop], k)
        if metric == "hamming":
            scores[start:stop] = n_bits - distances
        elif metric == "l2":
            scores[start:stop] = -distances
        else:
            scores[start:stop] = distances
        rows[start:stop] = found
    # Equal scores by row: faiss's IndexFlatIP lists them latest first.
    return best_first(scores, rows, k)


# ---- quantised search with rescoring ----------------------------------------------------------

#: Precisions the rescoring store may keep document vectors in.
RESCORE_PRECISIONS: tuple[str, ...] = ("float32", "int8")
#: Floats gathered per rescoring batch (candidates × width × queries): bounds the memory.
_RESCORE_BATCH_FLOATS = 1 << 23


def check_k(k: Any) -> int:
    """``k`` as an int when it is a positive integer, else a one-line DataError."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise DataError(f"k must be a positive integer, got {k!r}")
    return int(k)


#: The rescoring pool is sized for at least this many results, so a search's top results do
#: not depend on ``k`` up to it: a ``k=5`` search returns the first five of the ``k=10`` one
#: (a pool of ``ceil(k·F)`` would rescore fewer candidates for a smaller ``k`` and could let
#: its results move). Tune measures the top 10 (:data:`demitasse.tune.scoring.TOP_K`).
RESCORE_POOL_K = 10


def rescore_depth(k: int, factor: float, n_documents: int) -> int:
    """How many candidates the first stage finds for rescoring a top-``k`` search with factor
    ``factor``: ``ceil(max(k, RESCORE_POOL_K)·F)``, at most every document."""
    return min(n_documents, math.ceil(max(k, RESCORE_POOL_K) * factor))


def check_rescore_multiplier(value: Any) -> float | None:
    """A rescoring factor F as a float (None stays None: no rescoring); F < 1 is refused."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise DataError(f"rescore_multiplier must be a number ≥ 1, got {value!r}")
    if not math.isfinite(value) or value < 1:
        raise DataError(f"rescore_multiplier must be a number ≥ 1, got {value!r}")
    return float(value)


def _check_floats(array: Any, what: str) -> np.ndarray:
    if not isinstance(array, np.ndarray) or array.ndim != 2 or 0 in array.shape:
        raise DataError(f"{what} must be a non-empty 2-D array")
    if array.dtype.kind != "f":
        raise DataError(f"{what} must be float vectors, not {array.dtype}")
    return array


#: Which document vectors a rescoring store keeps: the ones the codes were made from, or the
#: encoder's full output before compression (what :class:`~demitasse.model.CompressedModel`
#: keeps: rescoring with compressed vectors cannot recover what compression lost).
RESCORE_SOURCES: tuple[str, ...] = ("compressed", "encoder")


@dataclass(frozen=True)
class Rescoring:
    """One way to rescore: first-stage candidates ``multiplier`` × k, rescored against
    document vectors kept at ``precision`` (``"float32"``/``"int8"``), taken from ``source``
    (see :data:`RESCORE_SOURCES`)."""

    multiplier: float
    precision: str = "int8"
    source: str = "compressed"

    def __post_init__(self) -> None:
        check_rescore_multiplier(self.multiplier)
        if self.precision not in RESCORE_PRECISIONS:
            raise DataError(
                f"rescoring precision must be one of {', '.join(RESCORE_PRECISIONS)}, "
                f"got {self.precision!r}"
            )
        if self.source not in RESCORE_SOURCES:
            raise DataError(
                f"rescoring vectors must come from one of {', '.join(RESCORE_SOURCES)}, "
                f"got {self.source!r}"
            )


class QuantizedIndex:
    """Documents searched the way vector databases do: a first stage over quantised codes held
    in memory, then, optionally, the top ``k·F`` candidates rescored with the float query
    against better document vectors kept aside (Qdrant's ``oversampling`` + ``rescore``,
    sentence-transformers' ``semantic_search_faiss(rescore_multiplier=F)``).

    Args:
        codes: the documents' codes from ``quantizer.quantize`` (float32, int8, or packed
            bits); they are what the index holds in memory.
        quantizer: the fitted quantiser that made ``codes``; it encodes the queries for the
            first stage. Binary codes are compared by Hamming distance (a faiss binary index),
            float32 and int8 ones by ``metric_space`` (int8: cosine of the codes, as
            :func:`exact_search`).
        dim: the vectors' dimension (binary scores count agreeing bits out of it; default
            ``8 × bytes``, which shifts every score alike).
        metric_space: ``"cosine"`` or ``"l2"``, for float and int8 codes and for rescoring.
        rescore_vectors: document vectors kept for rescoring: float32 [n, e], or int8 codes
            [n, e] made by ``rescore_quantizer`` (a fitted int8 quantiser, which turns them back
            into bucket centres for scoring). Their space may differ from the codes' (say, the
            full model's vectors behind PCA codes): queries for it go in ``rescore_queries``.
    """

    def __init__(
        self,
        codes: np.ndarray,
        quantizer: Quantizer,
        *,
        dim: int | None = None,
        metric_space: str = "cosine",
        rescore_vectors: np.ndarray | None = None,
        rescore_quantizer: Quantizer | None = None,
    ) -> None:
        if metric_space not in METRIC_SPACES:
            raise UnknownNameError(
                f"unknown metric_space {metric_space!r}; choose from {', '.join(METRIC_SPACES)}"
            )
        if not isinstance(codes, np.ndarray) or codes.ndim != 2 or 0 in codes.shape:
            raise DataError("codes must be a non-empty 2-D array from quantizer.quantize()")
        if codes.dtype != quantizer.code_dtype:
            raise IncompatibleInputError(
                f"codes are {codes.dtype}, but {quantizer.precision} codes are "
                f"{quantizer.code_dtype}; pass quantizer.quantize(documents)"
            )
        self.quantizer = quantizer
        self.metric_space = metric_space
        self.search_metric = search_metric_of(quantizer, metric_space)
        self.codes = codes
        self.n_bits = 8 * codes.shape[1] if dim is None else int(dim)
        self._scan: AsymmetricScan | None = None
        if isinstance(quantizer, CodebookQuantizer):
            self._scan = AsymmetricScan(quantizer, codes, metric_space)
        elif isinstance(quantizer, Int8Quantizer):
            # The float query against the codes' bucket centres: an exact float index over
            # them, as faiss (which has no int8 flat index) held the codes as floats before.
            self._index = build_index(quantizer.dequantize(codes), metric_space)
        else:
            self._index = build_index(codes, self.search_metric)
        self.rescore_vectors = rescore_vectors
        self.rescore_quantizer = rescore_quantizer
        self.rescore_precision = self._check_store(rescore_vectors, rescore_quantizer)

    def _check_store(self, vectors: np.ndarray | None, quantizer: Quantizer | None) -> str | None:
        if vectors is None:
            if quantizer is not None:
                raise DataError("rescore_quantizer needs rescore_vectors (its int8 codes)")
            return None
        if not isinstance(vectors, np.ndarray) or vectors.ndim != 2:
            raise DataError("rescore_vectors must be a 2-D array")
        if vectors.shape[0] != self.codes.shape[0]:
            raise IncompatibleInputError(
                f"rescore_vectors have {vectors.shape[0]} rows for {self.codes.shape[0]} documents"
            )
        if vectors.dtype == np.int8:
            if not isinstance(quantizer, Int8Quantizer) or not quantizer.is_fitted:
                raise DataError(
                    "int8 rescore_vectors need the fitted int8 rescore_quantizer that made them"
                )
            return "int8"
        if vectors.dtype != np.float32:
            raise DataError(f"rescore_vectors must be float32 or int8, not {vectors.dtype}")
        if quantizer is not None:
            raise DataError("float32 rescore_vectors take no rescore_quantizer")
        if not np.isfinite(vectors).all():
            raise DataError("rescore_vectors contain NaN or infinite values")
        return "float32"

    @classmethod
    def from_vectors(
        cls,
        vectors: np.ndarray,
        quantizer: Quantizer,
        *,
        rescore: str | None = None,
        rescore_vectors: np.ndarray | None = None,
        rescore_quantizer: Quantizer | None = None,
        metric_space: str = "cosine",
    ) -> QuantizedIndex:
        """Index float32 document ``vectors`` [n, d]: codes from ``quantizer``, and with
        ``rescore="float32"`` or ``"int8"`` a rescoring store of ``rescore_vectors`` (default:
        ``vectors``) at that precision (int8 with the fitted ``rescore_quantizer``)."""
        if rescore is not None and rescore not in RESCORE_PRECISIONS:
            raise DataError(
                f"rescore must be one of {', '.join(RESCORE_PRECISIONS)} or None, got {rescore!r}"
            )
        kept = None
        if rescore is not None:
            kept = np.ascontiguousarray(
                vectors if rescore_vectors is None else rescore_vectors, dtype=np.float32
            )
            if rescore == "int8":
                if rescore_quantizer is None:
                    raise DataError("an int8 rescoring store needs a fitted int8 rescore_quantizer")
                kept = rescore_quantizer.quantize(kept)
        return cls(
            quantizer.quantize(vectors),
            quantizer,
            dim=vectors.shape[1],
            metric_space=metric_space,
            rescore_vectors=kept,
            rescore_quantizer=rescore_quantizer if rescore == "int8" else None,
        )

    # ---- what it costs ------------------------------------------------------------------------

    @property
    def n_documents(self) -> int:
        return int(self.codes.shape[0])

    @property
    def index_bytes_per_vector(self) -> int:
        """Bytes per document held in memory by the first stage (the codes)."""
        return int(self.codes.shape[1] * self.codes.itemsize)

    @property
    def rescore_bytes_per_vector(self) -> int:
        """Bytes per document kept for rescoring (0 without a store)."""
        if self.rescore_vectors is None:
            return 0
        return int(self.rescore_vectors.shape[1] * self.rescore_vectors.itemsize)

    # ---- search -------------------------------------------------------------------------------

    def _query_codes(self, queries: Any) -> np.ndarray:
        if self.search_metric == "asymmetric":  # the query stays float
            return _as_float_vectors(
                _check_floats(queries, "queries"), self.metric_space, "queries"
            )
        codes = self.quantizer.quantize(_check_floats(queries, "queries"))
        if codes.shape[1] != self.codes.shape[1]:
            raise IncompatibleInputError(
                f"queries have {queries.shape[1]} columns, which make codes {codes.shape[1]} "
                f"wide; the documents' are {self.codes.shape[1]}"
            )
        if self.search_metric == "hamming":
            return np.ascontiguousarray(codes)
        return _as_float_vectors(codes, self.search_metric, "queries")

    def first_stage(self, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """The top ``depth`` documents by their codes alone: ``(scores, rows)``, best first."""
        depth = min(check_k(depth), self.n_documents)
        if self._scan is not None:
            return self._scan.search(_check_floats(queries, "queries"), depth)
        distances, rows = self._index.search(self._query_codes(queries), depth)
        if self.search_metric == "hamming":
            scores = (self.n_bits - distances).astype(np.float32)
        else:
            scores = -distances if self.metric_space == "l2" else distances
        # Equal scores by row: faiss's IndexFlatIP lists them latest first.
        return best_first(scores, rows.astype(np.int64), depth)

    def first_stage_scores(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """First-stage scores of the given documents, ``rows`` [m, r] → float32 [m, r]."""
        if self._scan is not None:
            return self._scan.scores_of(_check_floats(queries, "queries"), rows)
        codes = self._query_codes(queries)
        if self.search_metric == "hamming":
            differ = POPCOUNT[np.bitwise_xor(codes[:, None, :], self.codes[rows])].sum(axis=2)
            return (self.n_bits - differ).astype(np.float32)
        kept = self.codes[rows.ravel()]
        if isinstance(self.quantizer, Int8Quantizer):
            kept = self.quantizer.dequantize(kept)
        documents = _as_float_vectors(kept, self.metric_space, "codes")
        return self._similarity(codes, documents.reshape(*rows.shape, -1))

    def rescore_scores(self, rescore_queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Rescoring scores of the given documents: the float query against the kept
        document vectors (int8 ones as their bucket centres), float32 [m, r]."""
        if self.rescore_vectors is None:
            raise DataError("this index keeps no vectors for rescoring")
        width = self.rescore_vectors.shape[1]
        queries = _check_floats(rescore_queries, "rescore_queries")
        if queries.shape[1] != width:
            raise IncompatibleInputError(
                f"rescore_queries have {queries.shape[1]} columns; the kept document vectors "
                f"have {width}"
            )
        if queries.shape[0] != rows.shape[0]:
            raise IncompatibleInputError(
                f"{queries.shape[0]} rescore_queries for {rows.shape[0]} queries"
            )
        if self.metric_space == "cosine":
            queries = _as_float_vectors(queries, "cosine", "rescore_queries")
        scores = np.empty(rows.shape, np.float32)
        step = max(1, _RESCORE_BATCH_FLOATS // max(1, rows.shape[1] * width))
        for start in range(0, rows.shape[0], step):
            block = rows[start : start + step]
            kept = self.rescore_vectors[block.ravel()]
            if self.rescore_precision == "int8":
                assert isinstance(self.rescore_quantizer, Int8Quantizer)
                kept = self.rescore_quantizer.dequantize(kept)
            documents = _as_float_vectors(kept, self.metric_space, "rescore_vectors")
            scores[start : start + step] = self._similarity(
                queries[start : start + step], documents.reshape(*block.shape, width)
            )
        return scores

    def _similarity(self, queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
        """``queries`` [m, e] against ``documents`` [m, r, e], by the metric space."""
        if self.metric_space == "l2":
            return -((documents - queries[:, None, :]) ** 2).sum(axis=2, dtype=np.float32)
        return np.einsum("qre,qe->qr", documents, queries).astype(np.float32)

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        *,
        rescore_multiplier: float | None = None,
        rescore_queries: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` documents for each query: ``(scores, rows)``, best first, equal
        scores by corpus row.

        ``queries`` are float32 vectors in the codes' space (the quantiser encodes them).
        Without ``rescore_multiplier`` (or with 1 and no rescoring store) this is plain
        quantised search. With ``F = rescore_multiplier`` and a store, the first stage returns
        ``ceil(max(k, 10)·F)`` candidates (:func:`rescore_depth`: the top ``k`` do not depend
        on ``k`` up to 10) and the rescoring scores (``rescore_queries``, default ``queries``,
        against the kept vectors) decide their top ``k``.
        """
        k = check_k(k)
        factor = check_rescore_multiplier(rescore_multiplier)
        if factor is not None and self.rescore_vectors is None:
            if factor > 1:
                raise DataError(
                    f"rescore_multiplier {factor:g} needs document vectors kept for rescoring; "
                    "this index has none"
                )
            factor = None
        if factor is None:
            return self.first_stage(queries, k)
        depth = rescore_depth(k, factor, self.n_documents)
        _, candidates = self.first_stage(queries, depth)
        scores = self.rescore_scores(
            queries if rescore_queries is None else rescore_queries, candidates
        )
        return best_first(scores, candidates, min(k, depth))


def search_metric_of(quantizer: Quantizer, metric_space: str = "cosine") -> str:
    """How codes of ``quantizer`` are searched: ``"asymmetric"`` (the float query against the
    codes), ``"hamming"`` (packed bits) or the float ``metric_space``."""
    if quantizer.asymmetric:
        return "asymmetric"
    return "hamming" if quantizer.code_dtype == np.uint8 else metric_space
