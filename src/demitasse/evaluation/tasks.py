"""The task interface of the harness: a task names the texts it needs and scores their vectors.

The grid encodes the union of all tasks' texts once per layer, compresses and quantises them
once per configuration, and hands each task an :class:`EmbeddedTexts`. A task never sees the
encoder or the compressor, so every task works for every encoder × layer × compressor × dim ×
precision, including vectors that came from elsewhere.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from demitasse.arrays import unit_rows
from demitasse.compress import CodebookQuantizer, Int8Quantizer, Quantizer
from demitasse.data import ScoredPairs
from demitasse.errors import DataError
from demitasse.evaluation.sts import spearman_x100
from demitasse.search import Rescoring


@dataclass(frozen=True)
class Score:
    """One figure a task produced; the grid adds the configuration to make a record."""

    dataset: str
    metric: str
    score: float
    extra: dict[str, Any] = field(default_factory=dict)


class EmbeddedTexts:
    """The quantised vectors of a set of texts in one configuration, and how to compare them.

    ``vectors`` are the float32 vectors the codes were made from (a search that rescores
    needs them: the float query, and document vectors to keep); ``rescore_quantizer`` is an
    int8 quantiser calibrated for this configuration, for document vectors kept as int8.

    ``encoder_vectors`` are the encoder's full output before compression, for rescoring from
    source ``"encoder"``; ``encoder_rescore_quantizer`` holds the int8 ranges of their
    normalised rows. ``rescoring`` is the configuration's own way to search (a
    :class:`~demitasse.model.CompressedModel` that rescores): then retrieval searches only
    that way, and a pair's similarity is the rescoring score, the first text as the query
    and the second as a kept document, since the rescoring decides what a search returns.
    """

    def __init__(
        self,
        texts: Sequence[str],
        codes: np.ndarray,
        quantizer: Quantizer,
        dim: int,
        *,
        vectors: np.ndarray | None = None,
        rescore_quantizer: Quantizer | None = None,
        encoder_vectors: np.ndarray | None = None,
        encoder_rescore_quantizer: Quantizer | None = None,
        rescoring: Rescoring | None = None,
    ):
        self._row = {text: i for i, text in enumerate(texts)}
        self.codes = codes
        self.quantizer = quantizer
        self.dim = dim
        self.vectors = vectors
        self.rescore_quantizer = rescore_quantizer
        self.encoder_vectors = encoder_vectors
        self.encoder_rescore_quantizer = encoder_rescore_quantizer
        self.rescoring = rescoring

    @property
    def precision(self) -> str:
        return self.quantizer.precision

    def rows(self, texts: Sequence[str]) -> np.ndarray:
        try:
            return np.fromiter((self._row[t] for t in texts), dtype=np.int64, count=len(texts))
        except KeyError as exc:
            raise DataError(f"text was not encoded for this task: {str(exc)[:80]}") from None

    def codes_of(self, texts: Sequence[str]) -> np.ndarray:
        """Stored codes (float32, int8 or packed bits) of ``texts``."""
        return self.codes[self.rows(texts)]

    def vectors_of(self, texts: Sequence[str]) -> np.ndarray:
        """float32 vectors of ``texts`` before quantisation."""
        if self.vectors is None:
            raise DataError("these embeddings carry no float vectors (needed for rescoring)")
        return np.ascontiguousarray(self.vectors[self.rows(texts)], dtype=np.float32)

    def encoder_vectors_of(self, texts: Sequence[str]) -> np.ndarray:
        """The encoder's full output of ``texts``, L2-normalised (float32)."""
        if self.encoder_vectors is None:
            raise DataError(
                "these embeddings carry no encoder vectors (needed for rescoring with the "
                "encoder's full output)"
            )
        return unit_rows(self.encoder_vectors[self.rows(texts)])

    def rescoring_queries(self, texts: Sequence[str], rescoring: Rescoring) -> np.ndarray:
        """The float vectors ``texts`` rescore with, as queries."""
        if rescoring.source == "encoder":
            return self.encoder_vectors_of(texts)
        return self.vectors_of(texts)

    def rescoring_store(
        self, texts: Sequence[str], rescoring: Rescoring
    ) -> tuple[np.ndarray, Quantizer | None]:
        """The vectors kept for rescoring ``texts`` as documents, and the int8 quantiser
        that made them (None for float32 ones)."""
        if rescoring.source == "encoder":
            vectors = self.encoder_vectors_of(texts)
            quantizer, attribute = self.encoder_rescore_quantizer, "encoder_rescore_quantizer"
        else:
            vectors = self.vectors_of(texts)
            quantizer, attribute = self.rescore_quantizer, "rescore_quantizer"
        if rescoring.precision == "float32":
            return vectors, None
        if quantizer is None or quantizer.precision != "int8":
            raise DataError(
                "int8 rescoring needs an int8 quantiser calibrated for this configuration "
                f"(EmbeddedTexts.{attribute})"
            )
        return quantizer.quantize(vectors), quantizer

    def features_of(self, texts: Sequence[str]) -> np.ndarray:
        """float32 features for a learned probe, clustering or translation search: the
        vector, the values codes stand for (int8 bucket centres, decoded codebook codes), or
        the bits as 0/1."""
        codes = self.codes_of(texts)
        if isinstance(self.quantizer, CodebookQuantizer):
            return self.quantizer.decode(codes)
        if isinstance(self.quantizer, Int8Quantizer):
            return self.quantizer.dequantize(codes)
        if self.precision == "binary":
            return np.unpackbits(codes, axis=1, count=self.dim).astype(np.float32)
        return codes.astype(np.float32)

    def paired_similarity(self, left: Sequence[str], right: Sequence[str]) -> np.ndarray:
        """Similarity of ``left[i]`` with ``right[i]``, as the precision's index would score it
        (with the configuration's own ``rescoring``: as its rescoring scores it)."""
        if self.rescoring is not None:
            return self._rescored_similarity(left, right, self.rescoring)
        return self.quantizer.similarity(self.codes_of(left), self.codes_of(right), dim=self.dim)

    def _rescored_similarity(
        self, left: Sequence[str], right: Sequence[str], rescoring: Rescoring
    ) -> np.ndarray:
        # The same arithmetic as QuantizedIndex.rescore_scores (cosine space): the float
        # query against the kept vector, int8 ones as their bucket centres.
        queries = unit_rows(self.rescoring_queries(left, rescoring))
        kept, quantizer = self.rescoring_store(right, rescoring)
        if isinstance(quantizer, Int8Quantizer):
            kept = quantizer.dequantize(kept)
        documents = unit_rows(kept)
        return np.einsum("ne,ne->n", documents, queries).astype(np.float64)


