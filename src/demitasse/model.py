# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""The compressed model: encoder, layer cut, compressor and quantiser as one object.

A :class:`CompressedModel` goes unchanged from fit to evaluation to export. It holds

- an encoder (a transformer, optionally cut after a layer, with that layer's exit head when the
  model was trained with them; a static model; or none, for vectors that come from an API),
- an optional compressor (any registered method: PCA, truncation, adaptor, SMEC, ...),
- an optional quantiser (int8 ranges, binary thresholds, product or residual codebooks)
  calibrated on the compressor's output.

``encode(texts, dim=..., precision=...)`` (or ``transform(vectors, ...)`` for given vectors)
picks the width and the precision at call time, within what the model was fitted for, as
``SentenceTransformer(name, truncate_dim=64).encode(texts, precision="int8")`` does.
With ``rescore_factor=F`` the model also searches the way vector databases do: its codes
find the top ``k·F`` documents, which are then rescored with the query's full encoder output
against the documents' full encoder output, kept as int8 codes (``rescore_precision="int8"``,
ranges fitted at fit time) or float32. ``search_index(corpus)`` builds that index
(:class:`~demitasse.search.QuantizedIndex`) and ``search(index, queries)`` queries it, so
evaluation, serving and the vector-store adapters all search alike.

``save(dir)`` writes one directory recording how and on what the model was fitted, and
``CompressedModel.load(dir)`` reads it back (:mod:`demitasse.model_files`); an encoder whose
files changed since the fit is refused (:mod:`demitasse.model_encoder`), since its vectors would
no longer be the ones the compressor saw. :mod:`demitasse.model_checks` checks what it is given.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Self

import numpy as np

from demitasse.compress import (
    Compressor,
    Quantizer,
    check_precision,
    make_quantizer,
    sort_precisions,
)
from demitasse.compress.vocabulary import (
    calibration_free_precisions,
    named_compressor,
    resolve_auto,
)
from demitasse.encoders.base import Encoder
from demitasse.errors import CompressorError, DataError, DemitasseError
from demitasse.model_checks import (
    check_dim,
    check_offered_precision,
    check_settings,
    check_text_list,
    check_vectors,
    check_width,
    is_text_list,
)
from demitasse.model_encoder import IDENTITY, EncoderLink, load_backend
from demitasse.model_files import (
    check_model_target,
    fit_record,
    fitted_state_hash,
    hash_texts,
    hash_vectors,
    is_model_dir,
    model_config,
    model_parts,
    provenance_record,
    read_model_dir,
    rescoring_settings,
    write_model_dir,
)
from demitasse.persistence import CONFIG_FILE
from demitasse.pipeline import (
    RescoreStore,
    Stages,
    fit_quantizer,
    fit_rescore_store,
    search_prepared,
)
from demitasse.search import QuantizedIndex, Rescoring

__all__ = ["CompressedModel", "check_model_target", "is_model_dir"]


