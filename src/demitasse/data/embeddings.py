"""Precomputed embedding matrices (e.g. from an embedding API) and their sanity checks."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from pathlib import Path
from tokenize import TokenError

import numpy as np

from demitasse.arrays import arrow_vectors, check_float_vectors
from demitasse.data._tables import check_columns
from demitasse.data._text import require_file
from demitasse.errors import DataError, one_line

#: What numpy's .npy header reader raises for a header with wrong values (a header that is no
#: Python literal raises SyntaxError, TokenError or RecursionError: "malformed header").
_NPY_HEADER_ERRORS = (ValueError, OverflowError, EOFError)
_NPY_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and data offset of a .npy file, checked against the file's size before
    anything is memory-mapped (a header may promise any shape)."""
    with path.open("rb") as f:
        # np.load would try to unpickle anything without this prefix.
        if f.read(6) != b"\x93NUMPY":
            raise DataError(f"{path}: not a readable .npy file (no NumPy header)")
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            reader = _NPY_HEADER_READERS.get(version)
            if reader is None:
                raise ValueError(f"unsupported format version {version[0]}.{version[1]}")
            shape, _, dtype = reader(f)
        except (SyntaxError, TokenError, RecursionError):  # the header is no Python literal
            raise DataError(f"{path}: not a readable .npy file (malformed header)") from None
        except _NPY_HEADER_ERRORS as exc:
            raise DataError(f"{path}: not a readable .npy file ({one_line(exc)})") from None
        offset = f.tell()
    if dtype.hasobject:
        raise DataError(f"{path}: holds Python objects, not numbers")
    if dtype.kind not in "fiu":
        raise DataError(f"{path}: dtype {dtype} is not numeric")
    if any(n < 0 or n > sys.maxsize for n in shape):
        raise DataError(f"{path}: not a readable .npy file (invalid shape {shape})")
    needed = offset + math.prod(shape) * dtype.itemsize
    if path.stat().st_size < needed:
        raise DataError(
            f"{path}: truncated .npy file: shape {shape} of {dtype} needs {needed} bytes, "
            f"the file has {path.stat().st_size}"
        )
    return shape, dtype, offset


def _load_npy(path: Path) -> np.ndarray:
    check_float_vectors(_npy_header(path)[1], str(path))
    try:
        # Memory-mapped so a 10M x 768 file costs no RAM until read; never unpickle.
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npy file ({one_line(exc)})") from exc
    if not isinstance(array, np.ndarray):
        raise DataError(f"{path}: not a .npy array")
    return array


def _load_parquet(path: Path, column: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        check_columns(path, [column], pq.read_schema(path).names)
        array = pq.read_table(path, columns=[column]).column(column).combine_chunks()
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({one_line(exc)})") from exc
    kind = array.type
    if not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        raise DataError(f"{path}: column {column!r} has type {kind}, expected a list of numbers")
    value_type = kind.value_type
    if not (pa.types.is_floating(value_type) or pa.types.is_integer(value_type)):
        raise DataError(f"{path}: column {column!r} holds {value_type} values, not numbers")
    return arrow_vectors(array, f"{path}: column {column!r}")


def load_embeddings(path: str | Path, column: str = "embedding") -> np.ndarray:
    """An (n, d) embedding matrix from ``.npy`` (memory-mapped, float dtype kept) or
    ``.parquet``.

    Parquet ``column`` must hold equal-length lists of floats; it is read as float32. Integer
    vectors (int8 codes, packed bits, any integer dtype) are refused in one line, never read
    as floats (:func:`~demitasse.arrays.check_float_vectors`).
    """
    path = require_file(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        matrix = _load_npy(path)
    elif suffix == ".parquet":
        matrix = _load_parquet(path, column)
    else:
        raise DataError(f"{path}: unsupported embedding file type; use .npy or .parquet")
    if matrix.ndim != 2:
        raise DataError(
            f"{path}: expected a 2-D (rows x dimensions) array, got shape {matrix.shape}"
        )
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise DataError(f"{path}: empty embedding matrix, shape {matrix.shape}")
    return matrix


def check_finite(
    X: np.ndarray,  # noqa: N803 - the conventional name for a data matrix
    name: str = "embeddings",
    chunk_rows: int = 65536,
) -> None:
    """Raise DataError naming the first row (0-based) holding NaN or inf.

    Scans ``chunk_rows`` rows at a time so a memory-mapped matrix is never read whole.
    """
    if X.dtype.kind in "iub":  # integers cannot be NaN or inf
        return
    rows = X.reshape(1) if X.ndim == 0 else X
    for start in range(0, rows.shape[0], chunk_rows):
        block = np.asarray(rows[start : start + chunk_rows])
        finite = np.isfinite(block)
        if not finite.all():
            bad_rows = ~finite.reshape(len(block), -1).all(axis=1)
            row = start + int(np.argmax(bad_rows))
            raise DataError(f"{name} contain NaN or inf (first at row {row})")


def check_embeddings_target(
    path: str | Path, *, overwrite: bool = True, inputs: Iterable[str | Path | None] = ()
) -> Path:
    """``path`` as a Path if :func:`save_embeddings` may write there, else a one-line error:
    checked before any work, so a bad output name never costs an encoding run. Never one of
    ``inputs`` (nor inside one); an existing file only with ``overwrite``."""
    from demitasse.io import check_new_file

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".parquet"):
        raise DataError(f"{path}: unsupported output type; use .npy or .parquet")
    if path.is_dir() and not path.is_symlink():
        raise DataError(f"{path} is a directory; give a file name ending in {suffix}")
    return check_new_file(path, overwrite=overwrite, inputs=inputs)


def save_embeddings(
    path: str | Path,
    vectors: np.ndarray,
    *,
    column: str = "embedding",
    metadata: dict[str, str] | None = None,
    overwrite: bool = True,
) -> Path:
    """Write ``vectors`` (float32, int8 codes or packed bits) to ``.npy`` or ``.parquet``,
    atomically: an interrupted write leaves the previous file, never half of one.

    Parquet holds one fixed-size list per row in ``column`` (the dtype kept) and ``metadata``
    (e.g. the model's provenance) in the file's key-value metadata. An existing file is
    replaced only with ``overwrite``.
    """
    from demitasse.io import atomic_npy, atomic_path

    path = check_embeddings_target(path, overwrite=overwrite)
    if path.suffix.lower() == ".npy":
        with atomic_npy(path, vectors.shape, vectors.dtype.str) as out:
            out[:] = vectors
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = pa.array(np.ascontiguousarray(vectors).reshape(-1))
    table = pa.table({column: pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])})
    if metadata:
        table = table.replace_schema_metadata(metadata)
    with atomic_path(path, suffix=".parquet") as tmp:
        pq.write_table(table, tmp)
    return path
