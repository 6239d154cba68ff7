"""The encoder contract every text encoder of demitasse follows (transformer, layer-cut, static)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from demitasse.errors import DemitasseError

#: How a transformer encoder runs (see :mod:`demitasse.encoders.backends`).
BACKENDS = ("torch", "onnx", "onnx-int8")


def check_backend(backend: Any) -> str:
    """``backend`` if it names a backend, else a one-line error."""
    if backend not in BACKENDS:
        raise DemitasseError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return str(backend)


@runtime_checkable
class Encoder(Protocol):
    """Turns texts into float32 sentence embeddings, optionally from an intermediate layer."""

    # Read-only members: a static model computes ``dim`` from its vectors, a transformer
    # stores it; either satisfies the contract.
    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def num_layers(self) -> int: ...

    def encode(
        self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32
    ) -> np.ndarray:
        """Embeddings ``[len(texts), dim]`` of ``layer`` (1-based; ``None`` = last layer)."""
        ...

    def encode_layers(
        self, texts: Sequence[str], layers: Sequence[int] | None = None, batch_size: int = 32
    ) -> dict[int, np.ndarray]:
        """Embeddings of several layers from one forward pass, keyed by 1-based layer."""
        ...


def check_batch_size(batch_size: Any) -> None:
    """``batch_size`` must be a positive integer (not a bool)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise DemitasseError(f"batch_size must be a positive integer, got {batch_size!r}")
