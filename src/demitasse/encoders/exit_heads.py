"""Exit heads: a linear map per layer, applied to that layer's pooled embedding.

A model trained with exit heads (``EspressoLoss(exit_heads=True)``) keeps them in its
sentence-transformers directory as ``exit_heads/`` (``config.json`` + ``state.safetensors``).
Plain sentence-transformers ignores the folder, so the full model is unchanged; demitasse's
encoder applies a layer's head after pooling and before normalisation, and ``demitasse export``
writes the head of the layer it cuts at as a ``Dense`` module in that same place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from demitasse.errors import CompressorError, DemitasseError
from demitasse.persistence import read_saved, write_saved

EXIT_HEADS_DIR = "exit_heads"
FORMAT_VERSION = 1

# layer -> (weight [out, in], bias [out]), as torch.nn.Linear holds them.
ExitHeads = dict[int, tuple[np.ndarray, np.ndarray]]


def save_exit_heads(model_dir: str | Path, heads: ExitHeads) -> None:
    """Write ``heads`` into ``model_dir/exit_heads`` atomically."""
    arrays: dict[str, np.ndarray] = {}
    for layer, (weight, bias) in heads.items():
        arrays[f"layer{layer}.weight"] = np.asarray(weight, dtype=np.float32)
        arrays[f"layer{layer}.bias"] = np.asarray(bias, dtype=np.float32)
    config = {"format_version": FORMAT_VERSION, "layers": sorted(int(k) for k in heads)}
    write_saved(Path(model_dir) / EXIT_HEADS_DIR, config, arrays)


def load_exit_heads(model_dir: str | Path, dim: int) -> ExitHeads:
    """The exit heads saved in ``model_dir`` ({} when it has none), checked against ``dim``."""
    path = Path(model_dir) / EXIT_HEADS_DIR
    if not path.exists():
        return {}
    try:
        config, arrays = read_saved(path, "exit heads")
    except CompressorError as exc:
        raise DemitasseError(str(exc)) from None
    version = config.get("format_version")
    if version != FORMAT_VERSION:
        raise DemitasseError(f"{path}: unsupported exit-heads format {version}")
    heads: ExitHeads = {}
    for layer in config.get("layers", []):
        weight = arrays.get(f"layer{layer}.weight")
        bias = arrays.get(f"layer{layer}.bias")
        if weight is None or bias is None:
            raise DemitasseError(f"{path}: the head of layer {layer} is missing")
        if weight.shape != (dim, dim) or bias.shape != (dim,):
            raise DemitasseError(
                f"{path}: the head of layer {layer} is {weight.shape}, expected ({dim}, {dim})"
            )
        heads[int(layer)] = (weight, bias)
    return heads
