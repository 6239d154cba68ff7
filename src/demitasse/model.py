# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""The compressed model: encoder (cut after a layer, or a static model, or none for vectors
from an API) → compressor → quantiser, fitted and saved as one object.

``encode(texts)`` / ``transform(vectors)`` pick the width and precision at call time within
what the model was fitted for (by default its own), as ``SentenceTransformer(name,
truncate_dim=64).encode(texts, precision="int8")`` does. What the model computes is its
:class:`Recipe`; how it runs, its :class:`RuntimeSettings`. With ``rescore_factor=F`` its
search rescores the codes' top ``k·F`` with the encoder's full output (kept as int8 or
float32): ``search_index(corpus)`` and ``search(index, queries)``, as evaluation, serving and
the vector stores search. ``save``/``load`` write and read one directory
(:mod:`demitasse.model_files`); a changed encoder is refused (:mod:`demitasse.model_encoder`);
:mod:`demitasse.model_checks` checks what the model is given.
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
from demitasse.errors import (
    DataError,
    DemitasseError,
    ModelNotFoundError,
    NotFittedError,
    ParameterError,
    SavedStateError,
)
from demitasse.model_checks import (
    check_dim,
    check_fit_width,
    check_offered_precision,
    check_settings,
    check_text_list,
    check_vectors,
    check_width,
    is_text_list,
)
from demitasse.model_encoder import EncoderLink, encoder_identity, load_backend
from demitasse.model_files import (
    check_model_target,
    fit_record,
    fitted_state_hash,
    hash_texts,
    hash_vectors,
    holds_saved_output,
    is_model_dir,
    is_saved_compressor,
    model_config,
    model_parts,
    provenance_record,
    read_model_dir,
    rescoring_settings,
    saved_rescoring,
    write_model_dir,
)
from demitasse.model_recipe import Recipe, RuntimeSettings
from demitasse.persistence import CONFIG_FILE
from demitasse.pipeline import (
    RescoreStore,
    Stages,
    fit_quantizer,
    fit_rescore_store,
    search_prepared,
)
from demitasse.search import QuantizedIndex, Rescoring

__all__ = [
    "CompressedModel",
    "Recipe",
    "RuntimeSettings",
    "check_model_target",
    "encoder_vectors",
    "is_model_dir",
    "open_model",
]


