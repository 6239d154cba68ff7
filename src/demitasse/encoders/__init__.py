"""Encoders: texts in, per-layer float32 sentence embeddings out.

The transformer encoder loads torch and transformers (seconds): it is imported on first use,
so a vectors-only model or a command that only parses arguments never pays for it.
"""

from typing import TYPE_CHECKING, Any

from demitasse.encoders.base import BACKENDS, Encoder, check_backend
from demitasse.encoders.resolve import (
    DEFAULT_MODEL,
    PACKAGED_MODELS,
    ResolvedModel,
    cache_root,
    resolve_model,
)

if TYPE_CHECKING:
    from demitasse.encoders.transformer import TransformerEncoder, load_transformer, pool

_TRANSFORMER_NAMES = ("TransformerEncoder", "load_transformer", "pool")


def __getattr__(name: str) -> Any:
    if name in _TRANSFORMER_NAMES:
        from demitasse.encoders import transformer

        return getattr(transformer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "DEFAULT_MODEL",
    "PACKAGED_MODELS",
    "Encoder",
    "ResolvedModel",
    "TransformerEncoder",
    "cache_root",
    "check_backend",
    "load_transformer",
    "pool",
    "resolve_model",
]
