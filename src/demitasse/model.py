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

``save(dir)`` writes one directory (JSON + safetensors, atomically) recording how and on what
the model was fitted; ``CompressedModel.load(dir)`` reads it back, and refuses an encoder whose
files changed since the fit, since its vectors would no longer be the ones the compressor saw.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import numpy as np

from demitasse.arrays import check_finite
from demitasse.compress import (
    Compressor,
    Quantizer,
    check_precision,
    load_compressor,
    load_quantizer,
    make_compressor,
    make_quantizer,
    resolve_compressor,
    sort_precisions,
)
from demitasse.compress.vocabulary import (
    accepts_width,
    auto_params,
    calibration_free_precisions,
    resolve_auto,
)
from demitasse.data import check_texts
from demitasse.encoders.base import Encoder, check_backend
from demitasse.errors import CompressorError, DataError, DemitasseError
from demitasse.io import MARKER, atomic_directory, check_directory_target
from demitasse.persistence import CONFIG_FILE, demitasse_version, read_config
from demitasse.pipeline import (
    RescoreStore,
    Stages,
    fit_quantizer,
    fit_rescore_store,
    search_prepared,
)
from demitasse.search import RESCORE_PRECISIONS, QuantizedIndex, Rescoring

MODEL_KIND = "demitasse-model"
#: 2 added rescoring; a model without it is still written as 1, so older demitasse reads it.
FORMAT_VERSION = 2
COMPRESSOR_DIR = "compressor"
QUANTIZER_DIR = "quantizer"
RESCORE_DIR = "rescore"


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
        self._backend = _initial_backend(encoder, backend)
        self.rescore_factor, self.rescore_precision = _rescoring_settings(
            rescore_factor, rescore_precision
        )
        precision = check_precision(precision)
        if layer is not None and (
            isinstance(layer, bool) or not isinstance(layer, int) or layer < 1
        ):
            raise DemitasseError(f"layer must be a positive integer, got {layer!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise DemitasseError(f"batch_size must be a positive integer, got {batch_size!r}")
        #: Preset parameters set at fit time from the input width, and their compressor.
        self._auto_params: tuple[Compressor, dict[str, Any]] | None = None
        if isinstance(compressor, str):
            compressor = self._named_compressor(compressor, dim, compressor_params or {})
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
        self._encoder: Encoder | None = None
        self._encoder_ref: dict[str, Any] | None = None
        if encoder is None:
            self._input_dim: int | None = None
        elif isinstance(encoder, str | Path):
            self._encoder_ref = {"source": _source_of(encoder)}
            self._input_dim = None
        else:
            self._attach(encoder, {"source": getattr(encoder, "name", type(encoder).__name__)})

    def _named_compressor(
        self, name: str, dim: int | None, params: dict[str, Any]
    ) -> Compressor | None:
        method, preset = resolve_compressor(name)
        if method is None:
            if params:
                raise CompressorError("compressor_params need a compressor; 'none' has none")
            return None
        params = {**preset, **params}
        auto = auto_params(params)
        concrete = {key: value for key, value in params.items() if key not in auto}
        compressor = make_compressor(method, dim=dim, **concrete)
        if auto:
            resolve_auto(auto, 100)  # one that cannot be resolved fails now
            self._auto_params = (compressor, auto)
        return compressor

    # ---- what the model is -------------------------------------------------------------------

    @property
    def has_encoder(self) -> bool:
        return self._encoder is not None or self._encoder_ref is not None

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first use (checked against the fingerprint saved at fit)."""
        if self._encoder is None:
            if self._encoder_ref is None:
                raise DemitasseError(
                    "this is a vectors-only model (no encoder): use transform(vectors), not "
                    "encode(texts)"
                )
            self._load_encoder()
        assert self._encoder is not None
        return self._encoder

    @property
    def backend(self) -> str:
        """What runs the transformer encoder: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``."""
        return self._backend

    @backend.setter
    def backend(self, backend: str) -> None:
        check_backend(backend)
        if backend != "torch" and not self.has_encoder:
            raise DemitasseError(f"the {backend} backend needs an encoder; this is a "
                                 "vectors-only model")  # fmt: skip
        if self._encoder is not None and backend != self._backend:
            if not hasattr(self._encoder, "backend"):
                raise DemitasseError(
                    f"the {backend} backend applies to transformer encoders; {self.name} is not one"
                )
            self._encoder.backend = backend  # type: ignore[attr-defined]
        self._backend = backend

    @property
    def encoder_source(self) -> str | None:
        """What the encoder loads from: a packaged or hub name, or an absolute directory."""
        return None if self._encoder_ref is None else str(self._encoder_ref["source"])

    @property
    def encoder_kind(self) -> str | None:
        """``"transformer"``, ``"static"`` or ``None`` (vectors only)."""
        if self._encoder_ref is None:
            return None
        if "kind" not in self._encoder_ref:
            self._load_encoder()
        return str(self._encoder_ref["kind"])

    @property
    def name(self) -> str:
        """The encoder's name, or ``"vectors"`` for a vectors-only model."""
        if self._encoder_ref is not None and "name" in self._encoder_ref:
            return str(self._encoder_ref["name"])
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
            texts = _check_texts(texts, "fit texts")
            X = self.embed(texts)
            source, digest = "texts", _hash_texts(texts)
        else:
            X = self._check_vectors(vectors)
            source, digest = "vectors", _hash_vectors(X)
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
        self.fit_info = {
            "source": source,
            "fit_data": fit_data,
            "n_samples": int(X.shape[0]),
            "sha256": digest,
            "supervision": sorted(supervision),
            "seconds": round(time.perf_counter() - started, 3),
            "fitted_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "demitasse_version": demitasse_version(),
        }
        return self

    def _embed_supervision(self, value: Any) -> Any:
        if _is_text_list(value):
            return self.embed(_check_texts(value, "supervision texts"))
        if isinstance(value, tuple | list) and value and all(_is_text_list(v) for v in value):
            return tuple(self.embed(_check_texts(v, "supervision texts")) for v in value)
        return value

    # ---- encode / transform ------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The encoder's float32 vectors at the model's layer, before any compression."""
        texts = _check_texts(texts, "texts")
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
        store = None
        if self.rescores:
            store = RescoreStore(self.rescore_quantizer)
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
        precision = check_precision(precision)
        if precision not in self.precisions:
            fitted = ", ".join(self.precisions)
            raise CompressorError(
                f"precision {precision!r} is not available: this model was fitted for "
                f"{fitted} (fit with precision={precision!r} to calibrate it)"
            )
        if dim is None:
            return self.output_dim, precision
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 1:
            raise CompressorError(f"dim must be a positive integer, got {dim!r}")
        # Not ``dim in self.dims``: a corrupt config may claim a width of 10**12.
        if dim > self.output_dim or (dim != self.output_dim and not self._matryoshka):
            supported = f"1..{self.output_dim}" if self._matryoshka else str(self.output_dim)
            raise CompressorError(
                f"dim {dim} is not available: this model produces {supported} dimensions"
            )
        quantizer = self.quantizer
        if (
            quantizer is not None
            and precision == quantizer.precision
            and not accepts_width(quantizer, dim)
        ):
            rotation = getattr(quantizer, "rotation", "none")
            what = f"{quantizer.family} codes span"
            if rotation != "none":
                what = f"{rotation} rotation of the {quantizer.family} codes spans"
            raise CompressorError(f"dim {dim} is not available at precision {precision}: the "
                                  f"{what} all {self.output_dim} dimensions")  # fmt: skip
        return int(dim), precision

    def _check_vectors(self, vectors: Any) -> np.ndarray:
        if isinstance(vectors, str | bytes) or vectors is None:
            raise DataError("vectors must be a 2-D array of numbers")
        try:
            X = np.asarray(vectors)
        except (TypeError, ValueError) as exc:
            raise DataError(f"vectors must be a 2-D array of numbers ({exc})") from None
        if X.ndim != 2 or X.shape[0] == 0 or X.dtype.kind not in "fiu":
            raise DataError(f"vectors must be a non-empty 2-D array of numbers, got {X.shape}")
        expected = self._expected_width()
        if expected is not None and X.shape[1] != expected:
            raise DataError(f"vectors have {X.shape[1]} dimensions but this model takes {expected}")
        # NaN, inf, or a float64 too large for float32 (hashing and compressing cast to it).
        check_finite(X, name="vectors")
        return X

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
        return RescoreStore(self.rescore_quantizer).keep(self._check_vectors(vectors))

    def rescore_bytes_per_vector(self) -> int:
        """Bytes per document kept for rescoring, besides the index's codes (0 without)."""
        if not self.rescores:
            return 0
        return RescoreStore(self.rescore_quantizer).bytes_per_vector(self.input_dim)

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
        return self.embed(_check_texts(items, what))

    def _check_rescoring(self) -> None:
        self._check_fitted()
        if not self.rescores:
            raise CompressorError(
                "this model does not rescore; create it with rescore_factor=F to keep the "
                "encoder's full output for rescoring"
            )

    # ---- encoder -----------------------------------------------------------------------------

    def _attach(self, encoder: Encoder, ref: dict[str, Any]) -> None:
        if self.layer is not None and not 1 <= self.layer <= encoder.num_layers:
            raise DemitasseError(
                f"layer {self.layer} does not exist: {encoder.name} has layers "
                f"1..{encoder.num_layers}"
            )
        if getattr(encoder, "backend", "torch") != self._backend:
            if not hasattr(encoder, "backend"):
                raise DemitasseError(f"the {self._backend} backend applies to transformer "
                                     f"encoders; {encoder.name} is not one")  # fmt: skip
            encoder.backend = self._backend  # type: ignore[attr-defined]
        self._encoder = encoder
        self._input_dim = int(encoder.dim)
        path = getattr(encoder, "path", None)
        self._encoder_ref = {
            **ref,
            "kind": "static" if type(encoder).__name__ == "StaticModel" else "transformer",
            "name": encoder.name,
            "dim": int(encoder.dim),
            "num_layers": int(encoder.num_layers),
            "fingerprint": _fingerprint(Path(path)) if path is not None else None,
        }

    def _load_encoder(self) -> None:
        from demitasse.loading import load_encoder

        assert self._encoder_ref is not None
        saved = dict(self._encoder_ref)
        encoder = load_encoder(saved["source"], cache=self.cache, backend=self._backend)
        self._attach(encoder, {"source": saved["source"]})
        now = self._encoder_ref
        for key in ("fingerprint", "dim", "num_layers"):
            if saved.get(key) is not None and now.get(key) != saved[key]:
                raise DemitasseError(
                    f"the encoder {saved['source']} differs from the one this model was fitted "
                    f"with ({key} {now.get(key)} != {saved[key]}); refit the model"
                )

    def provenance(self, dim: int | None = None, precision: str | None = None) -> dict[str, Any]:
        """What identifies this model's output at ``dim`` and ``precision``: the encoder (name,
        kind and content fingerprint), the layer cut, the compressor with a hash of its fitted
        state, the width, the precision and its calibration, normalisation and the demitasse
        version. Stores of vectors keep it and compare it (:mod:`demitasse.provenance`)."""
        dim, precision = self._check_request(dim, precision or self.precision)
        encoder = None
        if self.has_encoder:
            if self._encoder is None:
                self._load_encoder()
            ref = self._encoder_ref or {}
            encoder = {key: ref.get(key) for key in ("name", "kind", "dim", "fingerprint")}
        return {
            "demitasse_version": demitasse_version(),
            "encoder": encoder,
            "layer": self.layer,
            "method": self.method,
            "fitted_state": self.state_hash(),
            "dim": dim,
            "precision": precision,
            "normalize": self.normalize,
        }

    def state_hash(self) -> str:
        """A content hash of everything fitted (compressor, quantisers, rescoring ranges) and
        of the settings that change vectors: equal hashes give equal outputs."""
        import tempfile

        from demitasse.encoders.cache import fingerprint_directory

        self._check_fitted()
        with tempfile.TemporaryDirectory(prefix="demitasse-state-") as tmp:
            root = Path(tmp)
            for part, directory in (
                (self.compressor, COMPRESSOR_DIR),
                (self.quantizer, QUANTIZER_DIR),
                (self.rescore_quantizer, RESCORE_DIR),
            ):
                if part is not None:
                    part.save(root / directory)
            for volatile in root.rglob(MARKER):
                volatile.unlink()
            settings = {
                "layer": self.layer,
                "normalize": self.normalize,
                "precision": self.precision,
                "rescore": [self.rescore_factor, self.rescore_precision],
            }
            (root / "settings.json").write_text(json.dumps(settings, sort_keys=True))
            return fingerprint_directory(root)

    # ---- persistence -------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """What ``save`` writes to config.json."""
        self._check_fitted()
        encoder = None
        if self.has_encoder:
            if self._encoder is None:
                self._load_encoder()
            encoder = self._encoder_ref
        config: dict[str, Any] = {
            "kind": MODEL_KIND,
            "format_version": FORMAT_VERSION if self.rescores else 1,
            "demitasse_version": demitasse_version(),
            "encoder": encoder,
            "layer": self.layer,
            "input_dim": self.input_dim,
            "compressor": None if self.compressor is None else COMPRESSOR_DIR,
            "method": self.method,
            "precision": self.precision,
            "quantizer": None if self.quantizer is None else QUANTIZER_DIR,
            "normalize": self.normalize,
            "batch_size": self.batch_size,
            "backend": self.backend,
            "output_dim": self.output_dim,
            "matryoshka": self._matryoshka,
            "precisions": self.precisions,
            "fit": self.fit_info,
        }
        if self.rescores:  # only then: a model without rescoring saves as format 1 did
            config["rescore"] = {
                "factor": self.rescore_factor,
                "precision": self.rescore_precision,
                "quantizer": None if self.rescore_quantizer is None else RESCORE_DIR,
            }
        return config

    def save(self, path: str | Path) -> Path:
        """Write the model directory atomically: config.json, compressor/, quantizer/,
        rescore/ (the int8 ranges of the rescoring store)."""
        path = Path(path)
        config = self.config()
        with atomic_directory(path, kind="model", recognise=_earlier_model) as tmp:
            if self.compressor is not None:
                self.compressor.save(tmp / COMPRESSOR_DIR)
            if self.quantizer is not None:
                self.quantizer.save(tmp / QUANTIZER_DIR)
            if self.rescore_quantizer is not None:
                self.rescore_quantizer.save(tmp / RESCORE_DIR)
            text = json.dumps(config, indent=2, ensure_ascii=False, allow_nan=False)
            (tmp / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(
        cls, path: str | Path, *, cache: bool = True, backend: str | None = None
    ) -> CompressedModel:
        """Read a model directory (or a bare saved compressor, as a vectors-only model);
        ``backend`` replaces the saved one (models saved before backends existed: torch)."""
        path = Path(path)
        config = _read_config(path)
        model = cls._from_config(path, config, cache)
        if backend is not None:
            model.backend = backend
        return model

    @classmethod
    def _from_config(cls, path: Path, config: dict[str, Any], cache: bool) -> CompressedModel:
        if config.get("kind", "compressor") == "compressor":
            compressor = load_compressor(path)
            model = cls(None, compressor=compressor, cache=cache)
            model._input_dim = int(compressor.n_features_in_)
            model.fit_info = {"source": "vectors", "fit_data": compressor.fit_data_}
            return model
        return _model_from_config(cls, path, config, cache)


def is_model_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a saved :class:`CompressedModel`."""
    try:
        return _read_config(Path(path)).get("kind") == MODEL_KIND
    except DemitasseError:
        return False


def check_model_target(path: str | Path) -> Path:
    """``path`` as a Path if :meth:`CompressedModel.save` may write there (nothing, an empty
    folder or an earlier saved model), else a one-line error: for callers that check first."""
    return check_directory_target(path, kind="model", recognise=_earlier_model)


def _earlier_model(path: Path) -> bool:
    """A model saved before outputs carried a marker: its config.json says so, and the folder
    holds nothing a save does not write (anything else there is someone's, and stays)."""
    saved = {CONFIG_FILE, COMPRESSOR_DIR, QUANTIZER_DIR, RESCORE_DIR, MARKER}
    return is_model_dir(path) and all(entry.name in saved for entry in path.iterdir())


def _model_from_config(
    cls: type[CompressedModel], path: Path, config: dict[str, Any], cache: bool
) -> CompressedModel:
    def field(key: str, kinds: type | tuple[type, ...]) -> Any:
        value = config.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool) != (kinds is bool):
            raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad or missing {key!r}")
        return value

    version = field("format_version", int)
    if version > FORMAT_VERSION:
        raise CompressorError(f"{path} was saved by a newer demitasse; upgrade demitasse")
    encoder = config.get("encoder")
    if encoder is not None and not (
        isinstance(encoder, dict) and isinstance(encoder.get("source"), str)
    ):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad 'encoder'")
    layer = config.get("layer")
    if layer is not None:
        layer = field("layer", int)
    fit_info = config.get("fit")
    if not isinstance(fit_info, dict):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad or missing 'fit'")
    compressor = load_compressor(path / COMPRESSOR_DIR) if config.get("compressor") else None
    model = cls(
        None,
        compressor=compressor,
        precision=field("precision", str),
        normalize=field("normalize", bool),
        batch_size=field("batch_size", int),
        cache=cache,
    )
    model.layer = layer
    model._encoder_ref = dict(encoder) if encoder is not None else None
    try:  # saved before backends existed: torch
        model.backend = config.get("backend") or "torch"
    except DemitasseError as exc:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: {exc}") from None
    model._input_dim = field("input_dim", int)
    if compressor is not None and compressor.n_features_in_ != model._input_dim:
        raise CompressorError(f"{path}: compressor/ takes {compressor.n_features_in_} dims, "
                              f"config.json says {model._input_dim}")  # fmt: skip
    if config.get("quantizer"):
        model.quantizer = load_quantizer(path / QUANTIZER_DIR)
        if model.quantizer.precision != model.precision:
            raise CompressorError(f"{path}: quantizer/ does not match precision {model.precision}")
        model.quantizer_params = model.quantizer.get_params()
    elif model.precision != "float32":
        raise CompressorError(f"{path}: precision {model.precision} needs quantizer/, missing")
    _load_rescoring(model, path, config)
    model.fit_info = fit_info
    return model


def _load_rescoring(model: CompressedModel, path: Path, config: dict[str, Any]) -> None:
    """The rescoring settings and int8 ranges; a model saved without them (format 1, or
    format 2 without rescoring) searches by its codes alone."""
    saved = config.get("rescore")
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad 'rescore'")
    try:
        model.rescore_factor, model.rescore_precision = _rescoring_settings(
            saved.get("factor"), saved.get("precision")
        )
    except DemitasseError as exc:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: 'rescore': {exc}") from None
    if model.rescore_factor is None:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: 'rescore' lacks its factor")
    stored = saved.get("quantizer")
    if model.rescore_precision != "int8":
        if stored is not None:
            raise CompressorError(f"{path}: float32 rescoring takes no {RESCORE_DIR}/")
        return
    if stored != RESCORE_DIR:
        raise CompressorError(f"{path}: int8 rescoring needs {RESCORE_DIR}/, missing")
    quantizer = load_quantizer(path / RESCORE_DIR)
    if quantizer.precision != "int8" or quantizer.n_features_in_ != model._input_dim:
        raise CompressorError(
            f"{path}: {RESCORE_DIR}/ must hold int8 ranges of the encoder's {model._input_dim} dims"
        )
    model.rescore_quantizer = quantizer


def _initial_backend(encoder: Any, backend: str | None) -> str:
    """``backend``, checked; by default torch, or what an encoder object given runs on."""
    if backend is None:
        backend = str(getattr(encoder, "backend", "torch"))
    check_backend(backend)
    if encoder is None and backend != "torch":
        raise DemitasseError(
            f"the {backend} backend needs an encoder; a vectors-only model has none"
        )
    return backend


def _rescoring_settings(factor: Any, precision: Any) -> tuple[float | None, str | None]:
    """The checked (factor, precision) pair: both None without rescoring; a factor alone
    keeps int8 vectors."""
    if factor is None:
        if precision is not None:
            raise CompressorError(
                f"rescore_precision {precision!r} needs rescore_factor (F ≥ 1: how many "
                "candidates per result the codes find for rescoring)"
            )
        return None, None
    if isinstance(factor, bool) or not isinstance(factor, int | float | np.number):
        raise CompressorError(f"rescore_factor must be a number ≥ 1, got {factor!r}")
    if not np.isfinite(factor) or factor < 1:
        raise CompressorError(f"rescore_factor must be a number ≥ 1, got {factor!r}")
    precision = "int8" if precision is None else precision
    if precision not in RESCORE_PRECISIONS:
        raise CompressorError(
            f"rescore_precision must be one of {', '.join(RESCORE_PRECISIONS)}, got {precision!r}"
        )
    return float(factor), str(precision)


def _read_config(path: Path) -> dict[str, Any]:
    return read_config(path, "model")


def _source_of(encoder: str | Path) -> str:
    """A packaged or hub name stays a name; a local directory becomes an absolute path."""
    path = Path(encoder).expanduser()
    return str(path.resolve()) if path.is_dir() else str(encoder)


def _fingerprint(path: Path) -> str | None:
    from demitasse.encoders.cache import fingerprint_directory

    return fingerprint_directory(path) if path.is_dir() else None


def _is_text_list(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) > 0
        and all(isinstance(item, str) for item in value)
    )


def _check_texts(texts: Any, what: str) -> list[str]:
    texts = check_texts(texts, what)
    if not texts:
        raise DataError(f"{what} are empty")
    return texts


def _hash_texts(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def _hash_vectors(X: np.ndarray) -> str:
    digest = hashlib.sha256(str(X.shape).encode())
    for start in range(0, X.shape[0], 65536):
        digest.update(np.ascontiguousarray(X[start : start + 65536], dtype=np.float32).tobytes())
    return digest.hexdigest()