class CompressedModel:
    """Encoder → [layer cut + exit head] → compressor → quantiser, fitted and saved as one.

    Args:
        encoder: a model name (e.g. ``"all-MiniLM-L6-v2"``), a local model directory (a
            sentence-transformers model, a trained demitasse model with exit heads, or a
            static model), an already loaded :class:`~demitasse.encoders.Encoder`, or ``None``
            for a vectors-only model (vectors from an embedding API).
        layer: keep the encoder's blocks ``1..layer`` (``None``: all of them).
        compressor: a :class:`~demitasse.compress.Compressor`, or a name of
            :func:`~demitasse.compress.compressor_choices` (``"pca"``, ``"pca-abtt"``, …)
            built with ``dim`` and ``compressor_params``, or ``None`` / ``"none"``.
        dim: the largest width the compressor is fitted for, when it is given by name.
        precision: the quantiser to calibrate at fit time (``"float32"``: none; ``"int8"``,
            ``"binary"``, codebook codes ``"pq16"`` / ``"rq8"``); float32 and binary sign
            bits are always available too.
        normalize: L2-normalise float vectors after compression (codes never are).
        quantizer_params: options of that quantiser, e.g. ``{"rotation": "itq"}`` for binary
            codes of rotated vectors, or ``{"calibration": "percentile"}`` for int8.
        batch_size: texts per encoder call.
        cache: let a transformer encoder read and write demitasse's embedding cache.
        rescore_factor: search the top ``k·F`` documents by their codes, then rescore them
            with the encoder's full output (``None``: the codes' ranking is final).
        rescore_precision: how the documents' full encoder output is kept for rescoring:
            ``"int8"`` (ranges fitted at fit time; the default with a factor) or ``"float32"``.
        backend: what runs a transformer encoder: ``"torch"``, ``"onnx"`` (ONNX Runtime,
            float32) or ``"onnx-int8"`` (int8 weights); the compressor and quantiser after it
            are the same. Default: torch, or the backend of an encoder object given.
            Settable (``model.settings.backend = "onnx-int8"``); saved with the model.

    What the model computes is ``model.recipe``; how it runs, ``model.settings``; what was
    fitted, ``compressor``, ``quantizer`` and ``fit_info``.
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
        self._rescore_factor, self._rescore_precision = rescoring_settings(
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
            raise ParameterError("compressor_params apply only to a compressor given by name")
        if encoder is None and layer is not None:
            raise DemitasseError("a layer cut needs an encoder; a vectors-only model has none")
        if quantizer_params and precision == "float32":
            raise ParameterError("quantizer_params need a precision other than float32")
        # Built now so that a bad option fails here, not after the slow encoding in fit.
        make_quantizer(precision, **(quantizer_params or {}))
        self._quantizer_params = dict(quantizer_params or {})
        self._layer = layer
        self._precision = precision
        self._normalize = bool(normalize)
        #: How the model runs (batch size, cache, backend): :class:`RuntimeSettings`.
        self.settings = RuntimeSettings(self._link, batch_size, cache)
        #: The fitted compressor (None: the encoder's vectors at full width).
        self.compressor: Compressor | None = compressor
        #: The quantiser calibrated at fit time (None: float32, nothing to calibrate).
        self.quantizer: Quantizer | None = None
        #: int8 ranges of the encoder's (normalised) full output, for the rescoring store.
        self._rescore_quantizer: Quantizer | None = None
        #: How and on what the model was fitted (None: not yet).
        self.fit_info: dict[str, Any] | None = None
        self._input_dim: int | None = None
        if encoder is not None and not isinstance(encoder, str | Path):
            self._link.attach(encoder, getattr(encoder, "name", type(encoder).__name__), layer)
            self._input_dim = int(encoder.dim)

    # ---- what the model is -------------------------------------------------------------------

    @property
    def recipe(self) -> Recipe:
        """What the model computes (:class:`Recipe`); nothing is loaded to say it."""
        ref = self._link.ref
        return Recipe(
            encoder=None if ref is None else str(ref["source"]),
            encoder_kind=None if ref is None or "kind" not in ref else str(ref["kind"]),
            name="vectors" if ref is None else str(ref.get("name", ref["source"])),
            input_dim=self._known_input_dim(),
            layer=self._layer,
            compressor="none" if self.compressor is None else self.compressor.method,
            precision=self._precision,
            normalize=self._normalize,
            quantizer_params=dict(self._quantizer_params),
            rescore_factor=self._rescore_factor,
            rescore_precision=self._rescore_precision,
        )

    def load_encoder(self) -> Encoder:
        """The encoder, loaded on first call (checked against the fingerprint saved at fit):
        the source, or the model directory's ONNX graph (:mod:`demitasse.model_encoder`)."""
        if self._link.loaded is None:
            if self._link.ref is None:
                raise DemitasseError(
                    "this is a vectors-only model (no encoder): use transform(vectors), not "
                    "encode(texts)"
                )
            self._input_dim = int(self._link.load(self._layer, self.settings.cache).dim)
        assert self._link.loaded is not None
        return self._link.loaded

    @property
    def is_fitted(self) -> bool:
        return self.fit_info is not None

    @property
    def output_dim(self) -> int:
        """The widest vectors the model produces."""
        self._check_fitted()
        if self.compressor is None:
            return self._input_width()
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

    @property
    def rescoring(self) -> Rescoring | None:
        """How the model's search rescores (None: it does not), as the evaluation names it."""
        if self._rescore_factor is None or self._rescore_precision is None:
            return None
        return Rescoring(self._rescore_factor, self._rescore_precision, source="encoder")

    def __repr__(self) -> str:
        recipe = self.recipe
        parts = [repr(recipe.name)]
        if recipe.layer is not None:
            parts.append(f"layer={recipe.layer}")
        if self.compressor is not None:
            parts.append(f"compressor={self.compressor!r}")
        if recipe.precision != "float32":
            parts.append(f"precision={recipe.precision!r}")
        if self.settings.backend != "torch":
            parts.append(f"backend={self.settings.backend!r}")
        if recipe.rescore_factor is not None:
            parts.append(f"rescore_factor={recipe.rescore_factor:g}")
            parts.append(f"rescore_precision={recipe.rescore_precision!r}")
        return f"CompressedModel({', '.join(parts)})"

    # ---- fit ---------------------------------------------------------------------------------

    def fit(
        self,
        texts: Sequence[str] | None = None,
        *,
        vectors: Any = None,
        data_label: str | None = None,
        **supervision: Any,
    ) -> Self:
        """Fit the compressor and the quantiser on ``texts`` (encoded here) or ``vectors``.

        ``data_label`` names the data for the records (e.g. ``"scifact-corpus"``): a label
        kept in ``fit_info`` and the compressor's provenance, not data. ``supervision`` takes
        the compressor's keywords (``pairs=(A, B), scores=s``; ``queries=Q, documents=D,
        relevance=r``; ``related_pairs=(A, B)``). With texts, any of them given as lists of
        strings is encoded by the model's encoder first.
        """
        if (texts is None) == (vectors is None):
            raise DataError("fit takes either texts or vectors, not both and not neither")
        started = time.perf_counter()
        if texts is not None:
            texts = check_text_list(texts, "fit texts")
            X = self._embed(texts)
            source, digest = "texts", hash_texts(texts)
        else:
            X = self._check_vectors(vectors)
            source, digest = "vectors", hash_vectors(X)
        if self.compressor is None and supervision:
            raise ParameterError("supervision needs a compressor to fit")
        supervision = {key: self._embed_supervision(value) for key, value in supervision.items()}
        if self.compressor is not None:
            if self._auto_params is not None and self._auto_params[0] is self.compressor:
                self.compressor.set_params(**resolve_auto(self._auto_params[1], X.shape[1]))
            check_fit_width(self.compressor, X)
            self.compressor.fit(X, fit_data=data_label, **supervision)
        self._input_dim = int(X.shape[1])
        self.quantizer = None
        if self._precision != "float32":
            reduced = self._compress(X, None)
            self.quantizer = fit_quantizer(self._precision, reduced, self._quantizer_params)
        self._rescore_quantizer = None
        if self._rescore_precision is not None:
            self._rescore_quantizer = fit_rescore_store(X, self._rescore_precision).quantizer
        self.fit_info = fit_record(source, digest, X.shape[0], data_label, supervision, started)
        return self

    def _embed_supervision(self, value: Any) -> Any:
        if is_text_list(value):
            return self._embed(check_text_list(value, "supervision texts"))
        if isinstance(value, tuple | list) and value and all(is_text_list(v) for v in value):
            return tuple(self._embed(check_text_list(v, "supervision texts")) for v in value)
        return value

    # ---- encode / transform ------------------------------------------------------------------

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        return encoder_vectors(self, texts)

    def encode(
        self,
        texts: Sequence[str],
        *,
        dim: int | None = None,
        precision: str | None = None,
        normalize: bool | None = None,
    ) -> np.ndarray:
        """Texts → float32 [n, dim] vectors, int8 [n, dim] codes, packed bits [n, dim/8] or
        codebook codes (uint8 [n, bytes]); by default at the model's own width and precision
        (``encode(texts, precision="float32")`` for float vectors of a model with codes)."""
        self._check_fitted()
        stages = self.stages(dim, precision)
        return self._finish(stages, self._embed(texts), normalize)

    def transform(
        self,
        vectors: Any,
        *,
        dim: int | None = None,
        precision: str | None = None,
        normalize: bool | None = None,
    ) -> np.ndarray:
        """Vectors of the encoder's width (or from an API) → compressed vectors or codes, as
        :meth:`encode` makes them from texts."""
        self._check_fitted()
        stages = self.stages(dim, precision)
        return self._finish(stages, self._check_vectors(vectors), normalize)

    def bytes_per_vector(self, dim: int | None = None, precision: str | None = None) -> int:
        """Bytes of one document's code at ``dim`` and ``precision`` (default: the model's),
        without the rescoring store (``stages(...).rescore_store``, counted apart)."""
        return self.stages(dim, precision).bytes_per_vector()

    def stages(self, dim: int | None = None, precision: str | None = None) -> Stages:
        """The model's stages after the encoder at ``dim`` and ``precision`` (default: its
        full width and fitted precision), with its rescoring store when it rescores: what
        every encode, index and search of the model runs (:mod:`demitasse.pipeline`)."""
        self._check_fitted()
        dim, precision = self._check_request(dim, precision)
        if self.quantizer is not None and self.quantizer.precision == precision:
            quantizer = self.quantizer
        else:
            quantizer = make_quantizer(precision)  # a calibration-free one: nothing to fit
        store = self._rescore_store() if self._rescore_factor is not None else None
        return Stages(self.compressor, quantizer, dim, store)

    def _finish(self, stages: Stages, X: np.ndarray, normalize: bool | None) -> np.ndarray:
        normalize = self._normalize if normalize is None else normalize
        return stages.encode(X, normalize=normalize)

    def _compress(self, X: np.ndarray, dim: int | None) -> np.ndarray:
        if dim is None:  # the compressor's full width (also while fitting the quantiser)
            dim = X.shape[1] if self.compressor is None else int(self.compressor.output_dim_)
        return Stages(self.compressor, make_quantizer("float32"), dim).compress(X)

    def _check_request(self, dim: int | None, precision: str | None) -> tuple[int, str]:
        precision = self._precision if precision is None else precision
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
        width = self._known_input_dim()
        if width is None and self._link.present:
            width = self._input_width()
        return check_vectors(vectors, width)

    def _known_input_dim(self) -> int | None:
        """The width of the vectors the compressor takes, where known without loading."""
        if self._input_dim is not None:
            return self._input_dim
        if self.compressor is not None and self.compressor.is_fitted:
            return int(self.compressor.n_features_in_)
        if self._link.ref is not None and "dim" in self._link.ref:
            return int(self._link.ref["dim"])
        return None

    def _input_width(self) -> int:
        """The width of the vectors the compressor takes, loading the encoder if need be."""
        known = self._known_input_dim()
        return int(self.load_encoder().dim) if known is None else known

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError("this model is not fitted; call fit(texts) or fit(vectors=X)")

    # ---- search with rescoring ---------------------------------------------------------------

    def _rescore_store(self) -> RescoreStore:
        # At the model's rescoring precision: one fitted with int8 ranges may keep float32.
        return RescoreStore(self._rescore_quantizer if self._rescore_precision == "int8" else None)

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
        """What :meth:`search` sends to an index of width ``dim``: the queries' compressed
        float vectors (the first stage scores them against the documents' codes) and their
        normalised full encoder output for rescoring (None when the model does not rescore).
        For searching codes kept elsewhere (a LanceDB table) as :meth:`search` would."""
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
        factor = self._rescore_factor if rescore_factor is None else rescore_factor
        return search_prepared(index, first_stage, rescore_queries, k, factor)

    def _vectors_of(self, items: Sequence[str] | np.ndarray, what: str) -> np.ndarray:
        if isinstance(items, np.ndarray):
            return self._check_vectors(items)
        return self._embed(check_text_list(items, what))

    def _check_rescoring(self) -> None:
        self._check_fitted()
        if self._rescore_factor is None:
            raise ParameterError(
                "this model does not rescore; create it with rescore_factor=F to keep the "
                "encoder's full output for rescoring"
            )

    # ---- records -----------------------------------------------------------------------------

    def _encoder_identity(self) -> dict[str, Any] | None:
        """What identifies the encoder (see :mod:`demitasse.model_encoder`), checked against
        the encoder itself: it is loaded first if it is not yet (None: vectors only)."""
        if not self._link.present:
            return None
        self.load_encoder()
        assert self._link.ref is not None
        return self._link.ref

    def _parts(self) -> dict[str, Any]:
        return model_parts(self.compressor, self.quantizer, self._rescore_quantizer)

    def provenance(self, dim: int | None = None, precision: str | None = None) -> dict[str, Any]:
        """What identifies this model's output at ``dim`` and ``precision``: the encoder (name,
        kind and content fingerprint), the layer cut, the compressor with a hash of its fitted
        state, the width, the precision and its calibration, normalisation and the demitasse
        version. Stores of vectors keep it and compare it (:mod:`demitasse.provenance`)."""
        dim, precision = self._check_request(dim, precision)
        ref = self._encoder_identity()
        encoder = None if ref is None else encoder_identity(ref, self.settings.backend)
        return provenance_record(self.recipe, self.state_hash(), encoder, dim, precision)

    def state_hash(self) -> str:
        """A content hash of everything fitted (compressor, quantisers, rescoring ranges) and
        of the settings that change vectors: equal hashes give equal outputs. Computed in
        memory from each part's parameters and arrays."""
        self._check_fitted()
        return fitted_state_hash(self.recipe, self._parts())

    # ---- persistence -------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """What ``save`` writes to config.json (see :mod:`demitasse.model_files`); loads the
        encoder, whose identity it records."""
        self._check_fitted()
        encoder = self._encoder_identity()
        return model_config(
            self.recipe,
            self.settings,
            encoder,
            self.output_dim,
            self.precisions,
            self._matryoshka,
            self.fit_info,
            has_rescore_ranges=self._rescore_quantizer is not None,
        )

    def save(self, path: str | Path, *, onnx: bool = False) -> Path:
        """Write the model directory atomically: config.json, compressor/, quantizer/,
        rescore/ (the int8 ranges of the rescoring store); with ``onnx``, encoder/: the
        transformer encoder as an ONNX graph cut at the layer, which ``load`` runs without
        torch (float32, and int8 for ``onnx-int8``; writing it needs torch)."""
        config = self.config()  # loads the encoder
        graph = partial(self._link.write_graph, self._layer) if onnx else None
        return write_model_dir(path, config, self._parts(), graph)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        cache: bool = True,
        backend: str | None = None,
        rescore_factor: float | None = None,
        rescore_precision: str | None = None,
    ) -> CompressedModel:
        """Read a model directory (or a bare saved compressor, as a vectors-only model);
        ``backend`` replaces the saved one. An ONNX graph carried in it runs for ``onnx``/
        ``onnx-int8``, or for a saved ``torch`` without torch (:mod:`demitasse.model_encoder`).
        ``rescore_factor`` (with ``rescore_precision``, default the saved one or int8)
        searches with that rescoring instead of the saved one."""
        saved = read_model_dir(path)
        model = cls(None, compressor=saved.compressor, cache=cache, **saved.settings)
        model._layer = saved.layer
        model._link.ref, model._link.graph = saved.encoder, saved.graph
        try:
            model.settings.backend = saved.backend
        except DemitasseError as exc:
            raise SavedStateError(f"invalid {CONFIG_FILE} in {saved.path}: {exc}") from None
        model._input_dim = saved.input_dim
        model.quantizer = saved.quantizer
        if saved.quantizer is not None:
            model._quantizer_params = saved.quantizer.get_params()
        model._rescore_factor, model._rescore_precision = saved_rescoring(
            saved, rescore_factor, rescore_precision
        )
        model._rescore_quantizer = saved.rescore_quantizer
        model.fit_info = saved.fit_info
        model.settings.backend = load_backend(backend, saved.backend, saved.graph)
        return model


def encoder_vectors(model: CompressedModel, texts: Sequence[str]) -> np.ndarray:
    """``model``'s encoder output at its layer, what ``transform`` takes: ``model.encode(t)``
    is ``model.transform(encoder_vectors(model, t))``."""
    texts = check_text_list(texts, "texts")
    encoder = model.load_encoder()
    return encoder.encode(texts, layer=model.recipe.layer, batch_size=model.settings.batch_size)


def open_model(
    source: str | Path, *, cache: bool = True, backend: str | None = None
) -> CompressedModel:
    """What every command opens: a model directory, a saved compressor (vectors-only), or an
    encoder by name or directory as published (no compressor, float32, full width)."""
    if is_model_dir(source) or is_saved_compressor(source) or holds_saved_output(source):
        return CompressedModel.load(source, cache=cache, backend=backend)
    model = CompressedModel(str(source), cache=cache, backend=backend)
    try:
        # Fitted on one text: without a compressor there is nothing to learn.
        return model.fit(["an encoder as it is"], data_label="none: the encoder as published")
    except ModelNotFoundError as exc:
        raise ModelNotFoundError(f"no saved model at {source}, and {exc}") from None
