"""Write a static model in the model2vec layout.

The directory loads with ``model2vec.StaticModel.from_pretrained(path)`` and with
``SentenceTransformer(path)`` (a ``StaticEmbedding`` module, then ``Normalize``), and both give
the vectors demitasse gives: the same tokenizer, the same mean over tokens, no truncation.
Neither library is needed to write it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from demitasse.io import atomic_directory
from demitasse.static.model import StaticModel

EXPORT_INFO = "demitasse_export.json"


def export_model2vec(model: StaticModel | str | Path, out: str | Path) -> Path:
    """Export a :class:`StaticModel` (or the directory it was saved to) to ``out``."""
    if not isinstance(model, StaticModel):
        model = StaticModel.load(model)
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
    with atomic_directory(out, kind="model2vec export", recognise=_earlier_export) as tmp:
        save_file(
            {"embeddings": np.ascontiguousarray(model.vectors)}, str(tmp / "model.safetensors")
        )
        model.tokenizer.save(str(tmp / "tokenizer.json"))
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (tmp / "modules.json").write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
        if model.normalize:
            (tmp / "1_Normalize").mkdir()
        info = {"name": model.name, "dim": model.dim, "metadata": model.metadata}
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return Path(out)


def _earlier_export(path: Path) -> bool:
    """A model2vec folder demitasse wrote before outputs carried a marker."""
    return (path / EXPORT_INFO).is_file() and (path / "config.json").is_file()
