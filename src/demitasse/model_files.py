"""The model directory: what :meth:`~demitasse.model.CompressedModel.save` writes and
:meth:`~demitasse.model.CompressedModel.load` reads, and the records a model keeps of its fit.

A model directory holds ``config.json`` (format :data:`FORMAT_VERSION`: the encoder with its
content fingerprint, the layer cut, the settings, the rescoring settings, null when the model
does not rescore, and how and on what the model was fitted) and one saved part per folder
(:mod:`demitasse.persistence`): ``compressor/``, ``quantizer/`` and ``rescore/`` (the int8
ranges of the rescoring store), and with ``save(onnx=True)`` ``encoder/``: the transformer
encoder cut at the model's layer as an ONNX graph with its tokenizer (``"graph": "encoder"``
in config.json; :mod:`demitasse.encoders.onnx_graph`), which runs without torch. It is
written atomically, with the marker of a finished output
(:mod:`demitasse.io`): only a folder holding that marker counts as a model to save over. A
directory written in another format is refused in one line naming both formats.

The fit's records are made here too: content hashes of the fit data, the fingerprint of the
encoder's files and the hash of everything fitted (:func:`fitted_state_hash`).
"""

# ruff: noqa: N803  (scikit-learn convention: matrices are capitalised)
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from demitasse.compress import Compressor, Quantizer, load_compressor, load_quantizer
from demitasse.errors import CompressorError, DemitasseError
from demitasse.io import MARKER, atomic_directory, check_directory_target
from demitasse.persistence import CONFIG_FILE, demitasse_version, read_config
from demitasse.search import RESCORE_PRECISIONS

MODEL_KIND = "demitasse-model"
#: 3: every model records its rescoring settings (null when it does not rescore).
FORMAT_VERSION = 3
COMPRESSOR_DIR = "compressor"
QUANTIZER_DIR = "quantizer"
RESCORE_DIR = "rescore"
#: The folder of the encoder's ONNX graph (:mod:`demitasse.encoders.onnx_graph`).
GRAPH_DIR = "encoder"
#: The kind of output the marker of a model directory names.
OUTPUT_KIND = "model"

#: The saved parts of a model, by the folder each is saved in (None: the model has none).
Parts = dict[str, Compressor | Quantizer | None]


