"""What a :class:`~demitasse.model.CompressedModel` computes (its :class:`Recipe`, fixed when
it is built and saved with it) apart from how it runs (its :class:`RuntimeSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from demitasse.model_checks import check_settings
from demitasse.model_encoder import EncoderLink


@dataclass(frozen=True)
class Recipe:
    """What a model computes: set when it is built, recorded at fit, saved with it.

    ``encoder`` is the encoder's source (a name or an absolute directory; None for a
    vectors-only model) and ``encoder_kind`` / ``input_dim`` what is known of it without
    loading it (None until the encoder or the fitted vectors said). ``compressor`` is the
    compressor's registry name (``"none"`` without one).
    """

    encoder: str | None
    encoder_kind: str | None
    name: str
    input_dim: int | None
    layer: int | None
    compressor: str
    precision: str
    normalize: bool
    quantizer_params: dict[str, Any] = field(default_factory=dict)
    rescore_factor: float | None = None
    rescore_precision: str | None = None


class RuntimeSettings:
    """How a model runs, not what it computes: texts per encoder call (``batch_size``),
    whether a transformer encoder reads and writes the embedding cache (``cache``), and
    what runs it (``backend``: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``). Settable."""

    def __init__(self, link: EncoderLink, batch_size: int, cache: bool) -> None:
        self._link = link
        check_settings(None, batch_size)
        self._batch_size = batch_size
        self.cache = bool(cache)

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, batch_size: int) -> None:
        check_settings(None, batch_size)
        self._batch_size = batch_size

    @property
    def backend(self) -> str:
        return self._link.backend

    @backend.setter
    def backend(self, backend: str) -> None:
        self._link.set_backend(backend)

    def __repr__(self) -> str:
        return (f"RuntimeSettings(batch_size={self.batch_size}, cache={self.cache}, "
                f"backend={self.backend!r})")  # fmt: skip
