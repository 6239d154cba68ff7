# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Validation, chunked iteration and row-wise cosine for embedding matrices (dense or
memory-mapped)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from numbers import Integral
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from demitasse.errors import DataError, IncompatibleInputError, ParameterError, one_line

DEFAULT_CHUNK_ROWS = 65536


@functools.cache
def _thread_pools() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()  # scans the loaded libraries once (milliseconds)


@contextmanager
def single_blas_thread() -> Iterator[None]:
    """numpy's BLAS on one thread inside the block (for work that alternates with torch)."""
    with _thread_pools().limit(limits=1, user_api="blas"):
        yield


def _is_sparse(X: Any) -> bool:
    """Whether ``X`` is a scipy sparse matrix or array, without importing scipy: while
    ``scipy.sparse`` is not loaded, nothing can be one."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and bool(sparse.issparse(X))


class _NotNumbersError(DataError, TypeError):
    """An object array holding something that is not a number (a TypeError too, as numpy's)."""


def is_int(value: Any) -> bool:
    """True for Python/numpy integers, but not bools."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def as_matrix(X: Any, name: str = "X") -> np.ndarray:
    """Return ``X`` as a 2-D numeric ndarray without copying ndarrays (memmaps stay memmaps)."""
    if _is_sparse(X):
        raise DataError(f"{name} is a sparse matrix; embeddings must be a dense array")
    if not isinstance(X, np.ndarray):
        try:
            X = np.asarray(X)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{name} is not a numeric 2-D array: {one_line(exc)}") from None
    if X.ndim != 2:
        hint = "; Reshape your data with X.reshape(1, -1) if it is one row" if X.ndim == 1 else ""
        raise DataError(f"{name} must be a 2-D array [rows, features], got shape {X.shape}{hint}")
    if X.dtype.kind == "c":
        raise DataError(f"{name} has dtype {X.dtype}: Complex data not supported")
    if X.dtype.kind == "O":
        try:  # numbers boxed as Python objects: read them as floats
            X = X.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise _NotNumbersError(
                f"{name} holds objects that are not numbers: {one_line(exc)}"
            ) from None
    if X.dtype.kind not in "fiu":
        raise DataError(f"{name} must hold floats or integers, got dtype {X.dtype}")
    if X.shape[1] == 0:
        # Worded as scikit-learn's check_array words it.
        raise DataError(
            f"{name} has no columns: 0 feature(s) (shape={X.shape}) while a minimum of 1 is "
            "required."
        )
    return X


def check_chunk_rows(chunk_rows: Any) -> int:
    if not is_int(chunk_rows) or chunk_rows < 1:
        raise ParameterError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    return int(chunk_rows)


def iter_row_chunks(
    X: np.ndarray, chunk_rows: int, dtype: DTypeLike | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first_row, chunk)``; each chunk is cast to ``dtype`` so only one is in memory."""
    for start in range(0, X.shape[0], chunk_rows):
        chunk = X[start : start + chunk_rows]
        yield start, (np.asarray(chunk) if dtype is None else np.asarray(chunk, dtype=dtype))


#: Larger magnitudes overflow to inf once cast to float32 (and squares overflow float64).
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_finite_chunk(
    chunk: np.ndarray, first_row: int, name: str = "X", error: type[Exception] = DataError
) -> None:
    """Raise ``error`` naming the first row of ``chunk`` that holds NaN, inf, or a number too
    large for float32."""
    if chunk.dtype.kind != "f":
        return
    # One matrix-vector product carries any NaN or inf into its row's sum at half the cost of
    # isfinite over every value; a sum that overflows falls through to the exact check below.
    # A row holding inf and -inf sums to NaN, one of huge finite values overflows: numpy's
    # warnings about that would print before the one-line error (or for nothing).
    with np.errstate(over="ignore", invalid="ignore"):
        if (
            chunk.dtype == np.float32
            and chunk.ndim == 2
            and np.isfinite(chunk @ np.ones(chunk.shape[1], np.float32)).all()
        ):
            return
    finite = np.isfinite(chunk)
    if not finite.all():
        bad = int(np.argmin(finite.all(axis=1)))
        raise error(f"{name} row {first_row + bad} contains NaN or inf")
    if chunk.dtype.itemsize > 4:
        large = np.abs(chunk) > FLOAT32_MAX
        if large.any():
            bad = int(np.argmax(large.any(axis=1)))
            raise error(
                f"{name} row {first_row + bad} holds a value too large for float32 "
                f"(|x| > {FLOAT32_MAX:.3g})"
            )


def check_float_vectors(dtype: DTypeLike, where: str) -> None:
    """Vectors enter demitasse as floats (float16, float32 or float64): integers, whatever
    their width, are refused in one line, never read as floats. Integer arrays are usually
    codes (int8, packed bits), not vectors, and compressing them as if they were vectors gives
    wrong results without a sign. ``where`` names the data (a file, a column)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        raise DataError(
            f"{where}: {dtype} values, not float vectors; demitasse takes float16, float32 or "
            "float64 vectors and never reads integers (codes) as floats: pass the float vectors"
        )


def non_finite_array(arrays: dict[str, np.ndarray]) -> str | None:
    """The name of the first float array holding NaN or inf, or None."""
    for name, array in arrays.items():
        values = np.asarray(array)
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            return name
    return None


def check_finite(X: np.ndarray, chunk_rows: int = DEFAULT_CHUNK_ROWS, name: str = "X") -> None:
    """Check a whole (possibly memory-mapped) matrix for NaN/inf (and numbers too large for
    float32) in bounded memory."""
    if X.dtype.kind != "f":
        return
    for start, chunk in iter_row_chunks(X, chunk_rows):
        check_finite_chunk(chunk, start, name)


def check_out(out: Any, shape: tuple[int, int], dtype: DTypeLike) -> np.ndarray:
    """Validate a caller-supplied output buffer (e.g. a float32 memmap)."""
    dtype = np.dtype(dtype)
    if not isinstance(out, np.ndarray):
        raise IncompatibleInputError(f"out must be a numpy array, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise IncompatibleInputError(
            f"out must have shape {shape} and dtype {dtype}, got {out.shape} {out.dtype}"
        )
    if not out.flags.writeable:
        raise IncompatibleInputError("out is read-only")
    return out


def cosine_rows(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Row-wise cosine in float64; a zero vector has similarity 0 to anything."""
    a = A.astype(np.float64)
    b = B.astype(np.float64)
    dots = np.einsum("ij,ij->i", a, b)
    norms = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def unit_rows(X: np.ndarray) -> np.ndarray:
    """A float32 copy of ``X`` with every row scaled to length 1 (zero rows stay zero): the
    vectors as cosine search compares them."""
    vectors = np.array(X, dtype=np.float32, copy=True)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def arrow_vectors(array: Any, where: str) -> np.ndarray:
    """float32 [n, d] from an Arrow list column (list, large list or fixed-size list of numbers,
    chunked or not) of equal-length vectors, in one copy. Nulls, ragged rows and non-numeric
    values are one-line errors; ``where`` names the data in them (a file, a row range)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        raise DataError(f"{where}: holds {kind}, not lists of numbers")
    if not (pa.types.is_floating(kind.value_type) or pa.types.is_integer(kind.value_type)):
        raise DataError(f"{where}: holds lists of {kind.value_type}, not numbers")
    check_float_vectors(kind.value_type.to_pandas_dtype(), where)
    if array.null_count:
        row = pc.index(pc.is_null(array), True).as_py()
        raise DataError(f"{where}: row {row} is null, not a vector")
    if len(array) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False)
    ragged = np.flatnonzero(lengths != lengths[0])
    if ragged.size:
        row = int(ragged[0])
        raise DataError(
            f"{where}: row {row} has {lengths[row]} values, but row 0 has {lengths[0]} "
            "(ragged vectors)"
        )
    values = array.flatten()  # respects slicing, unlike .values
    if values.null_count:
        row = int(np.flatnonzero(pc.is_null(values).to_numpy(zero_copy_only=False))[0])
        raise DataError(f"{where}: row {row // lengths[0]} contains a null value")
    flat = values.to_numpy(zero_copy_only=False)
    if flat.dtype.itemsize > 4:  # a float64 beyond float32's range would become inf
        large = np.flatnonzero(np.abs(flat) > FLOAT32_MAX)
        if large.size:
            raise DataError(
                f"{where}: row {int(large[0]) // int(lengths[0])} holds a value too large for "
                f"float32 (|x| > {FLOAT32_MAX:.3g})"
            )
    return flat.astype(np.float32, copy=False).reshape(len(array), int(lengths[0]))
