# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Quantisers: store (compressed) embeddings in fewer bits, and score pairs as an index would.

Every precision goes through the same code path: ``fit`` on calibration embeddings,
``quantize`` to codes, ``similarity`` on codes. Quantisers compose after any compressor and are
fitted on its full-width output; because compressors are Matryoshka (outputs are prefixes),
``quantize`` also accepts fewer columns than fitted and then uses the first ones' parameters.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from demitasse.arrays import (
    DEFAULT_CHUNK_ROWS,
    as_matrix,
    check_chunk_rows,
    check_finite,
    check_finite_chunk,
    check_out,
    cosine_rows,
    is_int,
    iter_row_chunks,
    unit_rows,
)
from demitasse.compress._estimator import not_fitted_error
from demitasse.compress.params import Params
from demitasse.errors import (
    CompressorError,
    IncompatibleInputError,
    ParameterError,
    SavedStateError,
    UnknownCompressionNameError,
    UnknownNameError,
)
from demitasse.persistence import (
    check_state_shapes,
    check_version,
    demitasse_version,
    read_saved,
    require,
    write_saved,
)
from demitasse.registry import Registry

_REGISTRY: Registry[type[Quantizer]] = Registry("precision", "family")
register_quantizer = _REGISTRY.register
quantizer_names = _REGISTRY.names

#: How an asymmetric score compares a float query with a decoded document.
SCORE_METRICS: tuple[str, ...] = ("cosine", "dot", "l2")


def scored_queries(queries: np.ndarray, metric: str) -> np.ndarray:
    """float32 ``queries`` as an asymmetric ``metric`` scores them: unit rows for cosine (a
    zero row stays zero), as given otherwise; a one-line error for an unknown metric."""
    if metric not in SCORE_METRICS:
        raise ParameterError(f"metric must be one of {', '.join(SCORE_METRICS)}, got {metric!r}")
    queries = np.asarray(queries, dtype=np.float32)
    return unit_rows(queries) if metric == "cosine" else queries


# A sized code's precision is its family and its size: "pq16" is 16-byte product codes.
_SIZED_PRECISION = re.compile(r"([a-z]+)([0-9]+)")


def resolve_precision(precision: Any) -> tuple[type[Quantizer], dict[str, int]]:
    """The quantiser class a precision name denotes, and the size its name sets: ``"int8"``
    → (Int8Quantizer, {}), ``"pq16"`` → (ProductQuantizer, {"code_bytes": 16})."""
    if not isinstance(precision, str):
        raise UnknownCompressionNameError(
            f"a precision is a name such as 'int8', not {precision!r}"
        )
    if precision in _REGISTRY.names():
        cls = _REGISTRY.lookup(precision)
        if cls.size_param is None:
            return cls, {}
    sized = _SIZED_PRECISION.fullmatch(precision)
    # A size beyond 9 digits is no code anyone means (and int() refuses thousands of them).
    if sized is not None and sized.group(1) in _REGISTRY.names() and len(sized.group(2)) < 10:
        cls = _REGISTRY.lookup(sized.group(1))
        if cls.size_param is not None:
            return cls, {cls.size_param: int(sized.group(2))}
    shown = precision if len(precision) <= 40 else precision[:40] + "…"
    raise UnknownCompressionNameError(f"unknown precision {shown!r}; known: {precision_help()}")


def precision_help() -> str:
    """The precisions, as a user types them: ``float32, int8, binary, pq<bytes>, …``."""
    names = []
    for family in _REGISTRY.names():
        cls = _REGISTRY.lookup(family)
        names.append(family if cls.size_param is None else f"{family}<{cls.size_unit}>")
    return ", ".join(names)


def is_precision(precision: Any) -> bool:
    """Whether ``precision`` names a quantiser (without checking its size's range)."""
    try:
        resolve_precision(precision)
    except UnknownNameError:
        return False
    return True


def make_quantizer(precision: str, **params: Any) -> Quantizer:
    """Build an unfitted quantizer: ``"float32"``, ``"int8"``, ``"binary"``, or a sized code
    such as ``"pq16"`` (see :func:`precision_help`)."""
    cls, size = resolve_precision(precision)
    clash = sorted(set(size) & set(params))
    if clash:
        raise ParameterError(
            f"precision {precision!r} sets {clash[0]} already; do not pass it as a parameter"
        )
    return cls._construct(size | params)