class RecordedModel(Protocol):
    """What a model's records read of it (a :class:`~demitasse.model.CompressedModel`)."""

    layer: int | None
    compressor: Compressor | None
    quantizer: Quantizer | None
    rescore_quantizer: Quantizer | None
    precision: str
    normalize: bool
    batch_size: int
    rescore_factor: float | None
    rescore_precision: str | None
    fit_info: dict[str, Any] | None

    @property
    def input_dim(self) -> int: ...
    @property
    def output_dim(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def precisions(self) -> list[str]: ...


@dataclass
class SavedModel:
    """What a model directory holds, read and checked."""

    path: Path
    compressor: Compressor | None
    input_dim: int
    fit_info: dict[str, Any]
    #: Keywords of :class:`~demitasse.model.CompressedModel` (precision, normalize, batch
    #: size); empty for a bare saved compressor, which takes the defaults.
    settings: dict[str, Any] = field(default_factory=dict)
    encoder: dict[str, Any] | None = None
    layer: int | None = None
    backend: str = "torch"
    quantizer: Quantizer | None = None
    rescore_factor: float | None = None
    rescore_precision: str | None = None
    rescore_quantizer: Quantizer | None = None
    #: The folder of the encoder's ONNX graph, when the directory carries one.
    graph: Path | None = None


# ---- write -----------------------------------------------------------------------------------


def model_config(
    model: RecordedModel, encoder: dict[str, Any] | None, matryoshka: bool
) -> dict[str, Any]:
    """The config.json of a fitted ``model`` whose encoder is recorded as ``encoder`` and
    whose widths below the widest are prefixes when it is ``matryoshka``."""
    rescore = None
    if model.rescore_factor is not None:
        rescore = {
            "factor": model.rescore_factor,
            "precision": model.rescore_precision,
            "quantizer": None if model.rescore_quantizer is None else RESCORE_DIR,
        }
    return {
        "kind": MODEL_KIND,
        "format_version": FORMAT_VERSION,
        "demitasse_version": demitasse_version(),
        "encoder": encoder,
        "layer": model.layer,
        "input_dim": model.input_dim,
        "compressor": None if model.compressor is None else COMPRESSOR_DIR,
        "method": model.method,
        "precision": model.precision,
        "quantizer": None if model.quantizer is None else QUANTIZER_DIR,
        "normalize": model.normalize,
        "batch_size": model.batch_size,
        "backend": model.backend,
        "output_dim": model.output_dim,
        "matryoshka": matryoshka,
        "precisions": model.precisions,
        "fit": model.fit_info,
        "rescore": rescore,
        "graph": None,
    }


def model_parts(model: RecordedModel) -> Parts:
    """The fitted parts of ``model``, by the folder each is saved in."""
    return {
        COMPRESSOR_DIR: model.compressor,
        QUANTIZER_DIR: model.quantizer,
        RESCORE_DIR: model.rescore_quantizer,
    }


def write_model_dir(
    path: str | Path,
    config: dict[str, Any],
    parts: Parts,
    graph: Callable[[Path], None] | None = None,
) -> Path:
    """Write the model directory atomically: config.json, each part in its folder, and the
    encoder's graph folder when ``graph`` is given (it writes the folder it is handed)."""
    path = Path(path)
    config = {**config, "graph": None if graph is None else GRAPH_DIR}
    text = json.dumps(config, indent=2, ensure_ascii=False, allow_nan=False)
    with atomic_directory(path, kind=OUTPUT_KIND) as tmp:
        _save_parts(tmp, parts)
        if graph is not None:
            graph(tmp / GRAPH_DIR)
        (tmp / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
    return path


def _save_parts(root: Path, parts: Parts) -> None:
    for directory, part in parts.items():
        if part is not None:
            part.save(root / directory)


def fitted_state_hash(model: RecordedModel) -> str:
    """A content hash of everything fitted in ``model`` (compressor, quantisers, rescoring
    ranges) and of the settings that change vectors: equal hashes give equal outputs."""
    import tempfile

    from demitasse.encoders.cache import fingerprint_directory

    settings = {
        "layer": model.layer,
        "normalize": model.normalize,
        "precision": model.precision,
        "rescore": [model.rescore_factor, model.rescore_precision],
    }
    with tempfile.TemporaryDirectory(prefix="demitasse-state-") as tmp:
        root = Path(tmp)
        _save_parts(root, model_parts(model))
        for volatile in root.rglob(MARKER):
            volatile.unlink()
        (root / "settings.json").write_text(json.dumps(settings, sort_keys=True))
        return fingerprint_directory(root)


# ---- read ------------------------------------------------------------------------------------


def read_model_config(path: str | Path) -> dict[str, Any]:
    """``path/config.json`` of a saved model, parsed strictly, or a one-line CompressorError."""
    return read_config(path, "model")


def is_model_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a saved :class:`~demitasse.model.CompressedModel`."""
    try:
        return read_model_config(path).get("kind") == MODEL_KIND
    except DemitasseError:
        return False


def check_model_target(path: str | Path) -> Path:
    """``path`` as a Path if a model may be saved there (nothing, an empty folder or a model
    saved by demitasse), else a one-line error: for callers that check first."""
    return check_directory_target(path, kind=OUTPUT_KIND)


def read_model_dir(path: str | Path) -> SavedModel:
    """Read a model directory, or a bare saved compressor (as a vectors-only model)."""
    path = Path(path)
    config = read_model_config(path)
    if config.get("kind", "compressor") == "compressor":
        compressor = load_compressor(path)
        fit_info = {"source": "vectors", "fit_data": compressor.fit_data_}
        return SavedModel(path, compressor, int(compressor.n_features_in_), fit_info)
    return _read_model(path, config)


def _field(config: dict[str, Any], path: Path, key: str, kinds: type | tuple[type, ...]) -> Any:
    value = config.get(key)
    if not isinstance(value, kinds) or isinstance(value, bool) != (kinds is bool):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad or missing {key!r}")
    return value


def _check_format(path: Path, config: dict[str, Any]) -> None:
    """Refuse, in one line, a model directory written in another format than this one."""
    version = _field(config, path, "format_version", int)
    if version != FORMAT_VERSION:
        remedy = "upgrade demitasse" if version > FORMAT_VERSION else "fit it again"
        raise CompressorError(
            f"model directory {path} was written in format {version}; this demitasse reads "
            f"format {FORMAT_VERSION} — {remedy}"
        )


def _read_model(path: Path, config: dict[str, Any]) -> SavedModel:
    _check_format(path, config)
    encoder = config.get("encoder")
    if encoder is not None and not (
        isinstance(encoder, dict) and isinstance(encoder.get("source"), str)
    ):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad 'encoder'")
    layer = None if config.get("layer") is None else _field(config, path, "layer", int)
    fit_info = config.get("fit")
    if not isinstance(fit_info, dict):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad or missing 'fit'")
    compressor = load_compressor(path / COMPRESSOR_DIR) if config.get("compressor") else None
    precision = _field(config, path, "precision", str)
    saved = SavedModel(
        path,
        compressor,
        _field(config, path, "input_dim", int),
        fit_info,
        settings={
            "precision": precision,
            "normalize": _field(config, path, "normalize", bool),
            "batch_size": _field(config, path, "batch_size", int),
        },
        encoder=None if encoder is None else dict(encoder),
        layer=layer,
        backend=_field(config, path, "backend", str),
    )
    if compressor is not None and compressor.n_features_in_ != saved.input_dim:
        raise CompressorError(f"{path}: compressor/ takes {compressor.n_features_in_} dims, "
                              f"config.json says {saved.input_dim}")  # fmt: skip
    if config.get("quantizer"):
        saved.quantizer = load_quantizer(path / QUANTIZER_DIR)
        if saved.quantizer.precision != precision:
            raise CompressorError(f"{path}: quantizer/ does not match precision {precision}")
    elif precision != "float32":
        raise CompressorError(f"{path}: precision {precision} needs quantizer/, missing")
    _read_rescoring(saved, config)
    graph = config.get("graph")  # absent: written before graphs were (read as none)
    if graph is not None:
        if graph != GRAPH_DIR or not (path / GRAPH_DIR).is_dir():
            raise CompressorError(f"{path}: config.json names the graph folder {graph!r}, "
                                  f"expected {GRAPH_DIR}/ (missing or renamed)")  # fmt: skip
        saved.graph = path / GRAPH_DIR
    return saved


def _read_rescoring(saved: SavedModel, config: dict[str, Any]) -> None:
    """The rescoring settings and int8 ranges (``"rescore": null``: the codes' ranking is
    final)."""
    path = saved.path
    if "rescore" not in config:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: missing 'rescore'")
    rescore = config["rescore"]
    if rescore is None:
        return
    if not isinstance(rescore, dict):
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: bad 'rescore'")
    try:
        saved.rescore_factor, saved.rescore_precision = rescoring_settings(
            rescore.get("factor"), rescore.get("precision")
        )
    except DemitasseError as exc:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: 'rescore': {exc}") from None
    if saved.rescore_factor is None:
        raise CompressorError(f"invalid {CONFIG_FILE} in {path}: 'rescore' lacks its factor")
    stored = rescore.get("quantizer")
    if saved.rescore_precision != "int8":
        if stored is not None:
            raise CompressorError(f"{path}: float32 rescoring takes no {RESCORE_DIR}/")
        return
    if stored != RESCORE_DIR:
        raise CompressorError(f"{path}: int8 rescoring needs {RESCORE_DIR}/, missing")
    quantizer = load_quantizer(path / RESCORE_DIR)
    if quantizer.precision != "int8" or quantizer.n_features_in_ != saved.input_dim:
        raise CompressorError(
            f"{path}: {RESCORE_DIR}/ must hold int8 ranges of the encoder's {saved.input_dim} dims"
        )
    saved.rescore_quantizer = quantizer


def rescoring_settings(factor: Any, precision: Any) -> tuple[float | None, str | None]:
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


# ---- records of the fit ----------------------------------------------------------------------


def fit_record(
    source: str,
    digest: str,
    n_samples: int,
    fit_data: str | None,
    supervision: Iterable[str],
    started: float,
) -> dict[str, Any]:
    """How and on what a model was fitted: on ``n_samples`` ``source`` (texts or vectors)
    whose hash is ``digest``, with ``supervision``, from ``started`` (``time.perf_counter``)
    until now."""
    return {
        "source": source,
        "fit_data": fit_data,
        "n_samples": int(n_samples),
        "sha256": digest,
        "supervision": sorted(supervision),
        "seconds": round(time.perf_counter() - started, 3),
        "fitted_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "demitasse_version": demitasse_version(),
    }


def provenance_record(
    model: RecordedModel, encoder: dict[str, Any] | None, dim: int, precision: str
) -> dict[str, Any]:
    """What identifies ``model``'s output at ``dim`` and ``precision`` (see
    :meth:`~demitasse.model.CompressedModel.provenance`); ``encoder``: what identifies it."""
    return {
        "demitasse_version": demitasse_version(),
        "encoder": encoder,
        "layer": model.layer,
        "method": model.method,
        "fitted_state": fitted_state_hash(model),
        "dim": dim,
        "precision": precision,
        "normalize": model.normalize,
    }


def directory_fingerprint(path: Path) -> str | None:
    """The content fingerprint of an encoder's folder (None: it loads by name, not a folder)."""
    from demitasse.encoders.cache import fingerprint_directory

    return fingerprint_directory(path) if path.is_dir() else None


def hash_texts(texts: Sequence[str]) -> str:
    """The SHA-256 of the fit texts, one a line."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def hash_vectors(X: np.ndarray) -> str:
    """The SHA-256 of the fit vectors' shape and float32 values."""
    digest = hashlib.sha256(str(X.shape).encode())
    for start in range(0, X.shape[0], 65536):
        digest.update(np.ascontiguousarray(X[start : start + 65536], dtype=np.float32).tobytes())
    return digest.hexdigest()