class Task(ABC):
    """Something to score embeddings on; ``name`` becomes the records' ``task``."""

    name: ClassVar[str]

    @abstractmethod
    def texts(self) -> list[str]:
        """Every text the task needs vectors for (duplicates allowed)."""

    @abstractmethod
    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        """Scores for one configuration."""


def with_average(scores: list[Score], metric: str) -> list[Score]:
    """Append the mean of ``scores`` as dataset ``avg`` when there is more than one."""
    if len(scores) > 1:
        scores = [*scores, Score("avg", metric, float(np.mean([s.score for s in scores])))]
    return scores


class STSTask(Task):
    """Spearman ×100 between the pairs' similarity and their gold scores, per data set."""

    name = "sts"

    def __init__(self, suite: Mapping[str, ScoredPairs]) -> None:
        if not suite:
            raise DataError("no STS data sets to evaluate")
        self.suite = dict(suite)

    def texts(self) -> list[str]:
        return [t for pairs in self.suite.values() for t in pairs.texts()]

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        scores = [
            Score(
                name,
                "spearman",
                spearman_x100(
                    embedded.paired_similarity(pairs.sentences1, pairs.sentences2), pairs.scores
                ),
            )
            for name, pairs in self.suite.items()
        ]
        return with_average(scores, "spearman")
