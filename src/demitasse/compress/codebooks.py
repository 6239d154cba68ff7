# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Codebook codes: a document is a few bytes, each the index of a learned codeword, and a float
query is scored against them through lookup tables (asymmetric distance computation, ADC).

Two families, each named by its bytes per document:

- ``pq<B>`` (:class:`ProductQuantizer`): the centred, rotated vector is cut into ``B`` slices,
  each coded by one of 256 codewords learned by k-means on that slice (Jégou et al., TPAMI
  2011). The rotation balances the slices: ``"pca"`` spreads the principal components over the
  slices so each gets a similar share of the variance (OPQ's parametric solution, Ge et al.,
  CVPR 2013), ``"opq"`` then refines it by alternating codewords and an orthogonal Procrustes
  rotation (OPQ's non-parametric solution).
- ``rq<B>`` (:class:`ResidualQuantizer`): ``B`` full-width codebooks, each coding what the ones
  before left (residual quantisation; Chen et al., Sensors 2010), encoded with a beam search and
  with codebooks refined jointly afterwards (block coordinate descent on the reconstruction
  error, as in additive quantisation). At small budgets it keeps more than product codes,
  whose slices are too wide for 256 codewords.

Either way a document is rebuilt as ``mean + Σ_m codeword_m`` (in the rotated space for product
codes), so a query ``q`` scores ``Σ_m ⟨q', codeword_m⟩`` with ``q'`` the rotated query: one
``[B, 256]`` table per query, then ``B`` lookups and adds per document. The query's part
``⟨q, mean⟩`` is the same for every document and is left out, so scores rank, they are not
cosines. Documents are not re-normalised: what the codes keep of a unit vector's length is the
estimate's own error, measured in ``benchmarks/codes.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from demitasse.arrays import as_matrix, cosine_rows, is_int
from demitasse.compress._estimator import not_fitted_error
from demitasse.compress.binary import random_rotation
from demitasse.compress.quantize import Quantizer, register_quantizer, scored_queries
from demitasse.errors import CompressorError, IncompatibleInputError, ParameterError

#: Codewords per codebook: one byte per code.
CODEWORDS = 256
#: Rows of the squared-distance block computed at once while encoding or clustering.
_BLOCK_ROWS = 4096


def _nearest(X: np.ndarray, C: np.ndarray, C_sq: np.ndarray) -> np.ndarray:
    """Index of the nearest row of ``C`` for each row of ``X`` (squared Euclidean)."""
    out = np.empty(X.shape[0], np.int64)
    for start in range(0, X.shape[0], _BLOCK_ROWS):
        block = X[start : start + _BLOCK_ROWS]
        out[start : start + _BLOCK_ROWS] = np.argmin(C_sq - 2.0 * (block @ C.T), axis=1)
    return out


def _group_means(X: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-label sums divided by counts (rows of empty labels are 0) and the counts."""
    counts = np.bincount(labels, minlength=k)
    sums = np.zeros((k, X.shape[1]), np.float64)
    np.add.at(sums, labels, X)
    means = sums / np.maximum(counts, 1)[:, None]
    return means.astype(np.float32), counts


def kmeans(X: np.ndarray, k: int, iterations: int, rng: np.random.Generator) -> np.ndarray:
    """Lloyd's k-means from ``k`` distinct random rows; an emptied centroid is re-seeded by
    splitting the largest cluster (as faiss does). Returns float32 [k, d]."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    centroids = X[rng.choice(X.shape[0], size=k, replace=False)].copy()
    for _ in range(iterations):
        labels = _nearest(X, centroids, (centroids**2).sum(axis=1))
        means, counts = _group_means(X, labels, k)
        for empty in np.flatnonzero(counts == 0):
            largest = int(np.argmax(counts))
            jitter = np.asarray(1e-3 * rng.standard_normal(X.shape[1]) + 1e-9, np.float32)
            means[empty] = means[largest] + jitter
            means[largest] -= jitter
            counts[empty] = counts[largest] // 2
            counts[largest] -= counts[empty]
        centroids = means
    return centroids


def _balanced_slices(variances: np.ndarray, n_slices: int) -> list[np.ndarray]:
    """Deal components (largest variance first) to ``n_slices`` equal-sized slices, each to
    the open slice with the smallest product of variances so far (OPQ's eigenvalue
    allocation): the slices carry similar shares of the information."""
    d = len(variances)
    sizes = [len(part) for part in np.array_split(np.arange(d), n_slices)]
    slices: list[list[int]] = [[] for _ in range(n_slices)]
    log_product = np.zeros(n_slices)
    for component in np.argsort(-variances, kind="stable"):
        open_slices = [m for m in range(n_slices) if len(slices[m]) < sizes[m]]
        chosen = min(open_slices, key=lambda m: (log_product[m], m))
        slices[chosen].append(int(component))
        log_product[chosen] += np.log(max(float(variances[component]), 1e-12))
    return [np.array(sorted(part), dtype=np.int64) for part in slices]


class CodebookQuantizer(Quantizer):
    """Shared by the codebook families: bytes per document, the norm byte, lookup-table
    scoring, decoding, and paired similarity of decoded vectors (for STS).

    Subclasses learn ``n_codebooks`` codebooks in ``_fit_codebooks`` and implement
    ``_encode`` (centred vectors → codes), ``_rebuild`` (codes → centred vectors) and
    ``_tables`` (queries → ``⟨query, codeword⟩`` tables).
    """

    code_dtype: ClassVar[np.dtype] = np.dtype(np.uint8)
    size_param: ClassVar[str | None] = "code_bytes"
    size_unit: ClassVar[str] = "bytes"
    asymmetric: ClassVar[bool] = True
    #: Codewords per codebook (256, or fewer when calibrated on fewer rows) and the range of
    #: the log-norms the norm byte spans.
    scalar_state: ClassVar[tuple[str, ...]] = ("n_codewords_", "log_norm_low_", "log_norm_high_")
    NORMS: ClassVar[tuple[str, ...]] = ("byte", "none")

    code_bytes: int
    norm: str
    iterations: int
    max_train_rows: int
    seed: int

    @property
    def n_codebooks(self) -> int:
        """Bytes that index codewords: all of them, or all but the norm byte."""
        return int(self.code_bytes) - (1 if self.norm == "byte" else 0)

    def _validate_common(self) -> None:
        name = self.family
        for param, low in (("code_bytes", 1), ("iterations", 1), ("max_train_rows", 2)):
            value = getattr(self, param)
            if not is_int(value) or value < low:
                raise ParameterError(f"{name}: {param} must be an integer ≥ {low}, got {value!r}")
        if not is_int(self.seed) or self.seed < 0:
            raise ParameterError(f"{name}: seed must be a non-negative integer, got {self.seed!r}")
        if self.norm not in self.NORMS:
            raise ParameterError(
                f"{name}: norm must be one of {', '.join(self.NORMS)}, got {self.norm!r}"
            )
        if self.n_codebooks < 1:
            raise ParameterError(
                f"{self.precision}: the norm byte leaves no byte for codewords; use at least "
                f"{self.family}2, or norm='none'"
            )

    def _training_rows(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if X.shape[0] > self.max_train_rows:
            X = X[np.sort(rng.choice(X.shape[0], self.max_train_rows, replace=False))]
        return np.asarray(X, dtype=np.float32)

    def _fit(self, X: np.ndarray) -> None:
        rng = np.random.default_rng(self.seed)
        train = self._training_rows(X, rng)
        self.mean_ = train.mean(axis=0, dtype=np.float64).astype(np.float32)
        self.n_codewords_ = min(CODEWORDS, train.shape[0])
        centred = train - self.mean_
        self._fit_codebooks(centred, rng)
        log_norms = np.log(self._norms(self._encode(centred)))
        low, high = float(log_norms.min()), float(log_norms.max())
        self.log_norm_low_, self.log_norm_high_ = low, max(high, low + 1e-6)

    def _fit_codebooks(self, centred: np.ndarray, rng: np.random.Generator) -> None:
        raise NotImplementedError

    def _encode(self, centred: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _rebuild(self, codes: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _tables(self, queries: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _norms(self, codes: np.ndarray) -> np.ndarray:
        """Lengths of the decoded vectors (mean included), float64, at least 1e-12."""
        return np.maximum(np.linalg.norm(self._rebuild(codes) + self.mean_, axis=1), 1e-12)

    def _norm_levels(self, norms: np.ndarray) -> np.ndarray:
        span = self.log_norm_high_ - self.log_norm_low_
        levels = np.rint((np.log(norms) - self.log_norm_low_) / span * 255.0)
        return np.clip(levels, 0, 255).astype(np.uint8)

    def _level_norms(self, levels: np.ndarray) -> np.ndarray:
        span = self.log_norm_high_ - self.log_norm_low_
        return np.exp(self.log_norm_low_ + levels.astype(np.float64) / 255.0 * span)

    def _check_width(self, d: int) -> None:
        if self.is_fitted and d != self.n_features_in_:
            raise IncompatibleInputError(
                f"{self.precision} codes are learned on all {self.n_features_in_} dims they were "
                f"fitted on, so they take exactly that many, not {d}"
            )

    def code_width(self, dim: int) -> int:
        return int(self.code_bytes)

    def bytes_per_vector(self, dim: int) -> int:
        self._check_dim(dim)
        return int(self.code_bytes)

    def _quantize_chunk(self, X: np.ndarray) -> np.ndarray:
        words = self._encode(X - self.mean_)
        if self.norm != "byte":
            return words
        levels = self._norm_levels(self._norms(words))
        return np.concatenate([words, levels[:, None]], axis=1)

    # ---- scoring -----------------------------------------------------------------------------

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise not_fitted_error(f"this {self.precision} quantizer is not fitted; call fit()")

    def _checked_queries(self, queries: Any) -> np.ndarray:
        self._require_fitted()
        Q = as_matrix(queries, "queries")
        if Q.shape[1] != self.n_features_in_:
            raise IncompatibleInputError(
                f"queries have {Q.shape[1]} dims; these {self.precision} codes were fitted on "
                f"{self.n_features_in_}"
            )
        if not np.isfinite(Q).all():
            raise CompressorError("queries contain NaN or infinite values")
        return np.asarray(Q, dtype=np.float32)

    def _checked_codes(self, codes: Any) -> np.ndarray:
        self._require_fitted()
        if (
            not isinstance(codes, np.ndarray)
            or codes.ndim != 2
            or codes.dtype != np.uint8
            or codes.shape[1] != self.code_bytes
        ):
            raise IncompatibleInputError(
                f"{self.precision} codes must be a uint8 array [n, {self.code_bytes}] from "
                "quantize()"
            )
        words = codes[:, : self.n_codebooks]
        if self.n_codewords_ < CODEWORDS and words.size and int(words.max()) >= self.n_codewords_:
            raise IncompatibleInputError(
                f"{self.precision} codes name codeword {int(words.max())}, but only "
                f"{self.n_codewords_} were learned"
            )
        return codes

    def lookup_tables(self, queries: Any) -> np.ndarray:
        """``⟨query, codeword⟩`` for every codebook and codeword: float32 [q, B', 256]
        (``B'`` = :attr:`n_codebooks`)."""
        return self._padded_tables(self._checked_queries(queries))

    def _padded_tables(self, queries: np.ndarray) -> np.ndarray:
        """:meth:`_tables` with 256 columns whatever the codewords learned (fewer after few
        calibration rows): scans index a table by a byte, or a pair of bytes as low + 256 ·
        high, so every table has one column per byte value (unused ones 0)."""
        tables = self._tables(queries)
        if tables.shape[2] == CODEWORDS:
            return tables
        padded = np.zeros((*tables.shape[:2], CODEWORDS), np.float32)
        padded[:, :, : tables.shape[2]] = tables
        return padded

    def score(self, queries: Any, codes: Any, metric: str = "cosine") -> np.ndarray:
        """Asymmetric scores of float ``queries`` [q, d] against document ``codes`` [n, B]:
        float32 [q, n], higher is closer.

        ``"cosine"``: the cosine of the query and the decoded document (with the norm byte;
        without it, ``⟨q, decoded⟩`` less the part all documents share, which ranks as the
        cosine only where decoded norms are equal). ``"dot"``: ``⟨q, decoded⟩``. ``"l2"``:
        minus the squared distance (needs the norm byte).
        """
        codes = self._checked_codes(codes)
        Q, tables = self.query_tables(queries, metric)
        sums = np.zeros((Q.shape[0], codes.shape[0]), np.float32)
        for m in range(self.n_codebooks):
            sums += tables[:, m, :][:, codes[:, m]]
        return self.finish_scores(Q, sums, codes, metric)

    def query_tables(self, queries: Any, metric: str = "cosine") -> tuple[np.ndarray, np.ndarray]:
        """The queries as ``metric`` scores them (unit length for cosine) and their lookup
        tables [q, B', 256]: the first half of :meth:`score`, for scans of their own."""
        Q = scored_queries(self._checked_queries(queries), metric)
        if metric == "l2" and self.norm != "byte":
            raise ParameterError(f"{self.precision} codes without the norm byte cannot score l2")
        return Q, self._padded_tables(Q)

    def finish_scores(
        self, queries: np.ndarray, sums: np.ndarray, codes: np.ndarray, metric: str
    ) -> np.ndarray:
        """Scores from the table sums [q, n] of :meth:`query_tables`' queries: the mean's part
        added, and with the norm byte, scaled to cosines or turned into distances."""
        scores = np.empty(sums.shape, np.float32)
        levels = codes[:, -1]
        for i, query in enumerate(queries):
            offset, scale, bias = self.finish_terms(query, metric)
            if self.norm == "byte":
                scores[i] = (sums[i] + offset) * scale[levels] + bias[levels]
            else:
                scores[i] = sums[i] + offset
        return scores

    def finish_terms(self, query: np.ndarray, metric: str) -> tuple[float, np.ndarray, np.ndarray]:
        """How one scored query's table sum becomes its score: ``(sum + offset) · scale[level]
        + bias[level]`` with ``level`` a document's norm byte (without the norm byte, scale 1
        and bias 0 for every level). float32 tables of 256 levels."""
        offset = float(np.float32(query @ self.mean_))
        scale = np.ones(CODEWORDS, np.float32)
        bias = np.zeros(CODEWORDS, np.float32)
        if self.norm != "byte":
            return (offset if metric == "dot" else 0.0), scale, bias
        norms = self._level_norms(np.arange(CODEWORDS)).astype(np.float32)
        if metric == "cosine":
            scale = (1.0 / norms).astype(np.float32)
        elif metric == "l2":
            scale[:] = 2.0
            bias = (-(norms**2) - np.float32(query @ query)).astype(np.float32)
        return offset, scale, bias

    def decode(self, codes: Any) -> np.ndarray:
        """The vectors the codes stand for: float32 [n, d] (the mean added back; with the norm
        byte, scaled to the stored length, which differs from the rebuilt one by at most the
        byte's rounding)."""
        codes = self._checked_codes(codes)
        vectors = self._rebuild(codes[:, : self.n_codebooks]) + self.mean_
        if self.norm == "byte":
            rebuilt = np.maximum(np.linalg.norm(vectors, axis=1), 1e-12)
            vectors *= (self._level_norms(codes[:, -1]) / rebuilt).astype(np.float32)[:, None]
        return vectors

    def _similarity_chunk(self, A: np.ndarray, B: np.ndarray, n_bits: int) -> np.ndarray:
        return cosine_rows(self.decode(A), self.decode(B))


@register_quantizer
class ProductQuantizer(CodebookQuantizer):
    """Product codes with lookup-table scoring: precision ``pq<B>``, ``B`` bytes a document.

    Args:
        code_bytes: bytes per document: one per slice of the rotated vector (a codeword of
            256), plus the norm byte.
        rotation: ``"opq"`` (variance-balanced slices refined by alternating codewords and
            rotation), ``"pca"`` (variance-balanced slices), ``"random"`` or ``"none"``.
        norm: ``"byte"`` spends one byte on the decoded vector's length, so scores are cosines
            of the decoded documents; ``"none"`` spends every byte on codewords.
        opq_iterations: alternations for ``"opq"``.
        iterations: k-means iterations per codebook.
        max_train_rows: calibration rows used (a seeded sample beyond that).
        seed: the random draws (samples, initial codewords, a random rotation).
    """

    family: ClassVar[str] = "pq"
    ROTATIONS: ClassVar[tuple[str, ...]] = ("opq", "pca", "random", "none")

    def __init__(
        self,
        code_bytes: int = 16,
        rotation: str = "opq",
        norm: str = "byte",
        opq_iterations: int = 10,
        iterations: int = 20,
        max_train_rows: int = 100_000,
        seed: int = 0,
    ) -> None:
        self.code_bytes = code_bytes
        self.rotation = rotation
        self.norm = norm
        self.opq_iterations = opq_iterations
        self.iterations = iterations
        self.max_train_rows = max_train_rows
        self.seed = seed

    def _validate_params(self) -> None:
        self._validate_common()
        if self.rotation not in self.ROTATIONS:
            raise ParameterError(
                f"pq: rotation must be one of {', '.join(self.ROTATIONS)}, got {self.rotation!r}"
            )
        if not is_int(self.opq_iterations) or self.opq_iterations < 1:
            raise ParameterError(
                f"pq: opq_iterations must be a positive integer, got {self.opq_iterations!r}"
            )

    def _fit_codebooks(self, centred: np.ndarray, rng: np.random.Generator) -> None:
        d = centred.shape[1]
        if self.n_codebooks > d:
            raise IncompatibleInputError(
                f"{self.precision} needs at least {self.n_codebooks} dims, got {d}"
            )
        if self.rotation in ("pca", "opq"):
            variances, vectors = np.linalg.eigh(np.cov(centred, rowvar=False))
            order = np.concatenate(_balanced_slices(variances, self.n_codebooks))
            rotation = vectors[:, order]
        elif self.rotation == "random":
            rotation = random_rotation(d, self.seed)
        else:
            rotation = np.eye(d)
        self.rotation_ = rotation.astype(np.float32)
        self._set_slices(d)
        self.codebooks_ = self._learn_codewords(centred @ self.rotation_, rng)
        if self.rotation == "opq":
            for _ in range(self.opq_iterations):
                rebuilt = self._rebuild(self._encode(centred))
                # Procrustes: the rotation that best maps the data onto its reconstruction.
                u, _, wt = np.linalg.svd(
                    (centred.T @ (rebuilt @ self.rotation_)).astype(np.float64)
                )
                self.rotation_ = (u @ wt).astype(np.float32)
                self.codebooks_ = self._learn_codewords(centred @ self.rotation_, rng)

    def _set_slices(self, d: int) -> None:
        self._slices = np.array_split(np.arange(d), self.n_codebooks)

    def _learn_codewords(self, Y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        codebooks = np.zeros((self.n_codewords_, Y.shape[1]), np.float32)
        for cols in self._slices:
            codebooks[:, cols] = kmeans(Y[:, cols], self.n_codewords_, self.iterations, rng)
        return codebooks

    def _encode(self, centred: np.ndarray) -> np.ndarray:
        Y = centred @ self.rotation_
        codes = np.empty((Y.shape[0], self.n_codebooks), np.uint8)
        for m, cols in enumerate(self._slices):
            C = self.codebooks_[:, cols]
            codes[:, m] = _nearest(Y[:, cols], C, (C**2).sum(axis=1))
        return codes

    def _rebuild(self, codes: np.ndarray) -> np.ndarray:
        Y = np.empty((codes.shape[0], self.codebooks_.shape[1]), np.float32)
        for m, cols in enumerate(self._slices):
            Y[:, cols] = self.codebooks_[codes[:, m].astype(np.int64)][:, cols]
        return Y @ self.rotation_.T

    def _tables(self, queries: np.ndarray) -> np.ndarray:
        Q = queries @ self.rotation_
        tables = np.empty((Q.shape[0], self.n_codebooks, self.n_codewords_), np.float32)
        for m, cols in enumerate(self._slices):
            tables[:, m, :] = Q[:, cols] @ self.codebooks_[:, cols].T
        return tables

    def _state(self) -> dict[str, np.ndarray]:
        return {"mean_": self.mean_, "rotation_": self.rotation_, "codebooks_": self.codebooks_}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.n_features_in_
        return {"mean_": (d,), "rotation_": (d, d), "codebooks_": (self.n_codewords_, d)}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.mean_ = arrays["mean_"].astype(np.float32)
        self.rotation_ = arrays["rotation_"].astype(np.float32)
        self.codebooks_ = arrays["codebooks_"].astype(np.float32)
        self._set_slices(len(self.mean_))


@register_quantizer
class ResidualQuantizer(CodebookQuantizer):
    """Residual (additive) codes with lookup-table scoring: precision ``rq<B>``, ``B`` bytes.

    Args:
        code_bytes: bytes per document: one per full-width codebook (a codeword of 256), plus
            the norm byte.
        norm: ``"byte"`` spends one byte on the decoded vector's length, so scores are cosines
            of the decoded documents; ``"none"`` spends every byte on codewords.
        beam: partial codes kept per vector while encoding (1 = greedy; wider is better and
            slower, linearly).
        refine_iterations: rounds of re-encoding and re-fitting every codebook to what the
            others leave (each lowers the reconstruction error on the calibration rows).
        iterations: k-means iterations per codebook.
        max_train_rows: calibration rows used (a seeded sample beyond that).
        seed: the random draws.
    """

    family: ClassVar[str] = "rq"

    def __init__(
        self,
        code_bytes: int = 16,
        norm: str = "byte",
        beam: int = 4,
        refine_iterations: int = 3,
        iterations: int = 20,
        max_train_rows: int = 100_000,
        seed: int = 0,
    ) -> None:
        self.code_bytes = code_bytes
        self.norm = norm
        self.beam = beam
        self.refine_iterations = refine_iterations
        self.iterations = iterations
        self.max_train_rows = max_train_rows
        self.seed = seed

    def _validate_params(self) -> None:
        self._validate_common()
        if not is_int(self.beam) or not 1 <= self.beam <= CODEWORDS:
            raise ParameterError(f"rq: beam must be an integer in 1..256, got {self.beam!r}")
        if not is_int(self.refine_iterations) or self.refine_iterations < 0:
            raise ParameterError(
                f"rq: refine_iterations must be a non-negative integer, got "
                f"{self.refine_iterations!r}"
            )

    def _fit_codebooks(self, centred: np.ndarray, rng: np.random.Generator) -> None:
        k = self.n_codewords_
        self.codebooks_ = np.zeros((self.n_codebooks, k, centred.shape[1]), np.float32)
        residual = centred.copy()
        for m in range(self.n_codebooks):
            # Greedy stage by stage (the beam search would re-encode every earlier stage); the
            # refinement below re-encodes with the beam.
            C = self.codebooks_[m] = kmeans(residual, k, self.iterations, rng)
            residual -= C[_nearest(residual, C, (C**2).sum(axis=1))]
        for _ in range(self.refine_iterations):
            codes = self._encode(centred)
            rebuilt = self._rebuild(codes)
            for m in range(self.n_codebooks):
                words = codes[:, m].astype(np.int64)
                others = rebuilt - self.codebooks_[m][words]
                means, counts = _group_means(centred - others, words, k)
                used = counts > 0
                self.codebooks_[m][used] = means[used]
                rebuilt = others + self.codebooks_[m][words]

    def _rebuild(self, codes: np.ndarray) -> np.ndarray:
        total = np.zeros((codes.shape[0], self.codebooks_.shape[2]), np.float32)
        for m in range(self.n_codebooks):
            total += self.codebooks_[m][codes[:, m].astype(np.int64)]
        return total

    def _encode(self, centred: np.ndarray) -> np.ndarray:
        """Beam search: keep the ``beam`` partial codes with the smallest residuals."""
        codes = np.empty((centred.shape[0], self.n_codebooks), np.uint8)
        for start in range(0, centred.shape[0], _BLOCK_ROWS // 4):
            block = centred[start : start + _BLOCK_ROWS // 4]
            codes[start : start + block.shape[0]] = self._encode_block(block)
        return codes

    def _encode_block(self, Y: np.ndarray) -> np.ndarray:
        n = Y.shape[0]
        residuals = Y[:, None, :]  # [n, beam, d]
        errors = np.zeros((n, 1), np.float32)  # squared residual norms minus ‖Y‖², [n, beam]
        paths = np.zeros((n, 1, 0), np.uint8)
        rows = np.arange(n)[:, None]
        for m in range(self.n_codebooks):
            C = self.codebooks_[m]
            # ‖r − c‖² = ‖r‖² − 2⟨r, c⟩ + ‖c‖², for every beam entry and codeword.
            candidates = (
                errors[:, :, None] - 2.0 * (residuals @ C.T) + (C**2).sum(axis=1)[None, None, :]
            ).reshape(n, -1)
            width = min(self.beam, candidates.shape[1])
            best = np.argpartition(candidates, width - 1, axis=1)[:, :width]
            best = np.take_along_axis(
                best, np.argsort(np.take_along_axis(candidates, best, axis=1), axis=1), axis=1
            )
            parent, word = np.divmod(best, C.shape[0])
            errors = np.take_along_axis(candidates, best, axis=1)
            residuals = residuals[rows, parent] - C[word]
            paths = np.concatenate([paths[rows, parent], word[:, :, None].astype(np.uint8)], axis=2)
        return paths[:, 0, :]

    def _tables(self, queries: np.ndarray) -> np.ndarray:
        flat = self.codebooks_.reshape(-1, self.codebooks_.shape[2])
        return (queries @ flat.T).reshape(len(queries), *self.codebooks_.shape[:2])

    def _state(self) -> dict[str, np.ndarray]:
        return {"mean_": self.mean_, "codebooks_": self.codebooks_}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.n_features_in_
        return {"mean_": (d,), "codebooks_": (self.n_codebooks, self.n_codewords_, d)}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        self.mean_ = arrays["mean_"].astype(np.float32)
        self.codebooks_ = arrays["codebooks_"].astype(np.float32)