def load_quantizer(path: str | Path) -> Quantizer:
    """Load any saved quantizer, dispatching on config.json's ``precision``."""
    return Quantizer.load(path)


class Quantizer(Params):
    """Base class: codes of dtype ``code_dtype``, paired similarity on codes.

    ``family`` is the registry name. A plain family is its own precision (``"int8"``); a
    sized family (``size_param`` set, e.g. product codes) is named with its size
    (``"pq16"``), given by the parameter ``size_param``.
    """

    family: ClassVar[str]
    #: The parameter a sized family's precision name carries, and its unit for messages.
    size_param: ClassVar[str | None] = None
    size_unit: ClassVar[str] = ""
    #: Whether a search scores the float query against the documents' codes (asymmetric, as
    #: PQ's ADC) instead of coding the query too. Such quantisers implement ``score``.
    asymmetric: ClassVar[bool] = False
    version: ClassVar[int] = 1
    code_dtype: ClassVar[np.dtype] = np.dtype(np.float32)
    #: Names of JSON-scalar learned attributes saved in config.json under "learned".
    scalar_state: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        pass

    @property
    def precision(self) -> str:
        """The name this quantiser's codes go by: its family, with its size if it has one."""
        if self.size_param is None:
            return self.family
        return f"{self.family}{getattr(self, self.size_param)}"

    # ---- hooks -------------------------------------------------------------------------------

    @property
    def needs_fit(self) -> bool:
        """Whether ``quantize`` needs learned parameters (else ``fit`` is optional)."""
        return True

    def _fit(self, X: np.ndarray) -> None:
        """Learn per-dimension parameters from validated calibration embeddings."""

    def _quantize_chunk(self, X: np.ndarray) -> np.ndarray:
        """Map a finite float32 chunk [m, d] (d ≤ n_features_in_) to codes."""
        raise NotImplementedError

    def _check_width(self, d: int) -> None:
        """Refuse ``d`` input columns where fewer than the fitted width make no sense."""

    def _similarity_chunk(self, A: np.ndarray, B: np.ndarray, n_bits: int) -> np.ndarray:
        """Row-wise similarity of two code chunks, float64 [m]."""
        raise NotImplementedError

    def code_width(self, dim: int) -> int:
        """Columns of the code array for ``dim``-dimensional vectors."""
        return dim

    def score(self, queries: Any, codes: Any, metric: str = "cosine") -> np.ndarray:
        """Float ``queries`` [q, d] against document ``codes``: float32 [q, n], for the
        ``asymmetric`` quantisers; the others compare codes with coded queries."""
        raise CompressorError(
            f"{self.precision} codes are compared with coded queries (similarity()), not "
            "scored against float queries"
        )

    def bytes_per_vector(self, dim: int) -> int:
        """Storage for one ``dim``-dimensional vector at this precision."""
        raise NotImplementedError

    def _state(self) -> dict[str, np.ndarray]:
        return {}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        pass

    # ---- public API --------------------------------------------------------------------------

    @property
    def is_fitted(self) -> bool:
        return "n_features_in_" in self.__dict__

    def fit(self, X: Any) -> Self:
        """Learn parameters from calibration embeddings (the compressor's full-width output)."""
        self._validate_params()
        X = as_matrix(X)
        if X.shape[0] < 2:
            raise CompressorError(
                f"{self.precision} quantizer needs at least 2 calibration rows, got {X.shape[0]}"
            )
        check_finite(X, DEFAULT_CHUNK_ROWS)
        for name in [k for k in self.__dict__ if k.endswith("_") and not k.startswith("_")]:
            del self.__dict__[name]
        self._fit(X)
        self.n_fit_samples_ = int(X.shape[0])
        self.n_features_in_ = int(X.shape[1])
        return self

    def quantize(
        self,
        X: Any,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Encode ``X`` [n, d] chunk by chunk; d may be smaller than the fitted width."""
        if self.needs_fit and not self.is_fitted:
            raise not_fitted_error(
                f"this {self.precision} quantizer is not fitted; call fit() on calibration "
                "embeddings before quantize()"
            )
        chunk_rows = check_chunk_rows(chunk_rows)
        X = as_matrix(X)
        n, d = X.shape
        if self.is_fitted and d > self.n_features_in_:
            raise IncompatibleInputError(
                f"X has {d} features but this {self.precision} quantizer was fitted on "
                f"{self.n_features_in_}"
            )
        self._check_width(d)
        shape = (n, self.code_width(d))
        out = (
            np.empty(shape, self.code_dtype)
            if out is None
            else check_out(out, shape, self.code_dtype)
        )
        for start, chunk in iter_row_chunks(X, chunk_rows, np.float32):
            check_finite_chunk(chunk, start)
            out[start : start + chunk.shape[0]] = self._quantize_chunk(chunk)
        return out

    def similarity(
        self, A_codes: np.ndarray, B_codes: np.ndarray, *, dim: int | None = None
    ) -> np.ndarray:
        """Row-wise similarity of paired codes (A[i] vs B[i]) as float64 [n].

        ``dim`` is the vectors' dimension; only binary codes need it, and only when it is not
        a multiple of 8 and differs from the fitted width (see :class:`BinaryQuantizer`).
        """
        for name, codes in (("A_codes", A_codes), ("B_codes", B_codes)):
            if not isinstance(codes, np.ndarray) or codes.ndim != 2:
                raise IncompatibleInputError(f"{name} must be a 2-D array of codes from quantize()")
            if codes.dtype != self.code_dtype:
                raise IncompatibleInputError(
                    f"{name} has dtype {codes.dtype}, but {self.precision} codes are "
                    f"{self.code_dtype}; pass the output of quantize()"
                )
        if A_codes.shape != B_codes.shape:
            raise IncompatibleInputError(
                f"paired codes must have the same shape, got {A_codes.shape} and {B_codes.shape}"
            )
        n_bits = self._resolve_bits(A_codes.shape[1], dim)
        result = np.empty(A_codes.shape[0], np.float64)
        for start in range(0, A_codes.shape[0], DEFAULT_CHUNK_ROWS):
            stop = start + DEFAULT_CHUNK_ROWS
            result[start:stop] = self._similarity_chunk(
                np.asarray(A_codes[start:stop]), np.asarray(B_codes[start:stop]), n_bits
            )
        return result

    def _resolve_bits(self, width: int, dim: int | None) -> int:
        """Vector dimension for codes ``width`` columns wide."""
        if dim is not None and (not is_int(dim) or self.code_width(dim) != width):
            raise IncompatibleInputError(
                f"dim {dim!r} does not match {self.precision} codes {width} columns wide"
            )
        return width if dim is None else int(dim)

    def _check_dim(self, dim: Any) -> int:
        if not is_int(dim) or dim < 1:
            raise ParameterError(f"dim must be a positive integer, got {dim!r}")
        return int(dim)

    @property
    def metadata(self) -> dict[str, Any]:
        """Readable summary: precision, params and calibration width."""
        return {
            "precision": self.precision,
            "params": self.get_params(),
            "input_dim": self.__dict__.get("n_features_in_"),
            "n_fit_samples": self.__dict__.get("n_fit_samples_"),
        }

    # ---- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write ``path/config.json`` and ``path/state.safetensors`` atomically."""
        write_saved(path, *self.saved_state())

    def saved_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What :meth:`save` writes: the config (JSON) and the learned arrays."""
        if self.needs_fit and not self.is_fitted:
            raise not_fitted_error(
                f"cannot save an unfitted {self.precision} quantizer; call fit() first"
            )
        fitted = self.is_fitted
        config = {
            "kind": "quantizer",
            "precision": self.precision,
            "version": self.version,
            "demitasse_version": demitasse_version(),
            "params": self.get_params(),
            "input_dim": self.n_features_in_ if fitted else None,
            "n_fit_samples": self.n_fit_samples_ if fitted else None,
            "learned": {name: getattr(self, name) for name in self.scalar_state} if fitted else {},
        }
        return config, self._state() if fitted else {}

    @classmethod
    def load(cls, path: str | Path) -> Quantizer:
        """Load a saved quantizer; on a subclass, the saved precision must match it."""
        config, arrays = read_saved(path, "quantizer")
        if config.get("kind") != "quantizer":
            raise SavedStateError(f"{path} holds a saved {config.get('kind')}, not a quantizer")
        precision = require(config, "precision", "str", path)
        try:
            target, _ = resolve_precision(precision)
        except UnknownNameError as exc:
            raise SavedStateError(f"invalid config.json in {path}: {exc}") from None
        if cls is not Quantizer and not issubclass(target, cls):
            raise SavedStateError(f"{path} holds a {precision} quantizer, not {cls.family}")
        check_version(require(config, "version", "int", path), target.version, precision, path)
        params = require(config, "params", "dict", path)
        try:
            obj = target._construct(params)
        except CompressorError as exc:  # a parameter it does not take, or a value it refuses
            raise SavedStateError(f"invalid config.json in {path}: {exc}") from None
        input_dim = require(config, "input_dim", "int?", path)
        n_fit_samples = require(config, "n_fit_samples", "int?", path)
        if input_dim is None:
            if obj.needs_fit:
                raise SavedStateError(f"invalid config.json in {path}: input_dim is missing")
            check_state_shapes(arrays, {}, path)
            return obj
        if input_dim < 1:
            raise SavedStateError(f"invalid config.json in {path}: input_dim {input_dim} < 1")
        learned = require(config, "learned", "dict", path)
        missing = [name for name in obj.scalar_state if name not in learned]
        if missing:
            raise SavedStateError(
                f"invalid config.json in {path}: 'learned' lacks {', '.join(missing)}"
            )
        obj.n_features_in_ = input_dim
        for name in obj.scalar_state:
            setattr(obj, name, learned[name])
        check_state_shapes(arrays, obj._state_shapes(), path)
        obj._load_state(arrays)
        obj.n_fit_samples_ = n_fit_samples
        return obj

    def _display_name(self) -> str:
        return f"{self.precision} quantizer"


@register_quantizer
class Float32Quantizer(Quantizer):
    """Identity at full precision (cosine similarity), so float32 shares the quantised path."""

    family: ClassVar[str] = "float32"
    code_dtype: ClassVar[np.dtype] = np.dtype(np.float32)

    @property
    def needs_fit(self) -> bool:
        return False

    def _quantize_chunk(self, X: np.ndarray) -> np.ndarray:
        return X

    def _similarity_chunk(self, A: np.ndarray, B: np.ndarray, n_bits: int) -> np.ndarray:
        return cosine_rows(A, B)

    def bytes_per_vector(self, dim: int) -> int:
        return 4 * self._check_dim(dim)


@register_quantizer
class Int8Quantizer(Quantizer):
    """Scalar int8 quantisation with per-dimension ranges learned from calibration data.

    ``code = clip(floor((x - lo) / step), 0, 255) - 128`` with ``step = (hi - lo) / 255``, all in
    float32 and in that order, where [lo, hi] is the calibration min/max (``"minmax"``) or the
    [100-p, p] percentiles (``"percentile"``, which ignores outliers; it loads the calibration
    set into memory). This is sentence-transformers' convention to the bit
    (``quantize_embeddings(x, "int8", ranges=np.stack([lo, hi]))``), so codes made here and
    codes made by a server from exported ranges are interchangeable; values outside [lo, hi]
    clip to -128 or 127.

    Scores use the values the codes stand for (each code's bucket centre, :meth:`dequantize`),
    not the integer codes: paired similarity is the cosine of the dequantised vectors, and a
    search scores the float query against them (:meth:`score`, as faiss's SQ8 does). The cosine
    of raw codes would stretch every dimension to the same range, a whitening that cost 2.4
    STS points after PCA.
    """

    family: ClassVar[str] = "int8"
    code_dtype: ClassVar[np.dtype] = np.dtype(np.int8)
    asymmetric: ClassVar[bool] = True

    def __init__(self, calibration: str = "minmax", percentile: float = 99.9) -> None:
        self.calibration = calibration
        self.percentile = percentile

    def _validate_params(self) -> None:
        if self.calibration not in ("minmax", "percentile"):
            raise ParameterError(
                f"int8: calibration must be 'minmax' or 'percentile', got {self.calibration!r}"
            )
        p = self.percentile
        if isinstance(p, bool) or not isinstance(p, int | float) or not 50 < p <= 100:
            raise ParameterError(f"int8: percentile must be in (50, 100], got {p!r}")

    def _fit(self, X: np.ndarray) -> None:
        if self.calibration == "minmax":
            lo = np.full(X.shape[1], np.inf)
            hi = np.full(X.shape[1], -np.inf)
            for _, chunk in iter_row_chunks(X, DEFAULT_CHUNK_ROWS, np.float64):
                lo = np.minimum(lo, chunk.min(axis=0))
                hi = np.maximum(hi, chunk.max(axis=0))
        else:
            p = float(self.percentile)
            lo, hi = np.percentile(np.asarray(X, dtype=np.float32), [100.0 - p, p], axis=0)
        # A constant dimension gets a range that puts its value mid-bucket 128, so it codes to
        # 0 and adds nothing to dot products; the range scales with the value so that float32
        # keeps lo < hi even for large values.
        flat = ~(hi > lo)
        step = 2.0 * np.maximum(1.0, np.abs(lo)) / 255.0
        lo, hi = np.where(flat, lo - 128.5 * step, lo), np.where(flat, lo + 126.5 * step, hi)
        self._set_ranges(lo.astype(np.float32), hi.astype(np.float32))

    def _set_ranges(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.lo_ = lo
        self.hi_ = hi
        # float32 throughout, as sentence-transformers computes it (a zero step becomes 1 there;
        # lo < hi here, but a range below float32's resolution can still round to 0).
        step = (hi - lo) / np.float32(255)
        self._step = np.where(step == 0, np.float32(1), step).astype(np.float32)

    def _quantize_chunk(self, X: np.ndarray) -> np.ndarray:
        d = X.shape[1]
        buckets = np.subtract(X, self.lo_[:d])
        np.divide(buckets, self._step[:d], out=buckets)
        # Clipped to [0, 255] first, truncation is floor; bucket - 128 as int8 is the bucket
        # as uint8 with its top bit flipped.
        np.clip(buckets, 0, 255, out=buckets)
        codes = buckets.astype(np.uint8)
        codes ^= 0x80
        return codes.view(np.int8)

    def _similarity_chunk(self, A: np.ndarray, B: np.ndarray, n_bits: int) -> np.ndarray:
        # The values the codes stand for, not the codes: the cosine of raw codes stretches
        # every dimension to the same range (a whitening that costs STS and search quality).
        return cosine_rows(self.dequantize(A), self.dequantize(B))

    def bytes_per_vector(self, dim: int) -> int:
        return self._check_dim(dim)

    def score(self, queries: Any, codes: Any, metric: str = "cosine") -> np.ndarray:
        """Asymmetric scores of float ``queries`` [q, d] against int8 document ``codes``
        [n, d]: the query against each code's bucket centres (as faiss's SQ8 scores), float32
        [q, n]. ``"cosine"``, ``"dot"`` or ``"l2"`` (minus the squared distance)."""
        Q = as_matrix(queries, "queries")
        if Q.shape[1] != codes.shape[1]:
            raise IncompatibleInputError(
                f"queries have {Q.shape[1]} dims; the int8 codes have {codes.shape[1]}"
            )
        Q = scored_queries(Q, metric)
        scores = np.empty((Q.shape[0], codes.shape[0]), np.float32)
        for start in range(0, codes.shape[0], DEFAULT_CHUNK_ROWS):
            documents = self.dequantize(np.asarray(codes[start : start + DEFAULT_CHUNK_ROWS]))
            block = Q @ documents.T
            if metric == "cosine":
                block /= np.maximum(np.linalg.norm(documents, axis=1), 1e-12)
            elif metric == "l2":
                block = 2 * block - (documents**2).sum(axis=1) - (Q**2).sum(axis=1)[:, None]
            scores[:, start : start + documents.shape[0]] = block
        return scores

    def dequantize(self, codes: np.ndarray) -> np.ndarray:
        """float32 vectors back from int8 ``codes`` [n, d ≤ fitted]: each code's bucket centre,
        ``lo + (code + 128.5) · step``, within half a step of the value that made it (unless
        it was clipped). Rescoring against int8 document vectors scores these."""
        if not self.is_fitted:
            raise not_fitted_error("this int8 quantizer is not fitted; it has no ranges to undo")
        if not isinstance(codes, np.ndarray) or codes.ndim != 2 or codes.dtype != np.int8:
            raise IncompatibleInputError("codes must be a 2-D int8 array from quantize()")
        d = codes.shape[1]
        if d > self.n_features_in_:
            raise IncompatibleInputError(
                f"codes have {d} columns; this quantizer has {self.n_features_in_}"
            )
        buckets = codes.astype(np.float32) + np.float32(128.5)
        return self.lo_[:d] + buckets * self._step[:d]

    def _state(self) -> dict[str, np.ndarray]:
        return {"lo_": self.lo_, "hi_": self.hi_}

    def _state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"lo_": (self.n_features_in_,), "hi_": (self.n_features_in_,)}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        lo = arrays["lo_"].astype(np.float32)
        hi = arrays["hi_"].astype(np.float32)
        if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (hi > lo).all()):
            raise SavedStateError("invalid saved int8 quantizer: ranges must be finite, lo < hi")
        self._set_ranges(lo, hi)
