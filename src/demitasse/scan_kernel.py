"""The compiled lookup-table scan behind codebook-code search, when numba is installed.

One pass over the codes, row by row: a document's score is the sum of its code bytes' table
entries, then ``(sum + offset) · scale[level] + bias[level]`` with ``level`` its last byte
(the norm byte; without one, scale 1 and bias 0), kept in a k-entry heap as it goes, the way
faiss's flat PQ scan works. Rows of a multiple of 8 bytes (rq8, rq16, rq32 …) are read eight
code bytes at a time, one 64-bit load split by shifts instead of eight byte loads, and their
lookups summed in pairs: 1.1–1.6× faster than byte by byte at a million documents
(benchmarks/results/codes_speed.md). Without numba, :class:`~demitasse.scan.AsymmetricScan`
takes its numpy path: the same scores, about 2.5 times slower.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    import numba as _numba
except ImportError:  # the numpy path serves
    _numba = None  # type: ignore[assignment]


def _worse(scores: np.ndarray, rows: np.ndarray, a: int, b: int) -> bool:
    """Whether heap entry ``a`` ranks below ``b``: a lower score, or equal and a later row."""
    return bool(scores[a] < scores[b] or (scores[a] == scores[b] and rows[a] > rows[b]))


def _replace_root(
    heap_scores: np.ndarray, heap_rows: np.ndarray, k: int, score: Any, row: int
) -> None:
    """Put ``row`` in the k-entry heap in place of the root (the worst kept: lowest score,
    then the latest row) and sift it down. Called only for a score above the root's, rarely:
    a separate function keeps the scan's loop small."""
    heap_scores[0] = score
    heap_rows[0] = row
    i = 0
    while True:
        left = 2 * i + 1
        if left >= k:
            break
        child = left
        right = left + 1
        if right < k and _worse(heap_scores, heap_rows, right, left):
            child = right
        if _worse(heap_scores, heap_rows, child, i):
            heap_scores[i], heap_scores[child] = heap_scores[child], heap_scores[i]
            heap_rows[i], heap_rows[child] = heap_rows[child], heap_rows[i]
            i = child
        else:
            break


