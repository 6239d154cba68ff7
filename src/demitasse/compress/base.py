# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""The :class:`Compressor` base class, its registries, and ``make_compressor``/``load_compressor``.

Subclasses implement four hooks: ``_fit``, ``_transform_chunk``, ``_state``/``_load_state``
(plus ``_state_shapes`` so a load can be checked against config.json), and declare their
hyperparameters' valid values in scikit-learn's ``_parameter_constraints``. The base class does
all input validation, chunking, dimension handling and (atomic) persistence.

Every compressor is a scikit-learn transformer (``BaseEstimator`` + ``TransformerMixin``): it
clones, sits in a ``Pipeline`` and is tuned by ``GridSearchCV`` like any other.

Two registries name them. :func:`register_compressor` holds the estimators, fitted on vectors:
``make_compressor``, ``fit --compressor``, the tune sweep and the estimator checks take their
names (:func:`compressor_names`). :func:`register_built_compressor` holds the compressors built
another way (a pooler head trained with its encoder), which save, load and transform like the
others but are no estimator to fit: only ``load_compressor`` takes their names
(:func:`built_compressor_names`).
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from demitasse.arrays import (
    DEFAULT_CHUNK_ROWS,
    as_matrix,
    check_chunk_rows,
    check_finite,
    check_finite_chunk,
    check_out,
    is_int,
    iter_row_chunks,
    non_finite_array,
)
from demitasse.compress._estimator import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    InvalidParameterError,
    Tags,
    TransformerMixin,
    not_fitted_error,
)
from demitasse.compress.params import Integers, ParamsMixin
from demitasse.errors import (
    CompressorError,
    IncompatibleInputError,
    ParameterError,
    SavedStateError,
    UnknownCompressionNameError,
    UnknownNameError,
    one_line,
    require_library,
)
from demitasse.persistence import (
    check_state_shapes,
    check_version,
    demitasse_version,
    read_saved,
    require,
    write_saved,
)
from demitasse.registry import Registry


class _InvalidParameterError(ParameterError, InvalidParameterError):
    """A hyperparameter outside its ``_parameter_constraints``: a ParameterError for the CLI
    and for callers, and scikit-learn's InvalidParameterError for scikit-learn."""


C = TypeVar("C", bound="type[Compressor]")

#: The compressors fitted on vectors: the estimators.
_REGISTRY: Registry[type[Compressor]] = Registry("compressor", "method")
#: The compressors built another way (a pooler head trained with its encoder): loaded only.
_BUILT: Registry[type[Compressor]] = Registry("built compressor", "method")
#: The names of the compressors fitted on vectors, sorted.
compressor_names = _REGISTRY.names
#: The names of the compressors built another way than by fit, sorted.
built_compressor_names = _BUILT.names


def register_compressor(cls: C) -> C:
    """Class decorator: ``cls`` is an estimator fitted on vectors, made by name with
    :func:`make_compressor` and loaded by :func:`load_compressor`."""
    _check_unregistered(cls, _BUILT)
    _REGISTRY.register(cls)
    return cls


def register_built_compressor(cls: C) -> C:
    """Class decorator: ``cls`` is built another way than by ``fit`` (from a trained head, say)
    and only loaded by name with :func:`load_compressor`; its ``built_by`` says how it is
    made, for the message that refuses to fit or make it by name."""
    _check_unregistered(cls, _REGISTRY)
    if not cls.__dict__.get("built_by"):
        raise TypeError(f"{cls.__name__} needs a class attribute 'built_by': how it is made")
    _BUILT.register(cls)
    return cls


def _check_unregistered(cls: type[Compressor], other: Registry[type[Compressor]]) -> None:
    method = getattr(cls, "method", None)
    if isinstance(method, str) and method in other.names():
        raise TypeError(f"compressor {method!r} is already registered by {other.lookup(method)}")


def compressor_class(name: str) -> type[Compressor]:
    """The class a method name denotes, fitted or built (UnknownCompressionNameError for
    an unknown name, listing the fitted ones)."""
    if name in _BUILT.names():
        return _BUILT.lookup(name)
    return _REGISTRY.lookup(name)


