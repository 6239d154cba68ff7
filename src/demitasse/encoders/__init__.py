"""Encoders: texts in, per-layer float32 sentence embeddings out."""

from demitasse.encoders.base import Encoder
from demitasse.encoders.resolve import (
    DEFAULT_MODEL,
    PACKAGED_MODELS,
    ResolvedModel,
    cache_root,
    resolve_model,
)
from demitasse.encoders.transformer import TransformerEncoder, load_transformer, pool

__all__ = [
    "DEFAULT_MODEL",
    "PACKAGED_MODELS",
    "Encoder",
    "ResolvedModel",
    "TransformerEncoder",
    "cache_root",
    "load_transformer",
    "pool",
    "resolve_model",
]
