"""A model's link to its encoder: what the encoder is, and the check that it is still the one
the model was fitted with.

A :class:`~demitasse.model.CompressedModel` is given an encoder object, or names one (a
packaged or hub name, a local directory) and loads it on first use, or has none (vectors from
an API). Once an encoder is attached the link records what identifies it: its source, kind,
name, width, number of layers and the content fingerprint of its files. That record is saved
with the model, and an encoder loaded later from the same source must match it, since its
vectors would otherwise not be the ones the compressor was fitted on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demitasse.encoders.base import Encoder, check_backend
from demitasse.errors import DemitasseError
from demitasse.model_files import directory_fingerprint

#: The parts of the record that identify an encoder's output (what provenance keeps).
IDENTITY = ("name", "kind", "dim", "fingerprint")


class EncoderLink:
    """The encoder of a model (loaded, named, or none), the record of what it is, and the
    backend a transformer encoder runs on."""

    def __init__(self, encoder: str | Path | Encoder | None, backend: str | None) -> None:
        self.backend = initial_backend(encoder, backend)
        #: The encoder object, once given or loaded.
        self.loaded: Encoder | None = None
        #: What identifies the encoder: its ``source``, then, once attached, its kind, name,
        #: width, number of layers and content fingerprint. Saved with the model.
        self.ref: dict[str, Any] | None = None
        if isinstance(encoder, str | Path):
            self.ref = {"source": source_of(encoder)}

    @property
    def present(self) -> bool:
        """Whether there is an encoder (loaded or not); False for a vectors-only model."""
        return self.loaded is not None or self.ref is not None

    def attach(self, encoder: Encoder, source: str, layer: int | None) -> None:
        """Take ``encoder`` (loaded from ``source``) as the model's, cut after ``layer``."""
        if layer is not None and not 1 <= layer <= encoder.num_layers:
            raise DemitasseError(
                f"layer {layer} does not exist: {encoder.name} has layers 1..{encoder.num_layers}"
            )
        if getattr(encoder, "backend", "torch") != self.backend:
            if not hasattr(encoder, "backend"):
                raise DemitasseError(f"the {self.backend} backend applies to transformer "
                                     f"encoders; {encoder.name} is not one")  # fmt: skip
            encoder.backend = self.backend  # type: ignore[attr-defined]
        self.loaded = encoder
        path = getattr(encoder, "path", None)
        self.ref = {
            "source": source,
            "kind": "static" if type(encoder).__name__ == "StaticModel" else "transformer",
            "name": encoder.name,
            "dim": int(encoder.dim),
            "num_layers": int(encoder.num_layers),
            "fingerprint": directory_fingerprint(Path(path)) if path is not None else None,
        }

    def attach_loaded(self, encoder: Encoder, layer: int | None) -> None:
        """Attach the encoder loaded from the recorded source, refusing one that differs from
        the record (other files, another width or depth)."""
        assert self.ref is not None
        saved = dict(self.ref)
        self.attach(encoder, saved["source"], layer)
        now = self.ref
        for key in ("fingerprint", "dim", "num_layers"):
            if saved.get(key) is not None and now.get(key) != saved[key]:
                raise DemitasseError(
                    f"the encoder {saved['source']} differs from the one this model was fitted "
                    f"with ({key} {now.get(key)} != {saved[key]}); refit the model"
                )

    def set_backend(self, backend: str) -> None:
        """Run a transformer encoder on ``backend`` from now on (the loaded one too)."""
        check_backend(backend)
        if backend != "torch" and not self.present:
            raise DemitasseError(f"the {backend} backend needs an encoder; this is a "
                                 "vectors-only model")  # fmt: skip
        if self.loaded is not None and backend != self.backend:
            if not hasattr(self.loaded, "backend"):
                raise DemitasseError(f"the {backend} backend applies to transformer encoders; "
                                     f"{self.loaded.name} is not one")  # fmt: skip
            self.loaded.backend = backend  # type: ignore[attr-defined]
        self.backend = backend


def initial_backend(encoder: Any, backend: str | None) -> str:
    """``backend``, checked; by default torch, or what an encoder object given runs on."""
    if backend is None:
        backend = str(getattr(encoder, "backend", "torch"))
    check_backend(backend)
    if encoder is None and backend != "torch":
        raise DemitasseError(
            f"the {backend} backend needs an encoder; a vectors-only model has none"
        )
    return backend


def source_of(encoder: str | Path) -> str:
    """A packaged or hub name stays a name; a local directory becomes an absolute path."""
    path = Path(encoder).expanduser()
    return str(path.resolve()) if path.is_dir() else str(encoder)