def built_compressor_error(name: str) -> UnknownCompressionNameError:
    """The error for a built compressor named where a fitted one is asked for: it is no
    compressor to fit by name, and the message says how one is made."""
    cls = _BUILT.lookup(name)
    return UnknownCompressionNameError(
        f"a {name} compressor is not fitted on vectors but {cls.built_by}; the compressors "
        f"fitted by name are: {', '.join(_REGISTRY.names())}"
    )


def make_compressor(name: str, **params: Any) -> Compressor:
    """Build an unfitted compressor by registry name, validating its hyperparameters now.

    Only compressors fitted on vectors are made by name; a built one (a pooler) is refused
    in one line that says how it is made."""
    if isinstance(name, str) and name in _BUILT.names():
        raise built_compressor_error(name)
    return _REGISTRY.lookup(name)._construct(params)


def load_compressor(path: str | Path) -> Compressor:
    """Load any saved compressor, dispatching on config.json's ``method``."""
    return Compressor.load(path)


@dataclass(frozen=True)
class AffineMap:
    """``activation(weight @ normalize?(x) + bias)``: what a linear compressor computes at one
    width, so an exporter can write it as standard layers (a Dense module) instead of code."""

    weight: np.ndarray  #: float32 [k, D]
    bias: np.ndarray  #: float32 [k]
    activation: str = "identity"  #: "identity" or "tanh"
    normalize_input: bool = False  #: L2-normalise x first

    @property
    def is_truncation(self) -> bool:
        """Whether the map only keeps the first k inputs (no layer needed to compute it)."""
        k, d = self.weight.shape
        return (
            self.activation == "identity"
            and not self.normalize_input
            and not self.bias.any()
            and np.array_equal(self.weight, np.eye(k, d, dtype=self.weight.dtype))
        )


