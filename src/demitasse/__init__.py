"""demitasse: smaller, faster sentence embeddings, with proof of what quality was kept."""

from demitasse.errors import (
    CompressorError,
    DataError,
    DemitasseError,
    IncompatibleInputError,
    ModelNotFoundError,
    NotFittedError,
    ParameterError,
    SavedStateError,
    UnknownCompressionNameError,
    UnknownNameError,
)

__all__ = [
    "CompressedModel",
    "CompressorError",
    "DataError",
    "DemitasseError",
    "IncompatibleInputError",
    "ModelNotFoundError",
    "NotFittedError",
    "ParameterError",
    "SavedStateError",
    "UnknownCompressionNameError",
    "UnknownNameError",
    "load_encoder",
]


def __getattr__(name: str) -> object:
    # torch and transformers load only when an encoder is asked for, so `demitasse --help`
    # and the compressors on precomputed vectors stay quick to start.
    if name == "load_encoder":
        from demitasse.loading import load_encoder

        return load_encoder
    if name == "CompressedModel":
        from demitasse.model import CompressedModel

        return CompressedModel
    raise AttributeError(f"module 'demitasse' has no attribute {name!r}")
