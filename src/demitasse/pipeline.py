# ruff: noqa: N803  (scikit-learn convention: matrices are capitalised)
"""The stages after the encoder, implemented once: compressor → quantiser → index → search.

:class:`~demitasse.model.CompressedModel` runs these stages on its encoder's vectors; the sweep
of ``demitasse eval`` (:func:`~demitasse.evaluation.evaluate_grid`) and the search space of
``demitasse tune`` build the same :class:`Stages` from vectors they have already computed. A
configuration therefore makes the same codes and the same search wherever it is built, by
construction rather than because one re-scores another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from demitasse.arrays import unit_rows
from demitasse.compress import Compressor, Quantizer, make_quantizer
from demitasse.search import QuantizedIndex

#: Rows compressed and quantised together: the float block stays in cache and is reused
#: instead of one float copy of every row (about twice as fast on stored vectors, where this
#: is all the work).
PIPELINE_ROWS = 8192


def fit_quantizer(
    precision: str, reduced: np.ndarray | None, params: Mapping[str, Any] | None = None
) -> Quantizer:
    """The quantiser of ``precision`` calibrated on ``reduced`` (the compressor's output of the
    fit vectors; None or float32: nothing to calibrate)."""
    quantizer = make_quantizer(precision, **dict(params or {}))
    if precision != "float32" and reduced is not None:
        quantizer.fit(reduced)
    return quantizer


def fit_rescore_store(full: np.ndarray, precision: str) -> RescoreStore:
    """How documents keep their full encoder output for rescoring: normalised, as int8 codes
    whose ranges are fitted on ``full`` (the fit vectors), or as float32."""
    if precision == "int8":
        return RescoreStore(make_quantizer("int8").fit(unit_rows(full)))
    return RescoreStore(None)


@dataclass(frozen=True)
class RescoreStore:
    """The documents' normalised full encoder output, kept aside for rescoring: int8 codes of
    ``quantizer`` or, without one, float32."""

    quantizer: Quantizer | None

    @property
    def precision(self) -> str:
        return "float32" if self.quantizer is None else self.quantizer.precision

    def keep(self, X: np.ndarray) -> np.ndarray:
        unit = unit_rows(X)
        return unit if self.quantizer is None else self.quantizer.quantize(unit)

    def bytes_per_vector(self, input_dim: int) -> int:
        return input_dim * (4 if self.quantizer is None else 1)


@dataclass(frozen=True)
class Stages:
    """One configuration's fitted stages: ``compressor`` (None: the vectors as they are) at
    width ``dim``, ``quantizer`` making its codes, and optionally the rescoring store.

    ``compress`` → ``quantize`` (or ``encode``, both at once) give the codes;
    ``index`` / ``queries`` / ``search`` search them as the model does.
    """

    compressor: Compressor | None
    quantizer: Quantizer
    dim: int
    rescore_store: RescoreStore | None = None

    @property
    def precision(self) -> str:
        return self.quantizer.precision

    def compress(self, X: np.ndarray) -> np.ndarray:
        """Float32 compressed vectors at ``dim``, as the quantiser sees them (a new array)."""
        if self.compressor is None:
            return np.array(X, dtype=np.float32, copy=True)
        return self.compressor.transform(X, dim=self.dim)

    def quantize(self, reduced: np.ndarray) -> np.ndarray:
        """Codes of vectors already compressed by :meth:`compress`."""
        return self.quantizer.quantize(reduced)

    def encode(self, X: np.ndarray, *, normalize: bool = False) -> np.ndarray:
        """``X`` → float32 vectors (L2-normalised with ``normalize``) or codes."""
        if self.precision == "float32":
            reduced = self.compress(X)
            if normalize:
                reduced /= np.maximum(np.linalg.norm(reduced, axis=1, keepdims=True), 1e-12)
            return reduced
        blocks = range(0, len(X), PIPELINE_ROWS)
        return np.concatenate(
            [self.quantize(self.compress(X[s : s + PIPELINE_ROWS])) for s in blocks]
        )

    def bytes_per_vector(self) -> int:
        """Bytes of one document's codes in the index (the rescoring store not counted)."""
        return self.quantizer.bytes_per_vector(self.dim)

    def index(self, X: np.ndarray) -> QuantizedIndex:
        """The documents ``X`` (full encoder output) indexed: their codes, and the rescoring
        store when there is one."""
        store = self.rescore_store
        return QuantizedIndex(
            self.encode(X),
            self.quantizer,
            dim=self.dim,
            rescore_vectors=None if store is None else store.keep(X),
            rescore_quantizer=None if store is None else store.quantizer,
        )

    def queries(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """What a search sends to :meth:`index`'s index for queries ``X``: their compressed
        float vectors (the first stage scores them against the codes) and, with a rescoring
        store, their normalised full output."""
        return self.compress(X), None if self.rescore_store is None else unit_rows(X)

    def search(
        self,
        index: QuantizedIndex,
        X: np.ndarray,
        k: int,
        *,
        rescore_factor: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` of ``index`` for queries ``X``: ``(scores, rows)``, best first; with
        a rescoring store and ``rescore_factor`` F, the codes' top ``k·F`` rescored."""
        first_stage, rescore_queries = self.queries(X)
        return search_prepared(index, first_stage, rescore_queries, k, rescore_factor)


def search_prepared(
    index: QuantizedIndex,
    first_stage: np.ndarray,
    rescore_queries: np.ndarray | None,
    k: int,
    rescore_factor: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Search ``index`` with queries prepared by :meth:`Stages.queries` (rescoring only when
    the queries carry a rescoring side)."""
    return index.search(
        first_stage,
        k,
        rescore_multiplier=rescore_factor if rescore_queries is not None else None,
        rescore_queries=rescore_queries,
    )
