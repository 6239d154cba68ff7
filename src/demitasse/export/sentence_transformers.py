"""Write a sentence-transformers directory cut after layer i and truncated to k dimensions.

The directory loads with plain ``SentenceTransformer(path)`` and gives what demitasse gives
for the same model, layer and truncation: the blocks after ``layer`` are dropped from the
weights and the config, and ``truncate_dim`` (stored in ``config_sentence_transformers.json``)
keeps the first ``dim`` dimensions after pooling and normalisation, as ``truncate`` does. A
model trained with exit heads gets the head of ``layer`` as a ``Dense`` module (identity
activation) between pooling and normalisation, where demitasse applies it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from demitasse.encoders.transformer import layer_stack, load_encoder
from demitasse.errors import DemitasseError
from demitasse.io import atomic_directory

EXPORT_INFO = "demitasse_export.json"


def export_sentence_transformer(
    model: str | Path,
    out: str | Path,
    layer: int | None = None,
    dim: int | None = None,
) -> Path:
    """Export ``model`` (local path or packaged name) cut to ``layer`` and ``dim``."""
    encoder = load_encoder(model, cache=False, device="cpu")
    layer = encoder.num_layers if layer is None else int(layer)
    dim = encoder.dim if dim is None else int(dim)
    if not 1 <= layer <= encoder.num_layers:
        raise DemitasseError(f"--layer must be in 1..{encoder.num_layers} for {encoder.name}")
    if not 1 <= dim <= encoder.dim:
        raise DemitasseError(f"--dim must be in 1..{encoder.dim} for {encoder.name}")
    if layer < encoder.num_layers:
        stack = layer_stack(encoder.model)
        if stack is None:
            raise DemitasseError(f"cannot find the transformer blocks of {encoder.name} to cut")
        owner, attr = stack
        setattr(owner, attr, torch.nn.ModuleList(list(getattr(owner, attr))[:layer]))
        encoder.model.config.num_hidden_layers = layer
    st = encoder.sentence_transformer
    if layer < encoder.num_layers and layer in encoder.heads:
        st = _with_exit_head(st, encoder.heads[layer])
    st.truncate_dim = dim if dim < encoder.dim else None
    info = {"source": str(encoder.path), "name": encoder.name, "layer": layer, "dim": dim}
    with atomic_directory(
        out, kind="sentence-transformers export", recognise=_earlier_export
    ) as tmp:
        st.save(str(tmp))
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return Path(out)


def _with_exit_head(st: Any, head: torch.nn.Module) -> Any:
    """``st`` with ``head`` (a square ``torch.nn.Linear``) as a Dense module after pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense

    if not isinstance(head, torch.nn.Linear):
        raise DemitasseError("only a linear exit head can be exported as a Dense module")
    dense = Dense(
        head.in_features,
        head.out_features,
        activation_function=torch.nn.Identity(),
        init_weight=head.weight.detach().cpu().clone(),
        init_bias=head.bias.detach().cpu().clone(),
    )
    modules = list(st)
    after = next(
        (i + 1 for i, m in enumerate(modules) if type(m).__name__ == "Pooling"), len(modules)
    )
    return SentenceTransformer(modules=[*modules[:after], dense, *modules[after:]], device="cpu")


def _earlier_export(path: Path) -> bool:
    """A folder this exporter wrote before outputs carried a marker."""
    return (path / EXPORT_INFO).is_file() and (path / "modules.json").is_file()