def _top_k_bytes(
    tables: np.ndarray,
    codes: np.ndarray,
    n_words: int,
    offset: float,
    scale: np.ndarray,
    bias: np.ndarray,
    use_level: bool,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best rows and their scores, unordered, reading the codes byte by byte."""
    heap_scores = np.full(k, -np.inf, np.float32)
    heap_rows = np.full(k, -1, np.int64)
    for row in range(codes.shape[0]):
        total = np.float32(0.0)
        for m in range(n_words):
            total += tables[m, codes[row, m]]
        if use_level:
            level = codes[row, n_words]
            score = (total + offset) * scale[level] + bias[level]
        else:
            score = total + offset
        if score > heap_scores[0]:
            _replace_root(heap_scores, heap_rows, k, score, row)
    return heap_scores, heap_rows


def _eight(f: np.ndarray, t: int, x: Any) -> tuple[Any, Any]:
    """Two partial sums of the eight table entries that the bytes of the 64-bit word ``x``
    name, tables m … m + 7 starting at ``t``: constant offsets and shifts compile to plain
    loads, and the pairs do not wait on one another."""
    return (f[t + (x & 255)] + f[t + 256 + ((x >> 8) & 255)]) + (
        f[t + 512 + ((x >> 16) & 255)] + f[t + 768 + ((x >> 24) & 255)]
    ), (f[t + 1024 + ((x >> 32) & 255)] + f[t + 1280 + ((x >> 40) & 255)]) + (
        f[t + 1536 + ((x >> 48) & 255)] + f[t + 1792 + ((x >> 56) & 255)]
    )


def _finish_row(
    f: np.ndarray,
    words: np.ndarray,
    codes: np.ndarray,
    row: int,
    total: Any,
    n_words: int,
    offset: Any,
    scale: np.ndarray,
    bias: np.ndarray,
    use_level: bool,
) -> Any:
    """The score of ``row`` from the sum of its full words: the remaining code bytes of its
    last word added, then the norm byte's scale and bias."""
    full = n_words // 8
    for j in range(n_words - 8 * full):
        total += f[(8 * full + j) * 256 + ((words[row, full] >> (8 * j)) & 255)]
    if not use_level:
        return total + offset
    level = codes[row, n_words]
    return (total + offset) * scale[level] + bias[level]


def _top_k_words(
    flat_tables: np.ndarray,
    codes: np.ndarray,
    words: np.ndarray,
    n_words: int,
    offset: float,
    scale: np.ndarray,
    bias: np.ndarray,
    use_level: bool,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The same as :func:`_top_k_bytes` over rows also viewed as little-endian 64-bit words
    (``words`` [n, row bytes / 8], int64, the memory of ``codes``) and the tables flattened
    (table m at m · 256). Rows go two at a time: two independent sums keep more loads in
    flight."""
    heap_scores = np.full(k, -np.inf, np.float32)
    heap_rows = np.full(k, -1, np.int64)
    f = flat_tables
    full = n_words // 8
    n = words.shape[0]
    for row in range(0, n - 1, 2):
        a1 = a2 = b1 = b2 = np.float32(0.0)
        for w in range(full):
            p, q = _eight(f, w * 2048, words[row, w])
            a1 += p
            a2 += q
            p, q = _eight(f, w * 2048, words[row + 1, w])
            b1 += p
            b2 += q
        score = _finish_row(f, words, codes, row, a1 + a2, n_words, offset, scale, bias, use_level)
        if score > heap_scores[0]:
            _replace_root(heap_scores, heap_rows, k, score, row)
        score = _finish_row(
            f, words, codes, row + 1, b1 + b2, n_words, offset, scale, bias, use_level
        )
        if score > heap_scores[0]:
            _replace_root(heap_scores, heap_rows, k, score, row + 1)
    if n % 2:
        a1 = a2 = np.float32(0.0)
        for w in range(full):
            p, q = _eight(f, w * 2048, words[n - 1, w])
            a1 += p
            a2 += q
        score = _finish_row(
            f, words, codes, n - 1, a1 + a2, n_words, offset, scale, bias, use_level
        )
        if score > heap_scores[0]:
            _replace_root(heap_scores, heap_rows, k, score, n - 1)
    return heap_scores, heap_rows


_compiled_bytes: Any = None
_compiled_words: Any = None
if _numba is not None:
    _worse = _numba.njit(cache=True, inline="always")(_worse)
    _replace_root = _numba.njit(cache=True)(_replace_root)
    _eight = _numba.njit(cache=True, inline="always")(_eight)
    _finish_row = _numba.njit(cache=True, inline="always")(_finish_row)
    _compiled_bytes = _numba.njit(cache=True, nogil=True)(_top_k_bytes)
    _compiled_words = _numba.njit(cache=True, nogil=True)(_top_k_words)


def _top_k(
    tables: np.ndarray,
    codes: np.ndarray,
    n_words: int,
    offset: float,
    scale: np.ndarray,
    bias: np.ndarray,
    use_level: bool,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best rows of ``codes`` [n, row bytes] and their scores, unordered; equal
    scores keep the earlier row."""
    if codes.shape[1] % 8 == 0 and codes.flags.c_contiguous:
        # Tables of fewer than 256 codewords are padded: the word scan strides by 256.
        padded = np.zeros((tables.shape[0], 256), np.float32)
        padded[:, : tables.shape[1]] = tables
        return _compiled_words(
            padded.ravel(), codes, codes.view(np.int64), n_words, offset, scale, bias, use_level, k
        )  # fmt: skip
    return _compiled_bytes(tables, codes, n_words, offset, scale, bias, use_level, k)


#: The compiled scan, or None where numba is not installed.
compiled_top_k: Any = _top_k if _numba is not None else None
