"""Callable classes for Ray Data's ``map_batches``: each loads a model directory once per worker
and turns batches of texts (:class:`DemitasseEncoder`) or stored vectors
(:class:`DemitasseRecompressor`) into the model's codes. They import nothing from Ray, so they
drop into any pipeline::

    ds = ray.data.read_parquet("s3://bucket/texts/")
    ds = ds.map_batches(DemitasseEncoder, fn_constructor_kwargs={"model": "/models/m"},
                        batch_size=1024, concurrency=8, num_cpus=2)
    ds.write_parquet("s3://bucket/codes/")

A batch is a dict of numpy arrays (Ray's default format); other columns pass through, the
input column is replaced by ``output_column``: float32 [n, dim], int8 [n, dim] or packed bits
uint8 [n, dim / 8].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from demitasse.arrays import check_float_vectors
from demitasse.bulk.job import EMBED, RECOMPRESS, convert, load_model
from demitasse.bulk.sources import check_text


class _ModelActor:
    command = EMBED

    def __init__(
        self,
        model: str,
        *,
        dim: int | None = None,
        precision: str | None = None,
        input_column: str = "text",
        output_column: str = "embedding",
        threads: int | None = 1,
    ) -> None:
        # One torch thread by default: Ray gives each actor its own CPU(s), and more threads
        # than the actor's CPUs make every actor on the node slower.
        self.model = load_model(model, self.command, threads)
        self.dim = dim
        self.precision = precision or self.model.recipe.precision
        self.input_column = input_column
        self.output_column = output_column

    def _values(self, column: Any) -> Any:
        raise NotImplementedError

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = {key: value for key, value in batch.items() if key != self.input_column}
        column = batch[self.input_column]
        if len(column) == 0:
            width = self.model.bytes_per_vector(self.dim, "float32") // 4
            out[self.output_column] = np.zeros((0, width), dtype=np.float32)
            return out
        codes = convert(self.model, self.command, self._values(column), self.dim, self.precision)
        out[self.output_column] = codes
        return out


class DemitasseEncoder(_ModelActor):
    """Texts (``input_column``, default ``text``) → the codes of the model directory ``model``."""

    command = EMBED

    def _values(self, column: Any) -> list[str]:
        return [check_text(t, "batch", self.input_column) for t in column.tolist()]


class DemitasseRecompressor(_ModelActor):
    """Stored vectors (``input_column``, default ``embedding``: a 2-D array or an array of
    equal-length arrays) → the codes of the model directory ``model``."""

    command = RECOMPRESS

    def __init__(self, model: str, *, input_column: str = "embedding", **kwargs: Any) -> None:
        super().__init__(model, input_column=input_column, **kwargs)

    def _values(self, column: Any) -> np.ndarray:
        if not (isinstance(column, np.ndarray) and column.dtype != object):
            column = np.stack([np.asarray(v) for v in column])  # each row's own dtype
        check_float_vectors(column.dtype, f"batch column {self.input_column!r}")
        return column
