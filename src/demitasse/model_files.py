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

What belongs together is checked at load (:func:`read_model_dir`): config.json records the
content hash of each part folder (``"part_hashes"``: the sha256 of every file in it,
:func:`~demitasse.encoders.cache.content_hash`), and a part whose files hash otherwise is
refused in one line naming it, even with the shapes of the one it replaces; the widths must
chain (the encoder's into the compressor, the compressor's into the quantiser, the encoder's
into the rescoring ranges). The encoder is checked when it is loaded, against its record's
fingerprint (:mod:`demitasse.model_encoder`). A record without the fingerprint or without the
parts' hashes is a damaged directory, refused: removing them does not switch the checks off.
Large files are hashed through the cache of :mod:`demitasse.encoders.file_hashes`, so a warm
load reads their stamps, not their bytes.

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
from typing import TYPE_CHECKING, Any

import numpy as np

from demitasse.compress import Compressor, Quantizer, load_compressor, load_quantizer
from demitasse.encoders.cache import content_hash
from demitasse.errors import DemitasseError, ParameterError, SavedStateError
from demitasse.io import MARKER, atomic_directory, check_directory_target
from demitasse.persistence import CONFIG_FILE, demitasse_version, read_config
from demitasse.search import RESCORE_PRECISIONS

if TYPE_CHECKING:
    from demitasse.model_recipe import Recipe, RuntimeSettings

MODEL_KIND = "demitasse-model"
#: 3: every model records its rescoring settings (null when it does not rescore).
#: 4: the content hash of every part folder, and the full-content encoder fingerprint.
FORMAT_VERSION = 4
COMPRESSOR_DIR = "compressor"
QUANTIZER_DIR = "quantizer"
RESCORE_DIR = "rescore"
#: The folder of the encoder's ONNX graph (:mod:`demitasse.encoders.onnx_graph`).
GRAPH_DIR = "encoder"
#: The kind of output the marker of a model directory names.
OUTPUT_KIND = "model"
#: The config.json key of the part folders' content hashes ("compressor/" → sha256).
PART_HASHES = "part_hashes"
#: What the encoder record of a model with an encoder must hold.
ENCODER_RECORD = {"source": str, "kind": str, "name": str, "dim": int, "num_layers": int}

#: The saved parts of a model, by the folder each is saved in (None: the model has none).
Parts = dict[str, Compressor | Quantizer | None]


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
    recipe: Recipe,
    settings: RuntimeSettings,
    encoder: dict[str, Any] | None,
    output_dim: int,
    precisions: list[str],
    matryoshka: bool,
    fit_info: dict[str, Any] | None,
    *,
    has_rescore_ranges: bool,
) -> dict[str, Any]:
    """The config.json of a fitted model of ``recipe`` run with ``settings``, whose encoder
    is recorded as ``encoder`` and whose widths below the widest are prefixes when it is
    ``matryoshka``."""
    rescore = None
    if recipe.rescore_factor is not None:
        rescore = {
            "factor": recipe.rescore_factor,
            "precision": recipe.rescore_precision,
            "quantizer": RESCORE_DIR if has_rescore_ranges else None,
        }
    return {
        "kind": MODEL_KIND,
        "format_version": FORMAT_VERSION,
        "demitasse_version": demitasse_version(),
        "encoder": encoder,
        "layer": recipe.layer,
        "input_dim": recipe.input_dim,
        "compressor": None if recipe.compressor == "none" else COMPRESSOR_DIR,
        "method": recipe.compressor,
        "precision": recipe.precision,
        "quantizer": None if recipe.precision == "float32" else QUANTIZER_DIR,
        "normalize": recipe.normalize,
        "batch_size": settings.batch_size,
        "backend": settings.backend,
        "output_dim": output_dim,
        "matryoshka": matryoshka,
        "precisions": precisions,
        "fit": fit_info,
        "rescore": rescore,
        "graph": None,
    }


def model_parts(
    compressor: Compressor | None, quantizer: Quantizer | None, rescore_ranges: Quantizer | None
) -> Parts:
    """A model's fitted parts, by the folder each is saved in."""
    return {COMPRESSOR_DIR: compressor, QUANTIZER_DIR: quantizer, RESCORE_DIR: rescore_ranges}