class Compressor(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ParamsMixin, BaseEstimator):
    """Maps embeddings [n, D] to float32 [n, k]; ``transform(dim=k)`` is a prefix of the output.

    Hyperparameters are ``__init__`` arguments stored verbatim; learned state ends in ``_``:
    ``n_features_in_``, ``output_dim_``, ``fit_data_``, ``n_fit_samples_`` and subclass arrays.
    Valid hyperparameter values are declared in ``_parameter_constraints`` (scikit-learn's
    ``Interval``, ``StrOptions``, ``"boolean"``, ...), checked by ``make_compressor``, ``load``
    and ``fit``.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {"dim": [Integers(1), None]}

    method: ClassVar[str]
    version: ClassVar[int] = 1
    #: Whether ``transform(dim=k)`` for k < output_dim_ is meaningful (prefix of the full output).
    matryoshka: ClassVar[bool] = True
    #: Keyword arguments ``fit`` accepts as supervision (e.g. ``("pairs", "scores")``).
    supervision: ClassVar[tuple[str, ...]] = ()
    #: Fitted by training a network (minutes where the others take seconds): a sweep fits it
    #: once per width, after the others, within its time budget.
    trained: ClassVar[bool] = False
    #: At its full input width it returns its input unchanged: nothing to try there.
    identity_at_full_width: ClassVar[bool] = False
    #: Whether ``fit`` learns from the data (False: it records the input width, no more).
    learns_from_data: ClassVar[bool] = True
    #: How a compressor built another way than by ``fit`` is made, for messages (set by those
    #: of :func:`register_built_compressor`; None for the estimators).
    built_by: ClassVar[str | None] = None
    #: Float dtype chunks are cast to before ``_transform_chunk``.
    compute_dtype: ClassVar[DTypeLike] = np.float32
    #: Rows per chunk when ``_fit`` streams over the data (float64 chunks: keep modest).
    fit_chunk_rows: ClassVar[int] = 8192
    #: True where every output row is a dense product with its whole input row, so a NaN or inf
    #: anywhere in the row shows in the output: transform then checks only the (narrower)
    #: output, and the input only to name the bad row.
    output_reveals_non_finite_input: ClassVar[bool] = False
    #: Names of JSON-scalar learned attributes saved in config.json under "learned".
    scalar_state: ClassVar[tuple[str, ...]] = ()
    #: Libraries beyond the core install (import names) that ``fit`` needs, and those that
    #: loading and ``transform`` need too; without one, fit or load fails in one line naming
    #: the extra that installs it (``demitasse[train]``).
    fit_libraries: ClassVar[tuple[str, ...]] = ()
    transform_libraries: ClassVar[tuple[str, ...]] = ()

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    # ---- hooks -------------------------------------------------------------------------------

    def _max_output_dim(self, n_features: int) -> int:
        """Largest output dim possible for this input width."""
        return n_features

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        """Learn state from validated ``X`` (maybe a memmap; stream it with ``iter_row_chunks``).

        ``n_features_in_`` and ``output_dim_`` are already set; may lower ``output_dim_``.
        """

    def _transform_chunk(self, X: np.ndarray, dim: int) -> np.ndarray:
        """Map a finite ``compute_dtype`` chunk [m, n_features_in_] to [m, dim]."""
        raise NotImplementedError

    def _state(self) -> dict[str, np.ndarray]:
        """Learned arrays to save."""
        return {}

    def _state_shapes(self) -> dict[str, tuple[int, ...]] | None:
        """Expected names/shapes of ``_state()`` given the config; None skips the check."""
        return {}

    def _load_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore learned arrays (config-level attributes are already set)."""

    def _affine(self, dim: int) -> AffineMap | None:
        """``transform(·, dim)`` as one affine layer, or None when it is not one."""
        return None

    # ---- public API --------------------------------------------------------------------------

    @property
    def is_fitted(self) -> bool:
        return "n_fit_samples_" in self.__dict__

    def fit(
        self, X: Any, y: Any = None, *, fit_data: str | None = None, **supervision: Any
    ) -> Self:
        """Fit on embeddings ``X`` [n, D] (ndarray or memmap); ``fit_data`` describes them.

        ``y`` is ignored (it is there for scikit-learn's API): supervision, where a compressor
        accepts any, goes by keyword (``supervision`` lists the names).
        """
        self._check_params()
        self._require_libraries("", self.fit_libraries + self.transform_libraries)
        unknown = sorted(set(supervision) - set(self.supervision))
        if unknown:
            accepted = ", ".join(self.supervision) or "none"
            raise ParameterError(
                f"{self.method} compressor got unknown fit argument(s) {', '.join(unknown)}; "
                f"it accepts: {accepted}"
            )
        if fit_data is not None and not isinstance(fit_data, str):
            raise ParameterError(f"fit_data must be a string description, got {fit_data!r}")
        X = as_matrix(X)
        if X.shape[0] < 2:
            raise CompressorError(
                f"{self.method} needs at least 2 rows to fit, got n_samples={X.shape[0]}"
            )
        check_finite(X, DEFAULT_CHUNK_ROWS)

        for name in [k for k in self.__dict__ if k.endswith("_") and not k.startswith("_")]:
            del self.__dict__[name]  # a failed refit must not leave a half-old, half-new model
        n_features = int(X.shape[1])
        self.n_features_in_ = n_features
        self.output_dim_ = self._initial_output_dim(n_features)
        self._fit(X, **supervision)
        bad = non_finite_array(self._state())
        if bad is not None:
            for name in [k for k in self.__dict__ if k.endswith("_") and not k.startswith("_")]:
                del self.__dict__[name]
            raise CompressorError(
                f"fitting this {self.method} compressor gave NaN or inf in {bad}; the data may "
                "be degenerate (constant, duplicated or extreme values)"
            )
        self.fit_data_ = fit_data
        self.n_fit_samples_ = int(X.shape[0])
        return self

    def _initial_output_dim(self, n_features: int) -> int:
        largest = self._max_output_dim(n_features)
        if largest < 1:
            raise IncompatibleInputError(
                f"{self!r} can produce no outputs from {n_features} input features"
            )
        if self.dim is None:
            return largest
        if self.dim > largest:
            warnings.warn(
                f"{self!r}: dim={self.dim} exceeds the {largest} outputs available from "
                f"{n_features} input features; using {largest}",
                UserWarning,
                stacklevel=3,
            )
        return min(int(self.dim), largest)

    def transform(
        self,
        X: Any,
        dim: int | None = None,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Compress ``X`` to float32 [n, dim] (dim=None: ``output_dim_``), chunk by chunk.

        ``out`` may be a preallocated float32 array (e.g. a memmap) of shape [n, dim].
        """
        self._check_fitted()
        k = self._resolve_dim(dim)
        chunk_rows = check_chunk_rows(chunk_rows)
        X = as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise IncompatibleInputError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input (the width it was fitted on)"
            )
        n = X.shape[0]
        out = np.empty((n, k), np.float32) if out is None else check_out(out, (n, k), np.float32)
        with self._transform_context():
            for start, chunk in iter_row_chunks(X, chunk_rows, self.compute_dtype):
                out[start : start + chunk.shape[0]] = self._checked_chunk(chunk, start, k)
        return out

    def _transform_context(self) -> AbstractContextManager[None]:
        """Entered around a whole ``transform`` (thread settings, say)."""
        return nullcontext()

    def _checked_chunk(self, chunk: np.ndarray, start: int, k: int) -> np.ndarray:
        """``_transform_chunk`` with the finiteness checks that name the bad input row."""
        if not self.output_reveals_non_finite_input:
            check_finite_chunk(chunk, start)
        result = self._transform_chunk(chunk, k)
        try:
            check_finite_chunk(result, start, "the output", error=CompressorError)
        except CompressorError:
            check_finite_chunk(chunk, start)  # the input's fault: name its row
            raise
        if result.shape != (chunk.shape[0], k):
            raise RuntimeError(
                f"{type(self).__name__}._transform_chunk returned shape {result.shape}, "
                f"expected {(chunk.shape[0], k)}"
            )
        return result

    def fit_transform(
        self,
        X: Any,
        y: Any = None,
        *,
        dim: int | None = None,
        fit_data: str | None = None,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        out: np.ndarray | None = None,
        **supervision: Any,
    ) -> np.ndarray:
        """``fit`` then ``transform`` the same data (``y`` is ignored, as in ``fit``; ``dim``
        goes by keyword, after scikit-learn's ``y``)."""
        self.fit(X, fit_data=fit_data, **supervision)
        return self.transform(X, dim, chunk_rows=chunk_rows, out=out)

    def as_affine(self, dim: int | None = None) -> AffineMap | None:
        """``transform(·, dim)`` as an :class:`AffineMap` (up to float32 rounding), or None for
        a non-linear compressor. Exporters write the map as built-in layers."""
        self._check_fitted("as_affine")
        return self._affine(self._resolve_dim(dim))

    def prefix_dims(self, dim: int | None = None) -> list[int]:
        """Widths k <= dim whose ``transform(·, dim=k)`` is the first k columns of
        ``transform(·, dim)``: what a server may serve by truncating the ``dim``-wide output."""
        self._check_fitted("prefix_dims")
        k = self._resolve_dim(dim)
        return list(range(1, k + 1)) if self.matryoshka else [k]

    # ---- scikit-learn ------------------------------------------------------------------------

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyperparameters, in ``__init__`` order (as saved in config.json)."""
        params = super().get_params(deep=deep)
        ordered = {name: params.pop(name) for name in self._param_names()}
        return ordered | params

    def set_params(self, **params: Any) -> Self:
        """Set hyperparameters (checked, and taking effect, at the next ``fit``)."""
        known = self._param_names()
        for name in params:
            if name not in known:
                raise self._unknown_param_error(name)
        return super().set_params(**params)

    def _check_params(self) -> None:
        """Check the hyperparameters against ``_parameter_constraints`` with scikit-learn's
        ``_validate_params``, failing with a one-line ParameterError."""
        try:
            self._validate_params()
        except InvalidParameterError as exc:
            raise _InvalidParameterError(one_line(exc)) from None

    def __sklearn_is_fitted__(self) -> bool:
        return self.is_fitted

    @property
    def _n_features_out(self) -> int:
        """Output width, for ``get_feature_names_out`` (AttributeError until fitted)."""
        return self.output_dim_

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]  # outputs are float32 whatever X is
        return tags

    @property
    def metadata(self) -> dict[str, Any]:
        """Readable summary: method, params, input/output dims and what it was fitted on."""
        fitted = self.is_fitted
        return {
            "method": self.method,
            "params": self._saved_params(),
            "input_dim": self.n_features_in_ if fitted else None,
            "output_dim": self.output_dim_ if fitted else None,
            "matryoshka": self.matryoshka,
            "fit_data": self.fit_data_ if fitted else None,
            "n_fit_samples": self.n_fit_samples_ if fitted else None,
        }

    # ---- persistence -------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write ``path/config.json`` and ``path/state.safetensors`` atomically."""
        write_saved(path, *self.saved_state())

    def saved_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What :meth:`save` writes: the config (JSON) and the learned arrays."""
        self._check_fitted("save")
        config = {
            "kind": "compressor",
            "method": self.method,
            "version": self.version,
            "demitasse_version": demitasse_version(),
            "params": self._saved_params(),
            "input_dim": self.n_features_in_,
            "output_dim": self.output_dim_,
            "matryoshka": self.matryoshka,
            "fit_data": self.fit_data_,
            "n_fit_samples": self.n_fit_samples_,
            "learned": {name: getattr(self, name) for name in self.scalar_state},
        }
        return config, self._state()

    @classmethod
    def load(cls, path: str | Path) -> Compressor:
        """Load a saved compressor; on a subclass, the saved method must match it."""
        config, arrays = read_saved(path, "compressor")
        if config.get("kind", "compressor") != "compressor":
            raise SavedStateError(f"{path} holds a saved {config.get('kind')}, not a compressor")
        method = require(config, "method", "str", path)
        try:
            target = compressor_class(method)
        except UnknownNameError as exc:
            raise SavedStateError(f"invalid config.json in {path}: {exc}") from None
        if cls is not Compressor and not issubclass(target, cls):
            raise SavedStateError(f"{path} holds a {method} compressor, not {cls.method}")
        check_version(require(config, "version", "int", path), target.version, method, path)
        target._require_libraries(f"{path}: ", target.transform_libraries)
        params = require(config, "params", "dict", path)
        try:
            obj = target._construct(params)
        except CompressorError as exc:  # a parameter it does not take, or a value it refuses
            raise SavedStateError(f"invalid config.json in {path}: {exc}") from None
        obj._restore(config, arrays, path)
        return obj

    def _restore(
        self, config: dict[str, Any], arrays: dict[str, np.ndarray], path: str | Path
    ) -> None:
        input_dim = require(config, "input_dim", "int", path)
        output_dim = require(config, "output_dim", "int", path)
        fit_data = require(config, "fit_data", "str?", path)
        n_fit_samples = require(config, "n_fit_samples", "int", path)
        learned = require(config, "learned", "dict", path) if "learned" in config else {}
        if input_dim < 1 or not 1 <= output_dim <= self._max_output_dim(input_dim):
            raise SavedStateError(
                f"invalid config.json in {path}: output_dim {output_dim} is impossible for "
                f"{self!r} with input_dim {input_dim}"
            )
        missing = [name for name in self.scalar_state if name not in learned]
        if missing:
            raise SavedStateError(
                f"invalid config.json in {path}: 'learned' lacks {', '.join(missing)}"
            )
        self.n_features_in_ = input_dim
        self.output_dim_ = output_dim
        for name in self.scalar_state:
            setattr(self, name, learned[name])
        self.n_fit_samples_ = n_fit_samples  # some state shapes depend on it
        expected = self._state_shapes()
        if expected is not None:
            check_state_shapes(arrays, expected, path)
        self._load_state(arrays)
        self.fit_data_ = fit_data

    # ---- helpers -----------------------------------------------------------------------------

    @classmethod
    def _require_libraries(cls, where: str, libraries: tuple[str, ...]) -> None:
        for library in libraries:
            require_library(library, f"{where}the {cls.method} compressor", extra="train")

    def _display_name(self) -> str:
        return f"{self.method} compressor"

    def _check_fitted(self, action: str = "transform") -> None:
        if not self.is_fitted and self.built_by:
            raise not_fitted_error(
                f"this {self.method} compressor is not built, so it cannot {action}(): a "
                f"{self.method} is {self.built_by}"
            )
        if not self.is_fitted:
            raise not_fitted_error(
                f"this {self.method} compressor is not fitted; call fit() before {action}()"
            )

    def _resolve_dim(self, dim: int | None) -> int:
        if dim is None:
            return self.output_dim_
        if not is_int(dim) or dim < 1:
            raise ParameterError(f"dim must be a positive integer, got {dim!r}")
        if dim > self.output_dim_:
            raise ParameterError(
                f"dim {dim} > {self.output_dim_}, the largest this {self.method} compressor "
                "was fitted for"
            )
        if dim != self.output_dim_ and not self.matryoshka:
            raise ParameterError(
                f"this {self.method} compressor only produces dim {self.output_dim_}, got {dim}"
            )
        return int(dim)
