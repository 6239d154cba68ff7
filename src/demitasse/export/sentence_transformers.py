"""Write a sentence-transformers directory that computes what demitasse computes.

demitasse's float vectors for a model, ``layer``, fitted ``compressor``, ``dim`` and
``normalize`` are ``compressor.transform(encoder.encode(texts, layer=layer), dim=dim)``, then
L2-normalised if ``normalize``; the export's ``SentenceTransformer(path).encode(texts)`` gives
the same vectors. The pipeline is

    Transformer (blocks after ``layer`` dropped) → Pooling → exit head of ``layer`` (Dense)
    → the model's own Normalize → compressor → Normalize (if ``normalize``)

A compressor that is one affine layer (truncation, PCA with centring / whitening / ABTT,
random projection, a pooler head; see :meth:`Compressor.as_affine`) becomes built-in modules
(``truncate_dim``, ``Dense`` with its activation, ``Normalize``), so plain
``SentenceTransformer(path)`` loads it. Any other compressor becomes a
:class:`~demitasse.export.st_modules.CompressorModule`, which needs ``trust_remote_code=True``
and demitasse installed. A fitted quantizer's parameters go into files that
``sentence_transformers.util.quantize_embeddings`` reproduces demitasse's codes from. The
export's README.md says how to load it; ``demitasse_export.json`` records what was exported,
including the widths a server may truncate the output to (``matryoshka_dims``).

Only the precisions sentence-transformers can compute are exported: float32, int8 and binary
(``quantize_embeddings``'s ``int8`` and ``ubinary``). Product and residual codes (``pq16``,
``rq8``) are refused with an :class:`ExportError` that names the precision, rather than
exported as float vectors alone: a folder that silently gave floats where the model gives
codes would not compute what demitasse computes. Export the float vectors from a model fitted
with precision float32 (or call :func:`export_sentence_transformer` without a quantizer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from demitasse.compress import (
    BinaryQuantizer,
    Compressor,
    Float32Quantizer,
    Int8Quantizer,
    Quantizer,
)
from demitasse.compress.base import AffineMap
from demitasse.encoders.transformer import TransformerEncoder, layer_stack
from demitasse.errors import ExportError
from demitasse.export.onnx_files import ONNX_INT8_FILE, write_onnx_files
from demitasse.export.st_rescoring import (
    RescoringPart,
    first_stage_lines,
    rescoring_readme,
    write_rescoring,
)
from demitasse.io import atomic_directory, check_directory_target
from demitasse.loading import load_encoder

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

EXPORT_INFO = "demitasse_export.json"
INT8_RANGES = "int8_ranges.safetensors"
BINARY_THRESHOLDS = "binary_thresholds.safetensors"
BINARY_ROTATION = "binary_rotation.safetensors"


EXPORT_KIND = "sentence-transformers export"
#: The quantisers whose codes sentence-transformers' ``quantize_embeddings`` reproduces.
EXPORTABLE_QUANTIZERS = (Float32Quantizer, Int8Quantizer, BinaryQuantizer)


def check_export_target(out: str | Path) -> Path:
    """``out`` as a Path if an export may be written there (nothing, an empty folder or an
    export demitasse wrote), else a one-line error."""
    return check_directory_target(out, kind=EXPORT_KIND)


def export_sentence_transformer(
    model: str | Path,
    out: str | Path,
    *,
    layer: int | None = None,
    dim: int | None = None,
    compressor: Compressor | None = None,
    quantizer: Quantizer | None = None,
    normalize: bool = False,
    rescoring: RescoringPart | None = None,
) -> Path:
    """Export ``model`` (local path or packaged name) cut to ``layer``, compressed to ``dim``.

    ``compressor`` is fitted on the vectors of ``layer`` (any registered method); ``dim``
    defaults to its output width, or the model's without one. ``quantizer`` (fitted on the
    compressed vectors) adds its calibration to the export: float32, int8 or binary, the
    precisions sentence-transformers computes (product and residual codes are refused).
    ``rescoring`` (a model that rescores) adds the ranges of what each document keeps and the
    README's search with rescoring (:mod:`demitasse.export.st_rescoring`). Raises
    :class:`ExportError` (and writes nothing) for what cannot be carried.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize

    check_export_target(out)  # before the slow part: a refused output costs nothing
    encoder = load_encoder(model, cache=False, device="cpu")
    if not isinstance(encoder, TransformerEncoder):
        raise ExportError(f"{model} is a static model; export it with export_model2vec")
    layer, dim = _check_layer_and_dim(encoder, layer, dim, compressor)
    _check_quantizer(quantizer, dim)

    modules = _encoder_modules(encoder, layer)
    encoder_modules = len(modules)
    tail, truncate_dim = _compressor_modules(compressor, encoder.dim, dim, normalize)
    modules += tail
    if normalize:
        modules.append(Normalize())
    st = SentenceTransformer(modules=modules, device="cpu", truncate_dim=truncate_dim)
    custom = any(not type(m).__module__.startswith("sentence_transformers.") for m in modules)
    dims = compressor.prefix_dims(dim) if compressor is not None else list(range(1, dim + 1))
    info: dict[str, Any] = {
        "source": str(encoder.path),
        "name": encoder.name,
        "layer": layer,
        "dim": dim,
        "compressor": None if compressor is None else compressor.metadata,
        "normalize": bool(normalize),
        "matryoshka_dims": dims,
        "trust_remote_code": custom,
        "quantization": None,
    }
    _save_export(st, out, info, quantizer, (rescoring, encoder_modules))
    return Path(out)