class CompressedModel:
    """Encoder → [layer cut + exit head] → compressor → quantiser, fitted and saved as one.

    Args:
        encoder: a model name (e.g. ``"all-MiniLM-L6-v2"``), a local model directory (a
            sentence-transformers model, a trained demitasse model with exit heads, or a
            static model), an already loaded :class:`~demitasse.encoders.Encoder`, or ``None``
            for a vectors-only model (vectors from an embedding API).
        layer: keep the encoder's blocks ``1..layer`` (``None``: all of them).
        compressor: a :class:`~demitasse.compress.Compressor`, a compressor name as the
            command line takes it (``"pca"``, ``"truncate"``, ``"smec"``, a preset such as
            ``"pca-abtt"``; see :func:`~demitasse.compress.compressor_choices`) built with
            ``dim`` and ``compressor_params``, or ``None`` (or ``"none"``: the encoder's
            vectors at full width).
        dim: the largest width the compressor is fitted for, when it is given by name.
        precision: the quantiser to calibrate at fit time, any registered precision:
            ``"float32"`` (none), ``"int8"``, ``"binary"``, or codebook codes such as
            ``"pq16"`` / ``"rq8"`` (those code all the fitted width at once).
            The calibration-free ones (float32, binary sign bits) are always available.
        normalize: L2-normalise float vectors after compression (quantised codes are computed
            from the unnormalised output, on which their calibration was fitted).
        quantizer_params: options of the quantiser calibrated at fit time, e.g.
            ``{"rotation": "itq"}`` for binary codes of rotated vectors, or
            ``{"calibration": "percentile"}`` for int8.
        batch_size: texts per encoder call.
        cache: let a transformer encoder read and write demitasse's embedding cache.
        rescore_factor: search the top ``k·F`` documents by their codes, then rescore them
            with the encoder's full output (``None``: the codes' ranking is final).
        rescore_precision: how the documents' full encoder output is kept for rescoring:
            ``"int8"`` (ranges fitted at fit time; the default with a factor) or ``"float32"``.
        backend: what runs a transformer encoder: ``"torch"``, ``"onnx"`` (ONNX Runtime,
            float32) or ``"onnx-int8"`` (int8 weights); the compressor and quantiser after it
            are the same. Default: torch, or the backend of an encoder object given.
            Settable (``model.backend = "onnx-int8"``); saved with the model.
    """

    def __init__(
        self,
        encoder: str | Path | Encoder | None = None,
        *,
        layer: int | None = None,
        compressor: Compressor | str | None = None,
        dim: int | None = None,
        precision: str = "float32",
        normalize: bool = False,
        batch_size: int = 64,
        cache: bool = True,
        compressor_params: dict[str, Any] | None = None,
        quantizer_params: dict[str, Any] | None = None,
        rescore_factor: float | None = None,
        rescore_precision: str | None = None,
        backend: str | None = None,
    ) -> None:
        self._link = EncoderLink(encoder, backend)
        self.rescore_factor, self.rescore_precision = rescoring_settings(
            rescore_factor, rescore_precision
        )
        precision = check_precision(precision)
        check_settings(layer, batch_size)
        #: Preset parameters set at fit time from the input width, and their compressor.
        self._auto_params: tuple[Compressor, dict[str, Any]] | None = None
        if isinstance(compressor, str):
            compressor, auto = named_compressor(compressor, dim, compressor_params or {})
            if auto and compressor is not None:
                self._auto_params = (compressor, auto)
        elif compressor_params:
            raise CompressorError("compressor_params apply only to a compressor given by name")
        if encoder is None and layer is not None:
            raise DemitasseError("a layer cut needs an encoder; a vectors-only model has none")
        if quantizer_params and precision == "float32":
            raise CompressorError("quantizer_params need a precision other than float32")
        # Built now so that a bad option fails here, not after the slow encoding in fit.
        make_quantizer(precision, **(quantizer_params or {}))
        self.quantizer_params = dict(quantizer_params or {})
        self.layer = layer
        self.compressor = compressor
        self.precision = precision
        self.normalize = bool(normalize)
        self.batch_size = batch_size
        self.cache = cache
        self.quantizer: Quantizer | None = None
        #: int8 ranges of the encoder's (normalised) full output, for the rescoring store.
        self.rescore_quantizer: Quantizer | None = None
        self.fit_info: dict[str, Any] | None = None
        self._input_dim: int | None = None
        if encoder is not None and not isinstance(encoder, str | Path):
            self._link.attach(encoder, getattr(encoder, "name", type(encoder).__name__), layer)
            self._input_dim = int(encoder.dim)

    # ---- what the model is -------------------------------------------------------------------

    @property
    def has_encoder(self) -> bool:
        return self._link.present

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first use (checked against the fingerprint saved at fit)."""
        if self._link.loaded is None:
            if self._link.ref is None:
                raise DemitasseError(
                    "this is a vectors-only model (no encoder): use transform(vectors), not "
                    "encode(texts)"
                )
            self._load_encoder()
        assert self._link.loaded is not None
        return self._link.loaded

    @property
    def backend(self) -> str:
        """What runs the transformer encoder: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``."""
        return self._link.backend

    @backend.setter
    def backend(self, backend: str) -> None:
        self._link.set_backend(backend)

    @property
    def encoder_source(self) -> str | None:
        """What the encoder loads from: a packaged or hub name, or an absolute directory."""
        return None if self._link.ref is None else str(self._link.ref["source"])

    @property
    def encoder_kind(self) -> str | None:
        """``"transformer"``, ``"static"`` or ``None`` (vectors only)."""
        if self._link.ref is None:
            return None
        if "kind" not in self._link.ref:
            self._load_encoder()
        return str(self._link.ref["kind"])

    @property
    def name(self) -> str:
        """The encoder's name, or ``"vectors"`` for a vectors-only model."""
        if self._link.ref is not None and "name" in self._link.ref:
            return str(self._link.ref["name"])
        if self.has_encoder:
            return str(self.encoder.name)
        return "vectors"

    @property
    def method(self) -> str:
        """The compressor's registry name, ``"none"`` without one."""
        return "none" if self.compressor is None else self.compressor.method

    @property
    def is_fitted(self) -> bool:
        return self.fit_info is not None

    @property
    def input_dim(self) -> int:
        """Width of the vectors the compressor takes (the encoder's width)."""
        if self._input_dim is None:
            if self.compressor is not None and self.compressor.is_fitted:
                return int(self.compressor.n_features_in_)
            self._input_dim = int(self.encoder.dim)
        return self._input_dim

    @property
    def output_dim(self) -> int:
        """The widest vectors the model produces."""
        self._check_fitted()
        if self.compressor is None:
            return self.input_dim
        return int(self.compressor.output_dim_)

    @property
    def dims(self) -> list[int]:
        """Every width ``encode``/``transform`` accepts, widest first."""
        top = self.output_dim
        return list(range(top, 0, -1)) if self._matryoshka else [top]

    @property
    def _matryoshka(self) -> bool:
        """Whether every width up to ``output_dim`` is available (not only the full one)."""
        return self.compressor is not None and self.compressor.matryoshka and self.output_dim > 1

    @property
    def precisions(self) -> list[str]:
        """Precisions ``encode``/``transform`` accept: the calibration-free ones (float32,
        binary) and the fitted one."""
        fitted = [] if self.quantizer is None else [self.quantizer.precision]
        return sort_precisions([*calibration_free_precisions(), *fitted])

    def __repr__(self) -> str:
        parts = [repr(self.name)]
        if self.layer is not None:
            parts.append(f"layer={self.layer}")
        if self.compressor is not None:
            parts.append(f"compressor={self.compressor!r}")
        if self.precision != "float32":
            parts.append(f"precision={self.precision!r}")
        if self.backend != "torch":
            parts.append(f"backend={self.backend!r}")
        if self.rescore_factor is not None:
            parts.append(f"rescore_factor={self.rescore_factor:g}")
            parts.append(f"rescore_precision={self.rescore_precision!r}")
        return f"CompressedModel({', '.join(parts)})"

    # ---- fit ---------------------------------------------------------------------------------

    def fit(
        self,
        texts: Sequence[str] | None = None,
        *,
        vectors: Any = None,
        fit_data: str | None = None,
        **supervision: Any,
    ) -> Self:
        """Fit the compressor and the quantiser on ``texts`` (encoded here) or ``vectors``.

        ``supervision`` takes the compressor's keywords (``pairs=(A, B), scores=s``;
        ``queries=Q, documents=D, relevance=r``; ``related_pairs=(A, B)``). With texts, any of
        them given as lists of strings is encoded by the model's encoder first.
        """
        if (texts is None) == (vectors is None):
            raise DataError("fit takes either texts or vectors, not both and not neither")
        started = time.perf_counter()
        if texts is not None:
            texts = check_text_list(texts, "fit texts")
            X = self.embed(texts)
            source, digest = "texts", hash_texts(texts)
        else:
            X = self._check_vectors(vectors)
            source, digest = "vectors", hash_vectors(X)
        if self.compressor is None and supervision:
            raise CompressorError("supervision needs a compressor to fit")
        supervision = {key: self._embed_supervision(value) for key, value in supervision.items()}
        if self.compressor is not None:
            if self._auto_params is not None and self._auto_params[0] is self.compressor:
                self.compressor.set_params(**resolve_auto(self._auto_params[1], X.shape[1]))
            self.compressor.fit(X, fit_data=fit_data, **supervision)
        self._input_dim = int(X.shape[1])
        self.quantizer = None
        if self.precision != "float32":
            reduced = self._compress(X, None)
            self.quantizer = fit_quantizer(self.precision, reduced, self.quantizer_params)
        self.rescore_quantizer = None
        if self.rescore_precision is not None:
            self.rescore_quantizer = fit_rescore_store(X, self.rescore_precision).quantizer
        self.fit_info = fit_record(source, digest, X.shape[0], fit_data, supervision, started)
        return self

    def _embed_supervision(self, value: Any) -> Any:
        if is_text_list(value):
            return self.embed(check_text_list(value, "supervision texts"))
        if isinstance(value, tuple | list) and value and all(is_text_list(v) for v in value):
            return tuple(self.embed(check_text_list(v, "supervision texts")) for v in value)
        return value

    # ---- encode / transform ------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The encoder's float32 vectors at the model's layer, before any compression."""
        texts = check_text_list(texts, "texts")
        return self.encoder.encode(texts, layer=self.layer, batch_size=self.batch_size)

    def encode(
        self,
        texts: Sequence[str],
        *,
        dim: int | None = None,
        precision: str = "float32",
        normalize: bool | None = None,
    ) -> np.ndarray:
        """Texts → float32 [n, dim] vectors, int8 [n, dim] codes, packed bits [n, dim/8] or
        codebook codes (uint8 [n, bytes])."""
        self._check_fitted()
        dim, precision = self._check_request(dim, precision)
        return self._finish(self.embed(texts), dim, precision, normalize)

    def transform(
        self,
        vectors: Any,
        *,
        dim: int | None = None,
        precision: str = "float32",
        normalize: bool | None = None,
    ) -> np.ndarray:
        """Vectors of the encoder's width (or from an API) → compressed vectors or codes."""
        self._check_fitted()
        dim, precision = self._check_request(dim, precision)
        return self._finish(self._check_vectors(vectors), dim, precision, normalize)

    def compress(self, vectors: np.ndarray, dim: int | None = None) -> np.ndarray:
        """Float32 compressed vectors of ``vectors`` (the encoder's width) at ``dim``, as the
        quantiser sees them (never normalised)."""
        self._check_fitted()
        dim, _ = self._check_request(dim, "float32")
        return self._compress(self._check_vectors(vectors), dim)

    def quantizer_for(self, precision: str) -> Quantizer:
        """The quantiser that makes (and scores) this model's codes at ``precision``."""
        self._check_fitted()
        _, precision = self._check_request(None, precision)
        if self.quantizer is not None and self.quantizer.precision == precision:
            return self.quantizer
        return make_quantizer(precision)  # a calibration-free one: nothing to fit

    def bytes_per_vector(self, dim: int | None = None, precision: str = "float32") -> int:
        dim, precision = self._check_request(dim, precision)
        return self.quantizer_for(precision).bytes_per_vector(dim)

    def stages(self, dim: int | None = None, precision: str | None = None) -> Stages:
        """The model's stages after the encoder at ``dim`` and ``precision`` (default: its
        full width and fitted precision), with its rescoring store when it rescores: what
        every encode, index and search of the model runs (:mod:`demitasse.pipeline`)."""
        self._check_fitted()
        dim, precision = self._check_request(
            dim, self.precision if precision is None else precision
        )
        store = self._rescore_store() if self.rescores else None
        return Stages(self.compressor, self.quantizer_for(precision), dim, store)

    def _finish(
        self, X: np.ndarray, dim: int, precision: str, normalize: bool | None
    ) -> np.ndarray:
        normalize = self.normalize if normalize is None else normalize
        return self.stages(dim, precision).encode(X, normalize=normalize)

    def _compress(self, X: np.ndarray, dim: int | None) -> np.ndarray:
        if dim is None:  # the compressor's full width (also while fitting the quantiser)
            dim = X.shape[1] if self.compressor is None else int(self.compressor.output_dim_)
        return Stages(self.compressor, make_quantizer("float32"), dim).compress(X)

    def _check_request(self, dim: int | None, precision: str) -> tuple[int, str]:
        precision = check_offered_precision(precision, self.precisions)
        if dim is None:
            return self.output_dim, precision
        check_dim(dim)
        width = check_width(
            dim,
            precision,
            output_dim=self.output_dim,
            matryoshka=self._matryoshka,
            quantizer=self.quantizer,
        )
        return width, precision

    def _check_vectors(self, vectors: Any) -> np.ndarray:
        return check_vectors(vectors, self._expected_width())

    def _expected_width(self) -> int | None:
        if self._input_dim is not None:
            return self._input_dim
        if self.compressor is not None and self.compressor.is_fitted:
            return int(self.compressor.n_features_in_)
        return int(self.encoder.dim) if self.has_encoder else None

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise CompressorError("this model is not fitted; call fit(texts) or fit(vectors=X)")

    # ---- search with rescoring ---------------------------------------------------------------

    @property
    def rescores(self) -> bool:
        """Whether the model's search rescores its first-stage candidates."""
        return self.rescore_factor is not None

    @property
    def rescoring(self) -> Rescoring | None:
        """How the model's search rescores (None: it does not), as the evaluation names it."""
        if self.rescore_factor is None or self.rescore_precision is None:
            return None
        return Rescoring(self.rescore_factor, self.rescore_precision, source="encoder")

    def encode_for_rescoring(self, texts: Sequence[str]) -> np.ndarray:
        """The documents' rescoring store: the encoder's full output, L2-normalised (the
        search compares by cosine), as int8 codes or float32 vectors [n, input_dim]."""
        self._check_rescoring()
        return self.transform_for_rescoring(self.embed(texts))

    def transform_for_rescoring(self, vectors: Any) -> np.ndarray:
        """:meth:`encode_for_rescoring` for vectors of the encoder's width (or from an API)."""
        self._check_rescoring()
        return self._rescore_store().keep(self._check_vectors(vectors))

    def rescore_bytes_per_vector(self) -> int:
        """Bytes per document kept for rescoring, besides the index's codes (0 without)."""
        if not self.rescores:
            return 0
        return self._rescore_store().bytes_per_vector(self.input_dim)

    def _rescore_store(self) -> RescoreStore:
        # At the model's rescoring precision: one fitted with int8 ranges may keep float32.
        return RescoreStore(self.rescore_quantizer if self.rescore_precision == "int8" else None)

    def search_index(
        self, corpus: Sequence[str] | np.ndarray, *, dim: int | None = None,
        precision: str | None = None,
    ) -> QuantizedIndex:  # fmt: skip
        """The documents indexed as this model searches them: its codes at ``dim`` and
        ``precision`` (default: its full width and fitted precision) held in memory, plus
        the rescoring store when the model rescores. ``corpus`` is texts, or vectors of the
        encoder's width. Query it with :meth:`search`."""
        stages = self.stages(dim, precision)
        return stages.index(self._vectors_of(corpus, "corpus"))

    def search_queries(
        self, queries: Sequence[str] | np.ndarray, *, dim: int | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """What :meth:`search` sends to an index: the queries' compressed float vectors (the
        first stage quantises them as the documents) and their normalised full encoder output
        for rescoring (None when the model does not rescore)."""
        stages = self.stages(dim, "float32")
        return stages.queries(self._vectors_of(queries, "queries"))

    def search(
        self,
        index: QuantizedIndex,
        queries: Sequence[str] | np.ndarray,
        k: int = 10,
        *,
        rescore_factor: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` documents of ``index`` (from :meth:`search_index`) for each query
        (texts, or vectors of the encoder's width): ``(scores, rows)``, best first.
        ``rescore_factor`` overrides the model's factor for this search."""
        first_stage, rescore_queries = self.search_queries(queries, dim=index.n_bits)
        if rescore_factor is not None:
            self._check_rescoring()
        factor = self.rescore_factor if rescore_factor is None else rescore_factor
        return search_prepared(index, first_stage, rescore_queries, k, factor)

    def _vectors_of(self, items: Sequence[str] | np.ndarray, what: str) -> np.ndarray:
        if isinstance(items, np.ndarray):
            return self._check_vectors(items)
        return self.embed(check_text_list(items, what))

    def _check_rescoring(self) -> None:
        self._check_fitted()
        if not self.rescores:
            raise CompressorError(
                "this model does not rescore; create it with rescore_factor=F to keep the "
                "encoder's full output for rescoring"
            )

    # ---- encoder -----------------------------------------------------------------------------

    def _load_encoder(self) -> None:
        # The source, or the model directory's ONNX graph (see demitasse.model_encoder).
        self._input_dim = int(self._link.load(self.layer, self.cache).dim)

    def _encoder_record(self) -> dict[str, Any]:
        """What identifies the encoder (see :mod:`demitasse.model_encoder`), checked against
        the encoder itself: it is loaded first if it is not yet."""
        if self._link.loaded is None:
            self._load_encoder()
        assert self._link.ref is not None
        return self._link.ref

    def provenance(self, dim: int | None = None, precision: str | None = None) -> dict[str, Any]:
        """What identifies this model's output at ``dim`` and ``precision``: the encoder (name,
        kind and content fingerprint), the layer cut, the compressor with a hash of its fitted
        state, the width, the precision and its calibration, normalisation and the demitasse
        version. Stores of vectors keep it and compare it (:mod:`demitasse.provenance`)."""
        dim, precision = self._check_request(dim, precision or self.precision)
        encoder = None
        if self.has_encoder:
            ref = self._encoder_record()
            encoder = {key: ref.get(key) for key in IDENTITY}
        return provenance_record(self, encoder, dim, precision)

    def state_hash(self) -> str:
        """A content hash of everything fitted (compressor, quantisers, rescoring ranges) and
        of the settings that change vectors: equal hashes give equal outputs."""
        self._check_fitted()
        return fitted_state_hash(self)

    # ---- persistence -------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """What ``save`` writes to config.json (see :mod:`demitasse.model_files`)."""
        self._check_fitted()
        encoder = self._encoder_record() if self.has_encoder else None
        return model_config(self, encoder, self._matryoshka)

    def save(self, path: str | Path, *, onnx: bool = False) -> Path:
        """Write the model directory atomically: config.json, compressor/, quantizer/,
        rescore/ (the int8 ranges of the rescoring store); with ``onnx``, encoder/: the
        transformer encoder as an ONNX graph cut at the layer, which ``load`` runs without
        torch (float32, and int8 for ``onnx-int8``; writing it needs torch)."""
        config = self.config()  # loads the encoder
        graph = partial(self._link.write_graph, self.layer) if onnx else None
        return write_model_dir(path, config, model_parts(self), graph)

    @classmethod
    def load(
        cls, path: str | Path, *, cache: bool = True, backend: str | None = None
    ) -> CompressedModel:
        """Read a model directory (or a bare saved compressor, as a vectors-only model);
        ``backend`` replaces the saved one. An ONNX graph carried in it runs for ``onnx``/
        ``onnx-int8``, or for a saved ``torch`` without torch (:mod:`demitasse.model_encoder`)."""
        saved = read_model_dir(path)
        model = cls(None, compressor=saved.compressor, cache=cache, **saved.settings)
        model.layer = saved.layer
        model._link.ref, model._link.graph = saved.encoder, saved.graph
        try:
            model.backend = saved.backend
        except DemitasseError as exc:
            raise CompressorError(f"invalid {CONFIG_FILE} in {saved.path}: {exc}") from None
        model._input_dim = saved.input_dim
        model.quantizer = saved.quantizer
        if saved.quantizer is not None:
            model.quantizer_params = saved.quantizer.get_params()
        model.rescore_factor = saved.rescore_factor
        model.rescore_precision = saved.rescore_precision
        model.rescore_quantizer = saved.rescore_quantizer
        model.fit_info = saved.fit_info
        model.backend = load_backend(backend, saved.backend, saved.graph)
        return model
