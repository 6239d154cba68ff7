"""Brute-force scans in numpy, beneath :mod:`demitasse.search`: the exact flat index that
stands in for faiss's where faiss is not installed, and :class:`AsymmetricScan`, the search of
codebook codes with the float query.

Both rank the way search does everywhere: best first, equal scores by corpus row, earlier
first, also when a tie straddles the k-th place.
"""

from __future__ import annotations

import numpy as np

from demitasse.compress import CodebookQuantizer
from demitasse.errors import UnknownNameError
from demitasse.scan_kernel import compiled_top_k

#: Entries of a [queries × corpus] block of scores (or of code bytes compared, for Hamming)
#: computed at once by :class:`FlatIndex`: bounds its memory.
_BLOCK_ENTRIES = 1 << 24
# Number of set bits in each byte value: Hamming distance on packed codes is a table lookup.
POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def best_first(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of each row of ``scores``, best first, equal scores by corpus row."""
    order = np.lexsort((rows, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best columns of each row of ``scores`` [m, n] (higher is better) and their
    scores, best first, equal scores by column (the earlier columns kept at the cut)."""
    m, n = scores.shape
    k = min(k, n)
    best = np.empty((m, k), scores.dtype)
    rows = np.empty((m, k), np.int64)
    cuts = np.partition(scores, n - k, axis=1)[:, n - k] if k < n else scores.min(axis=1)
    for i in range(m):
        # Every column at least as good as the k-th best: ties at the cut stay.
        kept = np.flatnonzero(scores[i] >= cuts[i])
        found, chosen = best_first(scores[i, kept][None, :], kept[None, :], k)
        best[i], rows[i] = found[0], chosen[0]
    return best, rows


class FlatIndex:
    """An exact index over every row, searched as faiss's flat indexes are, in numpy: what
    :func:`demitasse.search.build_index` returns where faiss is not installed.

    ``metric`` is ``"ip"`` (inner product, as ``IndexFlatIP``), ``"l2"`` (squared Euclidean
    distance, as ``IndexFlatL2``) or ``"hamming"`` (packed uint8 bits, as
    ``IndexBinaryFlat``). ``search`` answers as faiss does: ``(distances, rows)``, the
    similarities for ``"ip"`` (highest first), the distances otherwise (lowest first: float32
    squared distances, int32 bit counts); equal ones by row.
    """

    def __init__(self, corpus: np.ndarray, metric: str) -> None:
        if metric not in ("ip", "l2", "hamming"):
            raise UnknownNameError(f"unknown flat index metric {metric!r}")
        self.metric = metric
        self.corpus = np.ascontiguousarray(corpus)
        self._squared_norms = (
            np.einsum("ij,ij->i", self.corpus, self.corpus) if metric == "l2" else None
        )

    @property
    def ntotal(self) -> int:
        return int(self.corpus.shape[0])

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries)
        per_query = self.corpus.size if self.metric == "hamming" else self.corpus.shape[0]
        step = max(1, _BLOCK_ENTRIES // max(1, per_query))
        blocks = [
            top_k(self._scores(queries[start : start + step]), k)
            for start in range(0, len(queries), step)
        ]
        scores = np.concatenate([b[0] for b in blocks])
        rows = np.concatenate([b[1] for b in blocks])
        return (scores if self.metric == "ip" else -scores), rows

    def _scores(self, queries: np.ndarray) -> np.ndarray:
        """Higher-is-better scores of a block of queries against every row: the similarity,
        or the distance negated."""
        if self.metric == "hamming":
            differ = POPCOUNT[np.bitwise_xor(queries[:, None, :], self.corpus[None, :, :])]
            return -differ.sum(axis=2, dtype=np.int32)
        products = queries @ self.corpus.T
        if self.metric == "ip":
            return products
        assert self._squared_norms is not None
        query_norms = np.einsum("ij,ij->i", queries, queries)
        distances = query_norms[:, None] + self._squared_norms[None, :] - 2 * products
        return -np.maximum(distances, 0, out=distances)


class AsymmetricScan:
    """Brute-force search of codebook codes with the float query, as faiss's flat PQ index
    does: per query one table of ``⟨query, codeword⟩``, then table lookups per code byte, and
    the quantiser's finish (the norm byte turns the sums into cosines).

    With numba (the ``fast`` extra) one compiled pass keeps a k-entry heap
    (:mod:`demitasse.scan_kernel`). Without it numpy scans: the codes kept column by column,
    pairs of code bytes looked up together in a 65,536-entry table (the sum of their two
    tables), which halves the lookups. Scores equal ``quantizer.score`` up to float32
    summation order.
    """

    def __init__(self, quantizer: CodebookQuantizer, codes: np.ndarray, metric_space: str) -> None:
        self.quantizer = quantizer
        self.metric = "cosine" if metric_space == "cosine" else "l2"
        self.codes = np.ascontiguousarray(codes)
        self._pairs: np.ndarray | None = None
        self._last: np.ndarray | None = None
        if compiled_top_k is None:
            words = np.ascontiguousarray(codes[:, : quantizer.n_codebooks])
            paired = words.shape[1] // 2 * 2
            self._pairs = np.ascontiguousarray(
                np.ascontiguousarray(words[:, :paired]).view("<u2").T
            )
            self._last = np.ascontiguousarray(words[:, paired]) if words.shape[1] % 2 else None

    def _table_scan(self, query: np.ndarray) -> np.ndarray:
        assert self._pairs is not None
        scored, tables = self.quantizer.query_tables(query[None, :], self.metric)
        table = tables[0]
        total = np.zeros(self.codes.shape[0], np.float32)
        for pair, columns in enumerate(self._pairs):
            joint = (table[2 * pair + 1][:, None] + table[2 * pair][None, :]).ravel()
            total += np.take(joint, columns)
        if self._last is not None:
            total += np.take(table[-1], self._last)
        return self.quantizer.finish_scores(scored, total[None, :], self.codes, self.metric)[0]

    def _compiled_search(self, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        assert compiled_top_k is not None
        quantizer = self.quantizer
        all_scores = np.empty((len(queries), depth), np.float32)
        all_rows = np.empty((len(queries), depth), np.int64)
        for i, query in enumerate(queries):
            scored, tables = quantizer.query_tables(query[None, :], self.metric)
            offset, scale, bias = quantizer.finish_terms(scored[0], self.metric)
            scores, rows = compiled_top_k(
                tables[0], self.codes, quantizer.n_codebooks, np.float32(offset), scale, bias,
                quantizer.norm == "byte", depth,
            )  # fmt: skip
            best, kept = best_first(scores[None, :], rows[None, :], depth)
            all_scores[i], all_rows[i] = best[0], kept[0]
        return all_scores, all_rows

    def search(self, queries: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """The top ``depth`` rows per query, best first, equal scores by row."""
        if self._pairs is None:
            return self._compiled_search(queries, depth)
        all_scores = np.empty((len(queries), depth), np.float32)
        all_rows = np.empty((len(queries), depth), np.int64)
        for i, query in enumerate(queries):
            best, kept = top_k(self._table_scan(query)[None, :], depth)
            all_scores[i], all_rows[i] = best[0], kept[0]
        return all_scores, all_rows

    def scores_of(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Scores of the given documents, ``rows`` [q, r] → float32 [q, r]."""
        out = np.empty(rows.shape, np.float32)
        for i, query in enumerate(queries):
            out[i] = self.quantizer.score(query[None, :], self.codes[rows[i]], self.metric)[0]
        return out