def _check_layer_and_dim(
    encoder: TransformerEncoder, layer: int | None, dim: int | None, compressor: Compressor | None
) -> tuple[int, int]:
    """The layer to cut at and the output width, defaults filled in; what cannot be, refused."""
    layer = encoder.num_layers if layer is None else int(layer)
    if not 1 <= layer <= encoder.num_layers:
        raise ExportError(f"--layer must be in 1..{encoder.num_layers} for {encoder.name}")
    width = _check_compressor(compressor, encoder.dim)
    dim = width if dim is None else int(dim)
    if not 1 <= dim <= width:
        raise ExportError(f"--dim must be in 1..{width} for {encoder.name}")
    if compressor is not None and not compressor.matryoshka and dim != width:
        raise ExportError(f"a {compressor.method} compressor only produces dim {width}, not {dim}")
    return layer, dim


def _save_export(
    st: SentenceTransformer,
    out: str | Path,
    info: dict[str, Any],
    quantizer: Quantizer | None,
    rescoring: tuple[RescoringPart | None, int],
) -> None:
    """The model, its ONNX files, Matryoshka widths, quantisation, export info and README:
    all or nothing."""
    with atomic_directory(out, kind=EXPORT_KIND) as tmp:
        st.save(str(tmp), create_model_card=False)
        info["onnx"] = write_onnx_files(st[0], tmp)
        # sentence-transformers ignores keys it does not know and drops them on a re-save.
        config_path = tmp / "config_sentence_transformers.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["matryoshka_dims"] = info["matryoshka_dims"]
        config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        info["quantization"] = _write_quantization(quantizer, info["dim"], tmp)
        info["rescoring"] = write_rescoring(*rescoring, tmp)
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(_readme(info), encoding="utf-8")


def _check_compressor(compressor: Compressor | None, width: int) -> int:
    """The compressor's output width; it must be fitted on ``width``-dimensional vectors."""
    if compressor is None:
        return width
    if not isinstance(compressor, Compressor) or not compressor.is_fitted:
        raise ExportError(f"compressor must be a fitted demitasse Compressor, got {compressor!r}")
    if compressor.n_features_in_ != width:
        raise ExportError(
            f"the {compressor.method} compressor was fitted on {compressor.n_features_in_}-d "
            f"vectors but the model's are {width}-d"
        )
    return int(compressor.output_dim_)


