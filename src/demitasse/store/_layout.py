"""How a demitasse table is laid out in LanceDB: its columns, its metadata, and the conversions
between Arrow's fixed-size lists and numpy matrices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from demitasse.errors import DataError
from demitasse.provenance import provenance_json, read_provenance

if TYPE_CHECKING:
    from demitasse.model import CompressedModel

#: Insertion position of each document: the tie-break of equal scores, as in-memory search
#: orders ties by corpus row.
ROW = "row"
ID = "id"
TEXT = "text"
#: The first stage's codes: packed bits (uint8), int8 codes or float32 vectors.
CODES = "codes"
#: The encoder's full output kept for rescoring (int8 or float32), when the model rescores.
RESCORE = "rescore"
PROVENANCE_KEY = b"demitasse.provenance"
FORMAT_KEY = b"demitasse.format"
FORMAT = b"1"

_ARROW_TYPES = {np.dtype(np.uint8): pa.uint8(), np.dtype(np.int8): pa.int8(),
                np.dtype(np.float32): pa.float32()}  # fmt: skip


@dataclass(frozen=True)
class Layout:
    """What a table holds: the codes' precision and width, the rescoring vectors' dtype
    (None: no rescoring column), whether texts are kept, and the model's provenance."""

    provenance: dict[str, Any]
    code_dtype: np.dtype
    code_width: int
    rescore_dtype: np.dtype | None
    rescore_width: int
    with_text: bool

    @property
    def dim(self) -> int:
        return int(self.provenance["dim"])

    @property
    def precision(self) -> str:
        return str(self.provenance["precision"])

    @property
    def search_columns(self) -> list[str]:
        """What a search reads: the row and id, the codes and (when kept) the rescoring
        vectors; never the texts."""
        return [ROW, ID, CODES, *([RESCORE] if self.rescore_dtype is not None else [])]

    def schema(self) -> pa.Schema:
        fields = [pa.field(ROW, pa.int64(), nullable=False), pa.field(ID, pa.string(), False)]
        if self.with_text:
            fields.append(pa.field(TEXT, pa.string()))
        fields.append(pa.field(CODES, pa.list_(_ARROW_TYPES[self.code_dtype], self.code_width)))
        if self.rescore_dtype is not None:
            item = _ARROW_TYPES[self.rescore_dtype]
            fields.append(pa.field(RESCORE, pa.list_(item, self.rescore_width)))
        metadata = {PROVENANCE_KEY: provenance_json(self.provenance).encode(), FORMAT_KEY: FORMAT}
        return pa.schema(fields, metadata=metadata)


def layout_for(
    model: CompressedModel, dim: int | None, precision: str | None, *, with_text: bool
) -> Layout:
    """The layout of ``model``'s documents at ``dim`` and ``precision`` (default: the model's
    width and fitted precision)."""
    provenance = model.provenance(dim, precision)
    dim, precision = int(provenance["dim"]), str(provenance["precision"])
    stages = model.stages(dim, precision)
    dtype = np.dtype(stages.quantizer.code_dtype)
    width = stages.bytes_per_vector() // dtype.itemsize
    rescore_dtype = None
    store = stages.rescore_store
    if store is not None:
        rescore_dtype = np.dtype(np.int8 if store.precision == "int8" else np.float32)
    input_dim = model.recipe.input_dim
    assert input_dim is not None  # known once fitted
    return Layout(provenance, dtype, width, rescore_dtype, input_dim, with_text)


def read_layout(schema: pa.Schema, where: str) -> Layout:
    """The layout of an existing table, or a one-line DataError for a table demitasse did not
    write."""
    metadata = schema.metadata or {}
    if metadata.get(FORMAT_KEY) != FORMAT or PROVENANCE_KEY not in metadata:
        raise DataError(f"{where} was not written by 'demitasse index' (no demitasse metadata)")
    provenance = read_provenance(metadata[PROVENANCE_KEY], where)
    names = schema.names
    missing = [c for c in (ROW, ID, CODES) if c not in names]
    if missing or not {"dim", "precision"} <= set(provenance):
        raise DataError(f"{where}: damaged demitasse table (missing {missing or 'dim/precision'})")
    codes = schema.field(CODES).type
    rescore = schema.field(RESCORE).type if RESCORE in names else None
    return Layout(
        provenance,
        np.dtype(codes.value_type.to_pandas_dtype()),
        codes.list_size,
        None if rescore is None else np.dtype(rescore.value_type.to_pandas_dtype()),
        0 if rescore is None else rescore.list_size,
        TEXT in names,
    )


def fixed_size_list(matrix: np.ndarray) -> pa.FixedSizeListArray:
    """Rows of a 2-D array as an Arrow fixed-size list column (no copy of C-ordered data)."""
    flat = pa.array(np.ascontiguousarray(matrix).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, matrix.shape[1])


def matrix(column: pa.ChunkedArray | pa.Array, dtype: np.dtype) -> np.ndarray:
    """A fixed-size list column as a C-ordered ``[rows, width]`` array of ``dtype``."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    width = column.type.list_size
    values = column.flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(values.reshape(-1, width), dtype=dtype)
