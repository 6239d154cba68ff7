"""The sweep space of ``demitasse tune``: which configurations of a model it tries.

A :class:`Configuration` is one way to deploy an encoder: a layer cut, a compressor and a
width, a precision for the codes held in memory, and optionally a rescoring factor F (the
codes find the top k·F documents, which are rescored against int8 codes of the encoder's
full output, as :class:`~demitasse.model.CompressedModel` searches with ``rescore_factor``).
The space crosses every encoder and layer with the compressors, the widths (halving from
the encoder's full width) and the precisions; binary codes are always ITQ-rotated, since
sign bits of PCA or truncated dimensions waste most of their capacity. Codebook codes
(``rq<B>``, ``pq<B>``: B bytes a document) are one more axis, tried on the encoder's full
output only (method ``none``, its full width, no rescoring): they are searched asymmetrically,
learn their own subspace, and take exactly the width they were fitted on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from demitasse.compress import (
    CodebookQuantizer,
    Compressor,
    check_precision,
    compressor_choices,
    compressor_class,
    make_quantizer,
    precision_help,
    resolve_compressor,
)
from demitasse.compress.vocabulary import plain_precisions
from demitasse.errors import (
    DataError,
    DemitasseError,
    UnknownCompressionNameError,
    UnknownNameError,
)

#: The compressors swept by default, by the names of the compressor vocabulary
#: (:func:`~demitasse.compress.compressor_choices`); a space may take any of them. Those that
#: train a network are fitted after the others (:func:`trains`).
METHODS: tuple[str, ...] = ("none", "truncate", "pca", "pca-whiten", "adaptor")
#: The precisions swept by default: the registry's plain ones (float32, int8, binary); a
#: space may take any registered precision.
PRECISIONS: tuple[str, ...] = tuple(plain_precisions())
RESCORE_FACTORS: tuple[int, ...] = (1, 2, 4, 10)
#: The codebook codes swept by default where documents are searched (retrieval, label-free):
#: residual codes of 8 to 64 bytes a document, on the encoder's full output.
CODES: tuple[str, ...] = ("rq8", "rq16", "rq32")
#: The narrowest width swept: below it, even PCA keeps little of a sentence's meaning.
MIN_DIM = 8
#: How binary codes are made: a learned rotation spreads the variance over every bit.
BINARY_ROTATION = "itq"
#: How the documents' full encoder output is kept for rescoring.
RESCORE_PRECISION = "int8"
#: What runs the transformer by default: torch alone. ``--backends torch,onnx-int8`` sweeps
#: the int8 encoder too, as one more encoder (``name+onnx-int8``) crossed with everything else,
#: which doubles the sweep; its speed is measured like torch's, so ``--min-speed`` can pick it.
BACKENDS: tuple[str, ...] = ("torch",)

#: Quantiser options of a precision in the sweep (and in the model it writes).
_QUANTIZER_PARAMS: dict[str, dict[str, Any]] = {"binary": {"rotation": BINARY_ROTATION}}


@dataclass(frozen=True)
class Configuration:
    """One point of the sweep. ``encoder`` is the encoder's name, ``layer`` the layer cut
    (1-based; a static model's only layer is 1), ``rescore`` the factor F or None."""

    encoder: str
    layer: int
    method: str
    dim: int
    precision: str
    rescore: int | None = None

    def __post_init__(self) -> None:
        check_method(self.method)
        if not _is_canonical_precision(self.precision):
            raise UnknownCompressionNameError(f"unknown precision {self.precision!r}")
        if self.rescore is not None and self.precision == "float32":
            raise DataError("float32 search is exact: it has nothing better to rescore with")

    @property
    def key(self) -> str:
        """A stable identity for the results store."""
        return (
            f"{self.encoder}|L{self.layer}|{self.method}|{self.dim}|{self.precision}"
            f"|F{self.rescore or 0}"
        )

    def describe(self, *, with_encoder: bool = False) -> str:
        """``L6 pca 64 binary ×10`` (``×10``: rescored from ten candidates per result)."""
        text = f"L{self.layer} {self.method} {self.dim} {self.precision}"
        if self.rescore is not None:
            text += f" ×{self.rescore}"
        return f"{self.encoder} {text}" if with_encoder else text

    def index_bytes(self) -> int:
        """Bytes per document held in memory by the index: the codes."""
        return make_quantizer(self.precision).bytes_per_vector(self.dim)

    def rescore_bytes(self, full_dim: int) -> int:
        """Bytes per document kept for rescoring: int8 codes of the full encoder output."""
        return 0 if self.rescore is None else full_dim

    def model_settings(self) -> dict[str, Any]:
        """The :class:`~demitasse.model.CompressedModel` keywords of this configuration,
        besides its encoder and layer."""
        compressor, params = compressor_of(self.method)
        settings: dict[str, Any] = {
            "compressor": compressor,
            "dim": None if compressor is None else self.dim,
            "precision": self.precision,
        }
        if params:
            settings["compressor_params"] = dict(params)
        if quantizer_params(self.precision):
            settings["quantizer_params"] = quantizer_params(self.precision)
        if self.rescore is not None:
            settings["rescore_factor"] = self.rescore
            settings["rescore_precision"] = RESCORE_PRECISION
        return settings

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Configuration:
        """A configuration from :meth:`to_dict`'s output (a DataError for anything else)."""
        fields = ("encoder", "layer", "method", "dim", "precision", "rescore")
        if not isinstance(data, dict) or set(data) != set(fields):
            raise DataError(f"not a tune configuration: {str(data)[:80]}")
        ints = ("layer", "dim")
        if not all(isinstance(data[k], int) and not isinstance(data[k], bool) for k in ints):
            raise DataError(f"not a tune configuration: {str(data)[:80]}")
        if not isinstance(data["rescore"], int | None) or isinstance(data["rescore"], bool):
            raise DataError(f"not a tune configuration: {str(data)[:80]}")
        return cls(**{k: data[k] for k in fields})


def compressor_of(method: str) -> tuple[str | None, dict[str, Any]]:
    """The registered compressor a tune method builds, and its parameters (None: no
    compressor, the encoder's own vectors)."""
    return resolve_compressor(method)


def compressor_class_of(method: str) -> type[Compressor] | None:
    """The class of the compressor ``method`` builds (None: the encoder's own vectors)."""
    name, _ = resolve_compressor(method)
    return None if name is None else compressor_class(name)


def trains(method: str) -> bool:
    """Whether ``method`` trains a network: the sweep fits it once per width, after every
    other compressor, within its time budget."""
    compressor = compressor_class_of(method)
    return compressor is not None and compressor.trained


def check_method(method: str) -> None:
    """``method`` is a name of the compressor vocabulary (one line naming them otherwise)."""
    if method not in compressor_choices():
        raise UnknownCompressionNameError(
            f"unknown tune method {method!r}; choose from {', '.join(compressor_choices())}"
        )


def quantizer_params(precision: str) -> dict[str, Any]:
    """The quantiser options the sweep codes ``precision`` with: binary codes are ITQ-rotated."""
    return dict(_QUANTIZER_PARAMS.get(precision, {}))


def _is_canonical_precision(precision: Any) -> bool:
    try:
        return check_precision(precision) == precision
    except DemitasseError:
        return False


def halving_dims(full_dim: int, min_dim: int = MIN_DIM) -> list[int]:
    """``full, full/2, full/4, …`` while at least ``min_dim`` (the full width always)."""
    dims = [full_dim]
    while dims[-1] // 2 >= min_dim:
        dims.append(dims[-1] // 2)
    return dims


@dataclass(frozen=True)
class EncoderLayers:
    """An encoder to sweep: its name, its full width and the layer cuts to try."""

    name: str
    dim: int
    layers: tuple[int, ...]


@dataclass(frozen=True)
class SweepSpace:
    """Which configurations to try on each encoder and layer.

    ``search=False`` (scored pairs: nothing is searched) leaves rescoring out. ``codes`` are
    the codebook precisions tried on each encoder's full output (method ``none``, the full
    width, no rescoring); None (the default) is :data:`CODES` where documents are searched and
    none for scored pairs.
    """

    methods: tuple[str, ...] = METHODS
    precisions: tuple[str, ...] = PRECISIONS
    rescore_factors: tuple[int, ...] = RESCORE_FACTORS
    min_dim: int = MIN_DIM
    search: bool = True
    encoders: tuple[EncoderLayers, ...] = field(default_factory=tuple)
    backends: tuple[str, ...] = BACKENDS
    codes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        codes = (CODES if self.search else ()) if self.codes is None else self.codes
        object.__setattr__(self, "codes", check_codes(codes))
        for method in self.methods:
            check_method(method)
        if "none" not in self.methods:
            # The full model is what every retention is measured against.
            raise DataError("the sweep needs method 'none': the full model is the reference")
        known = all(_is_canonical_precision(p) for p in self.precisions)
        if not known or "float32" not in self.precisions:
            raise DataError(f"tune precisions must include float32, from {precision_help()}")
        if "torch" not in self.backends:
            # The full model in torch is what every retention is measured against.
            raise DataError("the tune backends must include torch: the full model is the reference")

    def dims(self, method: str, full_dim: int) -> list[int]:
        """The widths ``method`` is tried at: the full one only for the encoder's own vectors;
        a compressor that is the identity at full width (truncation) or trains a network
        (which would change little there) only below it; the others at every width."""
        compressor = compressor_class_of(method)
        if compressor is None:
            return [full_dim]
        dims = halving_dims(full_dim, min(self.min_dim, full_dim))
        skip_full = compressor.identity_at_full_width or compressor.trained
        return dims[1:] if skip_full else dims

    def rescorings(self, precision: str) -> list[int | None]:
        if precision == "float32" or not self.search:
            return [None]
        return [None, *self.rescore_factors]

    def layer_configurations(self, encoder: EncoderLayers, layer: int) -> list[Configuration]:
        """Every configuration of one encoder layer, in the order the sweep evaluates them:
        the compressors' crossed with widths, precisions and rescoring, then the codebook
        codes of the encoder's full output."""
        crossed = [
            Configuration(encoder.name, layer, method, dim, precision, factor)
            for method in self.methods
            for dim in self.dims(method, encoder.dim)
            for precision in self.precisions
            for factor in self.rescorings(precision)
        ]
        full = encoder.dim
        codes = [Configuration(encoder.name, layer, "none", full, c) for c in self.codes or ()]
        return list(dict.fromkeys([*crossed, *codes]))

    def configurations(self) -> Iterator[Configuration]:
        for encoder in self.encoders:
            for layer in encoder.layers:
                yield from self.layer_configurations(encoder, layer)

    def smallest_index(self) -> Configuration:
        """The configuration with the fewest index bytes the space holds."""
        return min(self.configurations(), key=lambda c: (c.index_bytes(), -c.dim))


def is_codebook_code(precision: str) -> bool:
    """Whether ``precision`` names codebook codes (``rq16``, ``pq8``): a quantiser that learns
    codewords on the full fitted width and scores float queries against them."""
    return isinstance(make_quantizer(precision), CodebookQuantizer)


def check_codes(codes: Sequence[str]) -> tuple[str, ...]:
    """``codes`` as canonical codebook precisions, without repeats (``rq08`` → ``rq8``); a
    one-line DataError for a name that is no precision or no codebook code."""
    if isinstance(codes, str):
        raise DataError(f"codes are a sequence of precisions such as ('rq16',), not {codes!r}")
    checked = []
    for code in codes:
        try:
            name = check_precision(code)
        except DemitasseError as exc:
            raise DataError(f"--codes: {exc}") from None
        if not is_codebook_code(name):
            raise DataError(
                f"--codes takes codebook codes such as rq16 or pq16 (B bytes a document), not "
                f"{name!r}: plain precisions are swept at every width already"
            )
        checked.append(name)
    return tuple(dict.fromkeys(checked))


def parse_codes(text: str) -> tuple[str, ...]:
    """``"rq8,rq16"`` → ``("rq8", "rq16")``; ``"none"`` → no codes."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return ()
    if not names:
        raise DataError(f"--codes takes codebook codes such as rq8,rq16, or none; got {text!r}")
    return check_codes(names)


def parse_backends(text: str) -> tuple[str, ...]:
    """``"onnx-int8"`` → ``("torch", "onnx-int8")``: torch always comes first."""
    from demitasse.encoders.base import BACKENDS as KNOWN

    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in KNOWN]
    if unknown or not names:
        shown = unknown[0] if unknown else text
        raise UnknownNameError(f"unknown backend {shown!r}; choose from {', '.join(KNOWN)}")
    return tuple(dict.fromkeys(["torch", *names]))


def parse_methods(text: str) -> tuple[str, ...]:
    """``"truncate,pca"`` → ``("none", "truncate", "pca")``: the full model always comes first;
    any name of the compressor vocabulary."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise UnknownCompressionNameError(
            f"no tune method in {text!r}; choose from {', '.join(compressor_choices())}"
        )
    for name in names:
        check_method(name)
    return tuple(dict.fromkeys(["none", *names]))