def check_exportable(quantizer: Quantizer | None) -> None:
    """A one-line :class:`ExportError` for codes sentence-transformers cannot compute."""
    if quantizer is not None and not isinstance(quantizer, EXPORTABLE_QUANTIZERS):
        raise ExportError(
            f"cannot export {quantizer.precision} codes: sentence-transformers has no "
            "product/residual codes; export the float vectors with precision float32 (a model "
            "fitted with --precision float32)"
        )


def _check_quantizer(quantizer: Quantizer | None, dim: int) -> None:
    if quantizer is None:
        return
    if not isinstance(quantizer, Quantizer) or (quantizer.needs_fit and not quantizer.is_fitted):
        raise ExportError(f"quantizer must be a fitted demitasse Quantizer, got {quantizer!r}")
    check_exportable(quantizer)
    fitted = quantizer.metadata["input_dim"]
    if fitted is not None and fitted < dim:
        raise ExportError(
            f"the {quantizer.precision} quantizer was fitted on {fitted}-d vectors, "
            f"fewer than the {dim} exported"
        )
    rotation = getattr(quantizer, "rotation", "none")
    if rotation != "none" and fitted != dim:
        raise ExportError(
            f"the binary quantizer's {rotation} rotation spans all {fitted} dims it was fitted "
            f"on; export {fitted} dims, not {dim}"
        )


def _encoder_modules(encoder: TransformerEncoder, layer: int) -> list[torch.nn.Module]:
    """The encoder's pipeline cut after ``layer``, with that layer's exit head if it has one."""
    modules = list(encoder.sentence_transformer)
    if layer == encoder.num_layers:
        return modules
    stack = layer_stack(encoder.model)
    if stack is None:
        raise ExportError(f"cannot find the transformer blocks of {encoder.name} to cut")
    owner, attr = stack
    setattr(owner, attr, torch.nn.ModuleList(list(getattr(owner, attr))[:layer]))
    encoder.model.config.num_hidden_layers = layer
    # The pipeline's Dense modules belong to the last layer (see TransformerEncoder.heads).
    modules = [m for m in modules if type(m).__name__ != "Dense"]
    head = encoder.heads.get(layer)
    if head is None:
        return modules
    if not isinstance(head, torch.nn.Linear):
        raise ExportError("only a linear exit head can be exported as a Dense module")
    weight = head.weight.detach().cpu().numpy()
    dense = _dense(AffineMap(weight, head.bias.detach().cpu().numpy()))
    after = next(
        (i + 1 for i, m in enumerate(modules) if type(m).__name__ == "Pooling"), len(modules)
    )
    return [*modules[:after], dense, *modules[after:]]


def _compressor_modules(
    compressor: Compressor | None, width: int, dim: int, normalize: bool
) -> tuple[list[torch.nn.Module], int | None]:
    """Modules computing ``compressor.transform(·, dim)``, and the ``truncate_dim`` to set."""
    from sentence_transformers.base.modules import Normalize

    affine: AffineMap | None
    if compressor is None:
        affine = AffineMap(np.eye(dim, width, dtype=np.float32), np.zeros(dim, np.float32))
    else:
        affine = compressor.as_affine(dim)
    if affine is None:
        from demitasse.export.st_modules import CompressorModule

        assert compressor is not None  # without one the map is the identity
        return [CompressorModule(compressor, dim)], None
    if affine.is_truncation:
        if dim == affine.weight.shape[1]:
            return [], None
        if not normalize:  # truncate_dim cuts after the last module, so only without Normalize
            return [], dim
    modules: list[torch.nn.Module] = [Normalize()] if affine.normalize_input else []
    return [*modules, _dense(affine)], None


def _dense(affine: AffineMap) -> torch.nn.Module:
    from sentence_transformers.base.modules import Dense

    activation = {"identity": torch.nn.Identity, "tanh": torch.nn.Tanh}[affine.activation]
    out_features, in_features = affine.weight.shape
    return Dense(
        in_features,
        out_features,
        activation_function=activation(),
        init_weight=torch.tensor(affine.weight, dtype=torch.float32),
        init_bias=torch.tensor(affine.bias, dtype=torch.float32),
    )