def write_model_dir(
    path: str | Path,
    config: dict[str, Any],
    parts: Parts,
    graph: Callable[[Path], None] | None = None,
) -> Path:
    """Write the model directory atomically: config.json (with the content hash of each part
    folder), each part in its folder, and the encoder's graph folder when ``graph`` is given
    (it writes the folder it is handed)."""
    path = Path(path)
    config = {**config, "graph": None if graph is None else GRAPH_DIR}
    # The library checks as the CLI does: a model saved into its own encoder folder would
    # change the files (and the fingerprint) of the encoder it was fitted on.
    with atomic_directory(path, kind=OUTPUT_KIND, inputs=[local_encoder(config)]) as tmp:
        _save_parts(tmp, parts)
        if graph is not None:
            graph(tmp / GRAPH_DIR)
        folders = [d for d, part in parts.items() if part is not None]
        folders += [GRAPH_DIR] if graph is not None else []
        # Not through the cache of file hashes: these paths are about to move.
        hashes = {f"{d}/": content_hash(tmp / d, cache=False) for d in sorted(folders)}
        config[PART_HASHES] = hashes
        text = json.dumps(config, indent=2, ensure_ascii=False, allow_nan=False)
        (tmp / CONFIG_FILE).write_text(text + "\n", encoding="utf-8")
    return path


def _save_parts(root: Path, parts: Parts) -> None:
    for directory, part in parts.items():
        if part is not None:
            part.save(root / directory)


def fitted_state_hash(recipe: Recipe, parts: Parts) -> str:
    """A content hash of everything fitted (``parts``: compressor, quantisers, rescoring
    ranges: each one's saved parameters and arrays) and of the settings of ``recipe`` that
    change vectors: equal hashes give equal outputs. Computed in memory, nothing written."""
    digest = hashlib.sha256()
    settings = {
        "layer": recipe.layer,
        "normalize": recipe.normalize,
        "precision": recipe.precision,
        "rescore": [recipe.rescore_factor, recipe.rescore_precision],
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for directory, part in sorted(parts.items()):
        if part is None:
            continue
        config, arrays = part.saved_state()
        # The versions of demitasse that wrote it do not change what it computes.
        config = {key: value for key, value in config.items() if key != "demitasse_version"}
        digest.update(directory.encode() + b"\0")
        digest.update(json.dumps(config, sort_keys=True, default=str).encode())
        for name in sorted(arrays):
            array = np.ascontiguousarray(arrays[name])
            digest.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


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


def is_saved_compressor(path: str | Path) -> bool:
    """Whether ``path`` holds a saved compressor (a sentence-transformers folder has a
    config.json too, without this kind)."""
    try:
        return read_config(Path(path), "model").get("kind") == "compressor"
    except DemitasseError:
        return False


def holds_saved_output(path: str | Path) -> bool:
    """Whether ``path`` is a model or compressor folder demitasse wrote (its marker) or one
    whose config.json is not even JSON: loaded as a model, to say what is wrong with it, never
    as an encoder."""
    folder = Path(path)
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        marker = None
    if isinstance(marker, dict) and marker.get("kind") in (OUTPUT_KIND, "compressor"):
        return True
    config = folder / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return True
    return False


def check_model_target(path: str | Path, inputs: Iterable[str | Path | None] = ()) -> Path:
    """``path`` as a Path if a model may be saved there (nothing, an empty folder or a model
    saved by demitasse; none of ``inputs``, inside or holding one), else a one-line error: for
    callers that check first."""
    return check_directory_target(path, kind=OUTPUT_KIND, inputs=inputs)


def model_inputs(model: str | Path | None) -> list[str]:
    """What a command reads of the user's through its model argument, read without loading
    it: the path itself when it exists, and the local encoder folder a model directory names
    (its files are read too; a hub name is nothing of the user's)."""
    if model is None or not Path(model).expanduser().exists():
        return []
    found = [str(model)]
    source = local_encoder(read_model_config(model)) if is_model_dir(model) else None
    return found if source is None else [*found, source]


def local_encoder(config: dict[str, Any]) -> str | None:
    """The local folder a model's config names as its encoder's source (None for a hub name,
    a static or vectors-only model)."""
    encoder = config.get("encoder")
    source = encoder.get("source") if isinstance(encoder, dict) else None
    return source if isinstance(source, str) and Path(source).is_dir() else None


def read_model_dir(path: str | Path) -> SavedModel:
    """Read a model directory, or a bare saved compressor (as a vectors-only model)."""
    path = Path(path)
    config = read_model_config(path)
    kind = config.get("kind", "compressor")
    if kind not in ("compressor", MODEL_KIND):
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: kind {kind!r} is neither "
                              f"{MODEL_KIND!r} nor 'compressor'")  # fmt: skip
    if kind == "compressor":
        compressor = load_compressor(path)
        fit_info = {"source": "vectors", "fit_data": compressor.fit_data_}
        return SavedModel(path, compressor, int(compressor.n_features_in_), fit_info)
    return _read_model(path, config)


