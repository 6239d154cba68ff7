"""``--vectors`` of ``index`` and ``eval``: the encoder's output for documents, computed
already, a row per document in the documents' order.

They are checked (file, float dtype, finite values, rows, a model directory's recorded width)
before the model loads, since loading writes its files' hashes and a mistake should cost
nothing. ``eval`` then takes them through :class:`GivenVectors`, an encoder that answers for
the corpus documents from the file at the evaluated layer and encodes every other text, so
the vectors enter at the very point of the pipeline the encoder's would (before the
compressor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from demitasse.errors import DataError

if TYPE_CHECKING:
    from demitasse.encoders.base import Encoder
    from demitasse.evaluation.records import ResultRecord
    from demitasse.model import CompressedModel

VECTOR_COLUMN = "embedding"


def add_vectors_arguments(parser: Any, rows: str) -> None:  # a parser or an argument group
    """``--vectors`` and ``--vector-column``; ``rows`` says whose vectors a row holds."""
    parser.add_argument("--vectors", default=None,
                        help="the encoder's vectors of the documents, computed already "
                        f"(.npy or .parquet, a row per document of {rows}, in its order): "
                        "not encoded again")  # fmt: skip
    parser.add_argument("--vector-column", default=VECTOR_COLUMN,
                        help="--vectors .parquet: the list column of vectors")  # fmt: skip


def saved_width(model: str) -> int | None:
    """The input width a model directory records, read without loading it (None: unknown)."""
    from demitasse.model_files import is_model_dir, read_model_config

    if not is_model_dir(model):
        return None
    width = read_model_config(model).get("input_dim")
    return width if isinstance(width, int) else None


@dataclass(frozen=True)
class VectorsFile:
    """Where ``--vectors`` came from, and what their rows are: ``documents`` of ``source``."""

    path: str
    column: str
    documents: int
    source: str


def given_vectors(
    given: VectorsFile, width: int | None, model: str, vectors: Any = None
) -> np.ndarray:
    """``given``'s vectors (read now unless ``vectors`` holds them), refused in one line unless
    a finite row per document, as wide as ``model``'s encoder output (``width``, when known)."""
    from demitasse.arrays import check_finite
    from demitasse.data import load_embeddings

    if vectors is None:
        vectors = load_embeddings(given.path, column=given.column)  # refuses integer codes
        check_finite(vectors, name=f"{given.path}: vector")
    if width is not None and vectors.shape[1] != width:
        raise DataError(f"{given.path}: vectors {vectors.shape[1]} wide, but {model} "
                        f"takes the encoder's {width}-dimensional output")  # fmt: skip
    if len(vectors) != given.documents:
        raise DataError(f"{given.path}: {len(vectors)} vectors for the {given.documents} "
                        f"documents of {given.source}")  # fmt: skip
    return vectors


# ---- eval: the retrieval corpus's vectors ----------------------------------------------------


@dataclass(frozen=True)
class CorpusVectors:
    """``eval --vectors``: row i is the encoder's output for ``texts[i]``, the i-th document
    of the retrieval corpus, at the one layer evaluated."""

    file: VectorsFile
    texts: list[str]
    vectors: np.ndarray

    @cached_property
    def extra(self) -> dict[str, str]:
        """What a record scored with these vectors carries, so its figure is traceable;
        hashed only once there are records, as a refusal should write nothing, not even the
        file-hash cache."""
        from demitasse.encoders.file_hashes import file_sha256

        path = Path(self.file.path).expanduser().resolve()
        return {"corpus_vectors": str(path), "corpus_vectors_sha256": file_sha256(path)}

    def check_width(self, width: int | None, model: str) -> None:
        given_vectors(self.file, width, model, self.vectors)

    def encoder(self, encoder: Encoder, layer: int | None) -> GivenVectors:
        """``encoder``, answering for the corpus documents at ``layer`` (None: its last)."""
        self.check_width(encoder.dim, encoder.name)
        layer = encoder.num_layers if layer is None else layer
        if not 1 <= layer <= encoder.num_layers:  # else a run whose texts are all given passes
            raise DataError(f"layer {layer} does not exist: {encoder.name} has layers "
                            f"1..{encoder.num_layers}")  # fmt: skip
        return GivenVectors(encoder, self.texts, self.vectors, layer)

    def vectors_of(self, model: CompressedModel) -> Callable[[list[str]], np.ndarray]:
        """``evaluate_model``'s ``vectors_of`` for ``model`` (a model directory, loaded): the
        encoder's output at the model's layer, from the file for the corpus documents."""
        given = self.encoder(model.load_encoder(), model.recipe.layer)
        return partial(given.encode, layer=given.layer, batch_size=model.settings.batch_size)

    def tag(self, records: Sequence[ResultRecord]) -> None:
        """Retrieval records (the only task the vectors enter) say where they came from."""
        for record in records:
            if record.task == "retrieval":
                record.extra = {**(record.extra or {}), **self.extra}


def corpus_vectors(path: str, column: str, texts: list[str], source: str) -> CorpusVectors:
    """``--vectors`` for the ``texts`` of a retrieval corpus read from ``source``, checked."""
    given = VectorsFile(path, column, len(texts), source)
    return CorpusVectors(given, texts, given_vectors(given, None, ""))


class GivenVectors:
    """An encoder whose output for ``texts`` at ``layer`` is the matching row of ``vectors``
    (a text given twice: its first row, as the harness keeps one vector per text); every
    other text, and every other layer, is ``encoder``'s."""

    def __init__(
        self, encoder: Encoder, texts: Sequence[str], vectors: np.ndarray, layer: int
    ) -> None:
        self.inner = encoder
        self.layer = layer
        self._vectors = vectors
        self._row: dict[str, int] = {}
        for row, text in enumerate(texts):
            self._row.setdefault(text, row)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def num_layers(self) -> int:
        return self.inner.num_layers

    def __getattr__(self, name: str) -> Any:
        # What the encoder is beyond the contract (backend, path, fingerprint) is the inner's;
        # "inner" itself is missing only while unpickling or copying, before __init__.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def encode(
        self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32
    ) -> np.ndarray:
        layer = self.num_layers if layer is None else layer
        return self.encode_layers(texts, [layer], batch_size=batch_size)[layer]

    def encode_layers(
        self, texts: Sequence[str], layers: Sequence[int] | None = None, batch_size: int = 32
    ) -> dict[int, np.ndarray]:
        if layers is None or list(layers) != [self.layer]:
            return self.inner.encode_layers(texts, layers, batch_size=batch_size)
        texts = list(texts)
        rows = [self._row.get(text) for text in texts]
        given = [i for i, row in enumerate(rows) if row is not None]
        rest = [i for i, row in enumerate(rows) if row is None]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if given:
            wanted = np.asarray([rows[i] for i in given], dtype=np.int64)
            out[given] = np.asarray(self._vectors[wanted], dtype=np.float32)
        if rest:
            encoded = self.inner.encode_layers(
                [texts[i] for i in rest], [self.layer], batch_size=batch_size
            )
            out[rest] = encoded[self.layer]
        return {self.layer: out}