def _write_quantization(quantizer: Quantizer | None, dim: int, folder: Path) -> dict | None:
    """Write the quantizer's parameters for the ``dim`` exported columns; describe them."""
    if quantizer is None:
        return None
    from safetensors.numpy import save_file

    info: dict[str, Any] = {"precision": quantizer.precision, "params": quantizer.get_params()}
    if isinstance(quantizer, Int8Quantizer):
        ranges = np.stack([quantizer.lo_[:dim], quantizer.hi_[:dim]]).astype(np.float32)
        save_file({"ranges": np.ascontiguousarray(ranges)}, str(folder / INT8_RANGES))
        info["file"] = INT8_RANGES
    elif isinstance(quantizer, BinaryQuantizer) and quantizer.rotation != "none":
        rotation = {"mean": quantizer.mean_, "rotation": quantizer.rotation_}
        save_file(
            {k: np.ascontiguousarray(v) for k, v in rotation.items()}, str(folder / BINARY_ROTATION)
        )
        info["file"] = BINARY_ROTATION
    elif isinstance(quantizer, BinaryQuantizer) and quantizer.threshold == "mean":
        thresholds = np.ascontiguousarray(quantizer.thresholds_[:dim], dtype=np.float32)
        save_file({"thresholds": thresholds}, str(folder / BINARY_THRESHOLDS))
        info["file"] = BINARY_THRESHOLDS
    return info


def _readme(info: dict[str, Any]) -> str:
    """How to load and use the export (README.md in the exported folder)."""
    compressor = info["compressor"]
    what = f"{info['name']} up to layer {info['layer']}"
    if compressor is not None:
        what += f", compressed by a fitted `{compressor['method']}` compressor"
    what += f", {info['dim']} dimensions"
    if info["normalize"]:
        what += ", L2-normalised"
    if info["trust_remote_code"]:
        load = (
            "It contains a demitasse module (`demitasse.export.st_modules.CompressorModule`), "
            "so it needs demitasse installed and `trust_remote_code=True`:\n\n"
            "```bash\npip install demitasse\n```\n\n```python\n"
            "from sentence_transformers import SentenceTransformer\n\n"
            'model = SentenceTransformer("path/to/this/folder", trust_remote_code=True)\n'
            "embeddings = model.encode(texts)\n```\n\n"
            "The compressor is saved in that module's folder (`config.json` + "
            "`state.safetensors`, no pickle); `demitasse.compress.load_compressor(folder)` "
            "loads it on its own. The module is for inference: no gradients flow through it."
        )
    else:
        load = (
            "It uses only sentence-transformers' own modules, so it loads without demitasse "
            "and without `trust_remote_code`:\n\n```python\n"
            "from sentence_transformers import SentenceTransformer\n\n"
            'model = SentenceTransformer("path/to/this/folder")\n'
            "embeddings = model.encode(texts)\n```"
        )
    dims = info["matryoshka_dims"]
    span = f"{dims[0]}..{dims[-1]}" if len(dims) > 1 else str(dims[0])
    renorm = (
        " and L2-normalising them again "
        "(`encode(texts, truncate_dim=k, normalize_embeddings=True)`)"
        if info["normalize"]
        else " (`encode(texts, truncate_dim=k)`)"
    )
    matryoshka = (
        f"## Dimensions\n\nThe output has {info['dim']} dimensions. Widths a server may serve "
        f"by keeping the first k of them{renorm}: {span}, listed as `matryoshka_dims` in "
        f"`{EXPORT_INFO}` and `config_sentence_transformers.json`. Other widths are not what "
        "demitasse computes at that width."
    )
    return "\n\n".join(
        [
            f"# {info['name']} (demitasse export)",
            f"Exported by demitasse: {what}. `SentenceTransformer(...).encode(texts)` gives the "
            "vectors demitasse gives for the same settings. What was exported is recorded "
            f"in `{EXPORT_INFO}`.",
            "## Loading",
            load,
            _onnx_readme(),
            matryoshka,
            *_quantization_readme(info["quantization"]),
            *rescoring_readme(info, first_stage_lines(info["quantization"], info["dim"])),
        ]
    )