def _field(config: dict[str, Any], path: Path, key: str, kinds: type | tuple[type, ...]) -> Any:
    value = config.get(key)
    if not isinstance(value, kinds) or isinstance(value, bool) != (kinds is bool):
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: bad or missing {key!r}")
    return value


def _check_format(path: Path, config: dict[str, Any]) -> None:
    """Refuse, in one line, a model directory written in another format than this one."""
    version = _field(config, path, "format_version", int)
    if version != FORMAT_VERSION:
        remedy = "upgrade demitasse" if version > FORMAT_VERSION else "fit it again"
        raise SavedStateError(
            f"model directory {path} was written in format {version}; this demitasse reads "
            f"format {FORMAT_VERSION} — {remedy}"
        )


def _read_model(path: Path, config: dict[str, Any]) -> SavedModel:
    _check_format(path, config)
    if "encoder" not in config:
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: missing 'encoder'")
    encoder = _encoder_record(path, config["encoder"])
    layer = None if config.get("layer") is None else _field(config, path, "layer", int)
    fit_info = config.get("fit")
    if not isinstance(fit_info, dict):
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: bad or missing 'fit'")
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
        encoder=encoder,
        layer=layer,
        backend=_field(config, path, "backend", str),
    )
    if compressor is not None and compressor.n_features_in_ != saved.input_dim:
        raise SavedStateError(f"{path}: compressor/ takes {compressor.n_features_in_} dims, "
                              f"config.json says {saved.input_dim}")  # fmt: skip
    _read_quantizer(saved, config, precision)
    _read_rescoring(saved, config)
    graph = config.get("graph")  # absent: written before graphs were (read as none)
    if graph is not None:
        if graph != GRAPH_DIR or not (path / GRAPH_DIR).is_dir():
            raise SavedStateError(f"{path}: config.json names the graph folder {graph!r}, "
                                  f"expected {GRAPH_DIR}/ (missing or renamed)")  # fmt: skip
        saved.graph = path / GRAPH_DIR
    _check_part_hashes(saved, config)
    return saved


def _encoder_record(path: Path, encoder: Any) -> dict[str, Any] | None:
    """The checked record of the model's encoder (None: a vectors-only model): one without
    its fingerprint is damaged, as the check of the encoder's files rests on it."""
    if encoder is None:
        return None
    if not isinstance(encoder, dict) or any(
        not isinstance(encoder.get(key), kind) or isinstance(encoder.get(key), bool)
        for key, kind in ENCODER_RECORD.items()
    ):
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: bad 'encoder'")
    # null: an encoder object without files (nothing to hash); the loaded one must be too.
    if not isinstance(encoder.get("fingerprint", 0), str | None):
        raise SavedStateError(
            f"{path}: the encoder record in {CONFIG_FILE} lacks its content fingerprint, so its "
            "encoder cannot be checked; the directory is damaged — fit the model again"
        )
    return dict(encoder)


def _read_quantizer(saved: SavedModel, config: dict[str, Any], precision: str) -> None:
    """The quantiser of the model's codes: of its precision, taking the compressor's width."""
    path = saved.path
    if not config.get("quantizer"):
        if precision != "float32":
            raise SavedStateError(f"{path}: precision {precision} needs quantizer/, missing")
        return
    saved.quantizer = load_quantizer(path / QUANTIZER_DIR)
    if saved.quantizer.precision != precision:
        raise SavedStateError(f"{path}: quantizer/ does not match precision {precision}")
    takes = saved.quantizer.__dict__.get("n_features_in_")
    compressor = saved.compressor
    width = saved.input_dim if compressor is None else int(compressor.output_dim_)
    if takes is not None and takes != width:
        source = "the encoder" if compressor is None else "compressor/"
        raise SavedStateError(f"{path}: quantizer/ takes {takes} dims, {source} gives {width}; "
                              "it does not belong to this model")  # fmt: skip


