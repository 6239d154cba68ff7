"""A model's link to its encoder: what the encoder is, and the check that it is still the one
the model was fitted with.

A :class:`~demitasse.model.CompressedModel` is given an encoder object, or names one (a
packaged or hub name, a local directory) and loads it on first use, or has none (vectors from
an API). Once an encoder is attached the link records what identifies it: its source, kind,
name, width, number of layers and the content fingerprint of its files (every file hashed in
full, cached by stamp: :mod:`demitasse.encoders.file_hashes`). That record is saved with the
model, and an encoder loaded later from the same source must match it, since its vectors would
otherwise not be the ones the compressor was fitted on; a saved record without its fingerprint
is refused as damaged (:mod:`demitasse.model_files`), so removing it cannot switch the check
off.

A model directory may carry its transformer encoder as an ONNX graph (``encoder/``, see
:mod:`demitasse.encoders.onnx_graph`). Which runs, when the model is loaded (the rule of
:func:`load_backend` and :meth:`EncoderLink.load`):

- backend ``onnx`` or ``onnx-int8`` (saved, or asked for) and the folder has that graph at the
  model's layer: the graph, with numpy, ONNX Runtime and ``tokenizers`` only;
- backend ``torch`` as saved (not asked for), torch, transformers or sentence-transformers not
  importable, and the folder has the float32 graph: the graph, and the model's backend becomes
  ``onnx`` (the same vectors, within float precision);
- otherwise the source encoder (its name or directory), as a model without a graph loads it.

The graph stands for the source: its files' sha256 are checked against its record, and its
record's fingerprint of the source's files against the model's, so the source need not be
present. Changing the backend of a loaded graph encoder to one its folder lacks lets the next
use load by the same rule.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
from pathlib import Path
from typing import Any

from demitasse.encoders.base import Encoder, check_backend
from demitasse.encoders.onnx_graph import OnnxGraphEncoder, read_graph_spec
from demitasse.errors import DemitasseError

logger = logging.getLogger(__name__)
#: What the source transformer encoder runs on (the ``train`` extra).
TORCH_STACK = ("torch", "transformers", "sentence_transformers")

#: The parts of the record that identify an encoder's output (what provenance keeps).
IDENTITY = ("name", "kind", "dim", "fingerprint")


def encoder_identity(ref: dict[str, Any], backend: str) -> dict[str, Any]:
    """What provenance keeps of an encoder: its identity and the backend that ran it (int8
    weights change its vectors a little; :mod:`demitasse.provenance` warns on a mismatch)."""
    return {**{key: ref.get(key) for key in IDENTITY}, "backend": backend}


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
        #: The model directory's graph folder (``encoder/``), when it carries one.
        self.graph: Path | None = None

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
        self.ref = {
            "source": source,
            "kind": "static" if type(encoder).__name__ == "StaticModel" else "transformer",
            "name": encoder.name,
            "dim": int(encoder.dim),
            "num_layers": int(encoder.num_layers),
            "fingerprint": encoder_fingerprint(encoder, source),
        }

    def attach_loaded(self, encoder: Encoder, layer: int | None) -> None:
        """Attach the encoder loaded from the recorded source, refusing one that differs from
        the record (other files, another width or depth)."""
        assert self.ref is not None
        saved = dict(self.ref)
        self.attach(encoder, saved["source"], layer)
        now = self.ref
        # A loaded model's record holds all three (model_files refuses one that does not).
        for key in ("fingerprint", "dim", "num_layers"):
            if key in saved and now.get(key) != saved[key]:
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
        if isinstance(self.loaded, OnnxGraphEncoder) and not self.loaded.spec.offers(backend):
            self.loaded = None  # the next use loads by the rule (the module's doc)
        if self.loaded is not None and backend != self.backend:
            if not hasattr(self.loaded, "backend"):
                raise DemitasseError(f"the {backend} backend applies to transformer encoders; "
                                     f"{self.loaded.name} is not one")  # fmt: skip
            self.loaded.backend = backend  # type: ignore[attr-defined]
        self.backend = backend

    def load(self, layer: int | None, cache: bool) -> Encoder:
        """Load the recorded encoder (the graph folder's or the source), checked against
        the record, by the rule of the module's doc."""
        assert self.ref is not None
        graph = read_graph_spec(self.graph) if self.graph is not None else None
        encoder: Encoder
        if graph is not None and graph.offers(self.backend, layer):
            encoder = OnnxGraphEncoder(graph.path, backend=self.backend, cache=cache)
        else:
            if graph is not None and not torch_stack_available():
                raise DemitasseError(
                    f"{graph.path} runs {', '.join(graph.graphs)} at layer {graph.layer}; the "
                    f"{self.backend} backend{'' if layer is None else f' at layer {layer}'} "
                    "needs the source encoder, with torch: pip install 'demitasse[train]'"
                )
            from demitasse.loading import load_encoder

            encoder = load_encoder(self.ref["source"], cache=cache, backend=self.backend)
        self.attach_loaded(encoder, layer)
        return encoder

    def write_graph(self, layer: int | None, target: Path) -> None:
        """Write the encoder cut after ``layer`` as a graph folder into ``target``: a copy of
        the loaded graph encoder's folder, or exported from the torch encoder (the float32
        graph, and the int8 one when the backend is ``onnx-int8``)."""
        if self.loaded is None or self.ref is None:
            raise DemitasseError("the encoder must be loaded before its graph is written")
        encoder: Any = self.loaded
        if isinstance(encoder, OnnxGraphEncoder):
            if not encoder.spec.offers("onnx", layer):
                raise DemitasseError(
                    f"{encoder.path} carries layer {encoder.layer}; a graph of another layer "
                    "is exported from the source, with torch"
                )
            shutil.copytree(encoder.path, target)
            return
        if self.ref.get("kind") != "transformer" or not hasattr(encoder, "tokenizer"):
            raise DemitasseError(
                f"an ONNX graph carries a transformer encoder; {encoder.name} is not one"
            )
        try:
            from demitasse.encoders.backends import write_graph_folder
        except ImportError as exc:
            raise DemitasseError(f"writing the ONNX graph needs torch ({exc.name} is missing): "
                                 "pip install 'demitasse[train]'") from None  # fmt: skip
        depth = encoder.num_layers if layer is None else layer
        backends = ["onnx", *(["onnx-int8"] if self.backend == "onnx-int8" else [])]
        write_graph_folder(encoder, depth, backends, str(self.ref["source"]), target)


def encoder_fingerprint(encoder: Encoder, source: str) -> str | None:
    """The content fingerprint of ``encoder``'s files (every file in full:
    :func:`~demitasse.encoders.cache.fingerprint_directory`): its folder's, or its source
    directory's (a static model loaded from one); a graph encoder stands for its source, so
    the fingerprint recorded with the graph. None: an encoder object without files."""
    recorded = getattr(encoder, "source_fingerprint", None)
    if recorded is not None:
        return str(recorded)
    path = getattr(encoder, "path", None)
    if path is None and Path(source).is_absolute():
        path = source
    if path is None or not Path(path).is_dir():
        return None
    from demitasse.encoders.cache import fingerprint_directory

    return fingerprint_directory(Path(path))


def torch_stack_available() -> bool:
    """Whether torch, transformers and sentence-transformers can be imported (not imported
    here: that takes seconds)."""
    for name in TORCH_STACK:
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):  # ValueError: sys.modules[name] is None
            return False
    return True


def load_backend(asked: str | None, saved: str, graph: Path | None) -> str:
    """The backend a loaded model runs on: ``asked``, else the saved one, except that a
    saved ``torch`` becomes ``onnx`` where the torch stack is missing and the directory
    carries the float32 graph (see the module's doc)."""
    if asked is not None:
        return asked
    if saved == "torch" and graph is not None and not torch_stack_available():
        logger.info("torch is not installed: %s runs the model's ONNX graph", graph)
        return "onnx"
    return saved


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