def _onnx_readme() -> str:
    """How sentence-transformers runs the export's ONNX files."""
    return (
        "## ONNX Runtime\n\n`onnx/model.onnx` is the transformer as exported (ONNX, float32) "
        "and `onnx/" + ONNX_INT8_FILE + "` its int8 version (dynamic quantisation, int8 weights "
        "per channel); sentence-transformers runs them with Optimum installed "
        "(`pip install sentence-transformers[onnx]`):\n\n```python\n"
        'model = SentenceTransformer("path/to/this/folder", backend="onnx")\n'
        'int8 = SentenceTransformer("path/to/this/folder", backend="onnx", '
        'model_kwargs={"file_name": "onnx/' + ONNX_INT8_FILE + '"})\n```'
    )


def _quantization_readme(quantization: dict[str, Any] | None) -> list[str]:
    if quantization is None:
        return []
    precision = quantization["precision"]
    if precision == "int8":
        body = (
            f"`{INT8_RANGES}` holds one float32 tensor `ranges` of shape [2, dim]: row 0 the "
            "per-dimension minimum, row 1 the maximum of the calibration data. "
            "sentence-transformers reproduces demitasse's int8 codes exactly from it:\n\n"
            "```python\nfrom safetensors.numpy import load_file\n"
            "from sentence_transformers.util import quantize_embeddings\n\n"
            f'ranges = load_file("{INT8_RANGES}")["ranges"]\n'
            'codes = quantize_embeddings(embeddings, "int8", ranges=ranges)  # float32 input\n'
            "```\n\n"
            "that is `clip(floor((x - min) / ((max - min) / 255)), 0, 255) - 128` in float32. "
            "For the first k dimensions use `ranges[:, :k]`."
        )
    elif precision == "binary" and quantization["params"].get("rotation", "none") != "none":
        body = (
            f"`{BINARY_ROTATION}` holds two float32 tensors: `mean` [dim] and `rotation` "
            f"[dim, dim] (a {quantization['params']['rotation']} rotation, orthogonal). A bit "
            "is set where the centred, rotated value is > 0; demitasse's packed codes are\n\n"
            "```python\nfrom safetensors.numpy import load_file\n"
            "from sentence_transformers.util import quantize_embeddings\n\n"
            f'r = load_file("{BINARY_ROTATION}")\n'
            'codes = quantize_embeddings((embeddings - r["mean"]) @ r["rotation"], "ubinary")\n'
            "```\n\n"
            "The rotation mixes every dimension: codes need all of them (keep the float "
            "vectors, which are not rotated, for rescoring)."
        )
    elif precision == "binary" and quantization["params"]["threshold"] == "mean":
        body = (
            f"`{BINARY_THRESHOLDS}` holds one float32 tensor `thresholds` [dim], the "
            "calibration mean of each dimension; a bit is set where the value exceeds it. "
            "demitasse's packed codes are\n\n"
            "```python\nfrom safetensors.numpy import load_file\n"
            "from sentence_transformers.util import quantize_embeddings\n\n"
            f'thresholds = load_file("{BINARY_THRESHOLDS}")["thresholds"]\n'
            'codes = quantize_embeddings(embeddings - thresholds, "ubinary")\n```'
        )
    elif precision == "binary":
        body = (
            "One bit per dimension, set where the value is > 0, packed 8 to a byte: "
            "demitasse's codes are exactly "
            '`quantize_embeddings(embeddings, "ubinary")` '
            "(`sentence_transformers.util`); similarity is the number of agreeing bits."
        )
    else:
        body = "float32: the vectors are stored as they are."
    return [f"## Quantisation ({precision})", body]