def _check_part_hashes(saved: SavedModel, config: dict[str, Any]) -> None:
    """Refuse a part folder whose files are not those saved with this model (their content
    hash recorded at save), or a record of the hashes that is missing or incomplete."""
    path = saved.path
    folders = [
        COMPRESSOR_DIR if saved.compressor is not None else None,
        QUANTIZER_DIR if saved.quantizer is not None else None,
        RESCORE_DIR if saved.rescore_quantizer is not None else None,
        GRAPH_DIR if saved.graph is not None else None,
    ]
    expected = sorted(f"{folder}/" for folder in folders if folder is not None)
    recorded = config.get(PART_HASHES)
    if (
        not isinstance(recorded, dict)
        or sorted(recorded) != expected
        or not all(isinstance(value, str) for value in recorded.values())
    ):
        names = ", ".join(expected) or "none"
        raise SavedStateError(
            f"{path}: {CONFIG_FILE} does not record the content hashes of exactly its parts "
            f"({names}), so they cannot be checked; the directory is damaged — fit the model "
            "again"
        )
    for folder in expected:
        if content_hash(path / folder) != recorded[folder]:
            raise SavedStateError(
                f"{path}: {folder} does not belong to this model: its content hash differs "
                "from the one recorded at fit"
            )


def _read_rescoring(saved: SavedModel, config: dict[str, Any]) -> None:
    """The rescoring settings and int8 ranges (``"rescore": null``: the codes' ranking is
    final)."""
    path = saved.path
    if "rescore" not in config:
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: missing 'rescore'")
    rescore = config["rescore"]
    if rescore is None:
        return
    if not isinstance(rescore, dict):
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: bad 'rescore'")
    try:
        saved.rescore_factor, saved.rescore_precision = rescoring_settings(
            rescore.get("factor"), rescore.get("precision")
        )
    except DemitasseError as exc:
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: 'rescore': {exc}") from None
    if saved.rescore_factor is None:
        raise SavedStateError(f"invalid {CONFIG_FILE} in {path}: 'rescore' lacks its factor")
    stored = rescore.get("quantizer")
    if saved.rescore_precision != "int8":
        if stored is not None:
            raise SavedStateError(f"{path}: float32 rescoring takes no {RESCORE_DIR}/")
        return
    if stored != RESCORE_DIR:
        raise SavedStateError(f"{path}: int8 rescoring needs {RESCORE_DIR}/, missing")
    quantizer = load_quantizer(path / RESCORE_DIR)
    if quantizer.precision != "int8" or quantizer.n_features_in_ != saved.input_dim:
        raise SavedStateError(
            f"{path}: {RESCORE_DIR}/ must hold int8 ranges of the encoder's {saved.input_dim} dims"
        )
    saved.rescore_quantizer = quantizer


def saved_rescoring(
    saved: SavedModel, factor: float | None, precision: str | None
) -> tuple[float | None, str | None]:
    """The rescoring a loaded model searches with: the saved one, or ``factor`` (with
    ``precision``, default the saved one or int8) in its place."""
    if factor is None:
        if precision is not None:
            raise ParameterError("rescore_precision needs rescore_factor")
        return saved.rescore_factor, saved.rescore_precision
    precision = precision or saved.rescore_precision or "int8"
    if precision == "int8" and saved.rescore_quantizer is None:
        raise ParameterError(
            f"the model directory {saved.path} keeps no int8 ranges of its encoder's output "
            "for rescoring (fit it with rescore_factor); rescore with float32"
        )
    return rescoring_settings(factor, precision)


def rescoring_settings(factor: Any, precision: Any) -> tuple[float | None, str | None]:
    """The checked (factor, precision) pair: both None without rescoring; a factor alone
    keeps int8 vectors."""
    if factor is None:
        if precision is not None:
            raise ParameterError(
                f"rescore_precision {precision!r} needs rescore_factor (F ≥ 1: how many "
                "candidates per result the codes find for rescoring)"
            )
        return None, None
    if isinstance(factor, bool) or not isinstance(factor, int | float | np.number):
        raise ParameterError(f"rescore_factor must be a number ≥ 1, got {factor!r}")
    if not np.isfinite(factor) or factor < 1:
        raise ParameterError(f"rescore_factor must be a number ≥ 1, got {factor!r}")
    precision = "int8" if precision is None else precision
    if precision not in RESCORE_PRECISIONS:
        raise ParameterError(
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
    recipe: Recipe, state_hash: str, encoder: dict[str, Any] | None, dim: int, precision: str
) -> dict[str, Any]:
    """What identifies the output of a model of ``recipe`` at ``dim`` and ``precision`` (see
    :meth:`~demitasse.model.CompressedModel.provenance`); ``encoder``: what identifies it."""
    return {
        "demitasse_version": demitasse_version(),
        "encoder": encoder,
        "layer": recipe.layer,
        "method": recipe.compressor,
        "fitted_state": state_hash,
        "dim": dim,
        "precision": precision,
        "normalize": recipe.normalize,
    }


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
