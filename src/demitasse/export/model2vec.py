"""Write a static model in the model2vec layout.

The directory loads with ``model2vec.StaticModel.from_pretrained(path)`` and with
``SentenceTransformer(path)`` (a ``StaticEmbedding`` module, then ``Normalize``), and both give
the vectors demitasse gives: the same tokenizer, the same mean over tokens, no truncation.
Neither library is needed to write it.

A compressor that is a bias-free linear map (truncation, random projection) commutes with the
mean over tokens, so it is folded into the token vectors: the export then gives demitasse's
compressed vectors, renormalised when the static model normalises (same cosines).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from demitasse.compress import Compressor
from demitasse.errors import ExportError
from demitasse.io import atomic_directory, check_directory_target
from demitasse.static.model import StaticModel

EXPORT_INFO = "demitasse_export.json"


EXPORT_KIND = "model2vec export"


def check_export_target(out: str | Path) -> Path:
    """``out`` as a Path if a model2vec export may be written there (nothing, an empty folder
    or a model2vec export demitasse wrote), else a one-line error."""
    return check_directory_target(out, kind=EXPORT_KIND)


def export_model2vec(
    model: StaticModel | str | Path,
    out: str | Path,
    *,
    compressor: Compressor | None = None,
    dim: int | None = None,
) -> Path:
    """Export a :class:`StaticModel` (or the directory it was saved to) to ``out``, with a
    fitted bias-free linear ``compressor`` (truncate, random) at ``dim`` folded in."""
    check_export_target(out)
    if not isinstance(model, StaticModel):
        model = StaticModel.load(model)
    compressed = None
    if compressor is not None:
        model = _compressed(model, compressor, dim)
        compressed = compressor.metadata
    config = {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": model.metadata.get("teacher"),
        "apply_pca": model.dim,
        "normalize": model.normalize,
        "hidden_dim": model.dim,
        "seq_length": 1_000_000,
        # model2vec would otherwise truncate long texts (to 512 tokens) where demitasse doesn't.
        "max_length": None,
        "embedding_dtype": "float32",
    }
    modules = [
        {"idx": 0, "name": "0", "path": ".", "type": "sentence_transformers.models.StaticEmbedding"}
    ]
    if model.normalize:
        modules.append(
            {
                "idx": 1,
                "name": "1",
                "path": "1_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    with atomic_directory(out, kind=EXPORT_KIND) as tmp:
        save_file(
            {"embeddings": np.ascontiguousarray(model.vectors)}, str(tmp / "model.safetensors")
        )
        model.tokenizer.save(str(tmp / "tokenizer.json"))
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (tmp / "modules.json").write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
        if model.normalize:
            (tmp / "1_Normalize").mkdir()
        info = {
            "name": model.name,
            "dim": model.dim,
            "compressor": compressed,
            "metadata": model.metadata,
        }
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return Path(out)


def _compressed(model: StaticModel, compressor: Compressor, dim: int | None) -> StaticModel:
    """``model`` with ``compressor`` applied to every token vector (mean(W·t) = W·mean(t))."""
    if not compressor.is_fitted or compressor.n_features_in_ != model.dim:
        raise ExportError(
            f"the compressor must be fitted on this static model's {model.dim}-d vectors"
        )
    affine = compressor.as_affine(dim)
    if (
        affine is None
        or affine.bias.any()
        or affine.normalize_input
        or affine.activation != "identity"
    ):
        raise ExportError(
            f"a {compressor.method} compressor cannot be folded into static vectors; only "
            "bias-free linear ones (truncate, random) can"
        )
    k = affine.weight.shape[0]
    vectors = model.vectors[:, :k] if affine.is_truncation else model.vectors @ affine.weight.T
    return StaticModel(
        vectors,
        model.tokenizer,
        name=model.name,
        normalize=model.normalize,
        metadata=model.metadata,
    )
