"""ONNX Runtime backends of the transformer encoder: ``onnx`` (float32) and ``onnx-int8``.

The transformer, cut after the deepest layer asked for, with its pooling and each layer's exit
head, is exported once with ``torch.onnx.export`` into a graph whose outputs are exactly the
vectors the torch encoder pools (before normalisation, which stays in numpy). ``onnx-int8``
quantises that graph's weight matrices to int8 with ONNX Runtime's dynamic quantisation
(per-channel weights, activations quantised per batch at run time). Graphs are cached beside
a local model (``.demitasse-onnx/``, left out of the model's fingerprint) or, for packaged and
hub models and read-only folders, under ``cache_root()/onnx``; the file name is a hash of the
model's files and of everything that shapes the graph, and each file is written atomically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from demitasse.encoders.base import check_backend
from demitasse.encoders.cache import ONNX_CACHE_DIR, fingerprint_directory
from demitasse.encoders.resolve import cache_root
from demitasse.errors import DemitasseError
from demitasse.io import atomic_path

if TYPE_CHECKING:
    from demitasse.encoders.transformer import TransformerEncoder

logger = logging.getLogger(__name__)

#: Bumped whenever the exported graph changes, so that older cached graphs are not reused.
EXPORT_VERSION = 1
OPSET = 17
#: Dynamic int8 settings: weights of the constant matrix products only (the attention's
#: activation × activation products stay float32), int8 weights per output channel against
#: uint8 activations, the pairing ONNX Runtime's VNNI / AVX2 kernels run fastest.
INT8_OPTIONS: dict[str, Any] = {
    "per_channel": True,
    "reduce_range": False,
    "extra_options": {"MatMulConstBOnly": True},
}


def check_installed(backend: str) -> None:
    """A one-line error when an ONNX backend's libraries are missing."""
    if backend == "torch":
        return
    try:
        import onnx  # noqa: F401  (torch.onnx.export writes through it)
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise DemitasseError(
            f"the {backend} backend needs the 'onnx' extra ({exc.name} is missing): "
            "pip install 'demitasse[onnx]'"
        ) from None


def instruction_sets() -> list[str]:
    """The SIMD extensions of this CPU that int8 matrix products use (from /proc/cpuinfo)."""
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])  # fmt: skip
    return [flag for flag in wanted if flag in flags]


class _PooledGraph(torch.nn.Module):
    """What the exported graph computes: the cut transformer, then each layer's pooled and
    exit-headed vectors, in the order of ``layers``."""

    def __init__(self, encoder: TransformerEncoder, inputs: Sequence[str], layers: Sequence[int]):
        super().__init__()
        self.model = encoder.model
        self.heads = torch.nn.ModuleDict({str(k): v for k, v in encoder.heads.items()})
        self.inputs = list(inputs)
        self.layers = list(layers)
        self.pooling = encoder.pooling

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from demitasse.encoders.transformer import pool

        features = dict(zip(self.inputs, tensors, strict=True))
        hidden = self.model(**features, output_hidden_states=True).hidden_states
        outputs = []
        for layer in self.layers:
            vectors = pool(hidden[layer], features["attention_mask"], self.pooling)
            if str(layer) in self.heads:
                vectors = self.heads[str(layer)](vectors)
            outputs.append(vectors)
        return tuple(outputs)


def graph_directory(encoder: TransformerEncoder) -> Path:
    """Where ``encoder``'s graphs are cached: beside a writable local model, else the cache."""
    if encoder.source == "directory" and os.access(encoder.path, os.W_OK):
        return Path(encoder.path) / ONNX_CACHE_DIR
    return cache_root() / "onnx" / encoder.name


def graph_key(encoder: TransformerEncoder, inputs: Sequence[str], layers: Sequence[int]) -> str:
    """A hash of the model's files and of everything that shapes the exported graph."""
    identity = {
        "version": EXPORT_VERSION,
        "fingerprint": fingerprint_directory(Path(encoder.path)),
        "pooling": encoder.pooling,
        "heads": sorted(encoder.heads),
        "inputs": list(inputs),
        "layers": list(layers),
        "opset": OPSET,
        "torch": torch.__version__.split("+")[0],
    }
    text = json.dumps(identity, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def export_graph(encoder: TransformerEncoder, layers: Sequence[int], target: Path) -> None:
    """Export ``encoder`` cut after ``max(layers)`` to ``target`` (written atomically)."""
    # Two texts of different lengths: the traced graph must keep the padding mask, which
    # transformers drops for a batch without padding.
    sample = encoder.tokenize(["a short one", "a somewhat longer sentence to pad the other"])
    inputs = list(sample)
    graph = _PooledGraph(encoder, inputs, layers).eval()
    dynamic = {name: {0: "batch", 1: "tokens"} for name in inputs}
    outputs = [f"layer{layer}" for layer in layers]
    dynamic.update({name: {0: "batch"} for name in outputs})
    logger.info("exporting %s (layers %s) to ONNX: %s", encoder.name, list(layers), target)
    with (
        atomic_path(target, suffix=".onnx") as tmp,
        warnings.catch_warnings(),
        torch.no_grad(),
        encoder.cut_to(max(layers)),
    ):
        # The tracer's notes on transformers' shape checks and the exporter's deprecation
        # notice are for the developers of those libraries, not for our users.
        warnings.simplefilter("ignore")
        # The TorchScript exporter: its graph ran about 10 % faster in ONNX Runtime than the
        # torch.export-based one, in float32 and in int8 (MiniLM, 2 threads), and exports
        # in a third of the time.
        torch.onnx.export(
            graph,
            tuple(sample[name].cpu() for name in inputs),
            str(tmp),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )


def quantize_graph(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of ``source``'s weight matrices into ``target``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logger.info("quantising %s to int8: %s", source.name, target)
    quant_logger = logging.getLogger()  # the quantiser advises pre-processing on the root logger
    level = quant_logger.level
    quant_logger.setLevel(logging.ERROR)
    try:
        with atomic_path(target, suffix=".onnx") as tmp:
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8, **INT8_OPTIONS)
    finally:
        quant_logger.setLevel(level)


def graph_path(encoder: TransformerEncoder, backend: str, layers: Sequence[int]) -> Path:
    """The cached graph of ``backend`` for ``layers``, exported (and quantised) if missing."""
    check_backend(backend)
    inputs = list(encoder.tokenize(["x"]))
    key = graph_key(encoder, inputs, layers)
    folder = graph_directory(encoder)
    float_path = folder / f"{key}.onnx"
    int8_path = folder / f"{key}-int8.onnx"
    wanted = int8_path if backend == "onnx-int8" else float_path
    if wanted.is_file():
        return wanted
    if not float_path.is_file():
        export_graph(encoder, layers, float_path)
    if backend == "onnx-int8":
        quantize_graph(float_path, int8_path)
    return wanted


@dataclass
class OnnxSession:
    """An ONNX Runtime session over one cached graph, with as many intra-op threads as torch
    uses (re-created when torch's setting changes, e.g. by ``demitasse serve --threads``)."""

    path: Path
    _session: Any = None
    _threads: int = 0
    _input_names: list[str] = field(default_factory=list)

    def run(self, features: dict[str, torch.Tensor]) -> list[np.ndarray]:
        session = self._current()
        feeds = {name: features[name].cpu().numpy() for name in self._input_names}
        return [np.asarray(out, dtype=np.float32) for out in session.run(None, feeds)]

    def _current(self) -> Any:
        threads = torch.get_num_threads()
        if self._session is None or threads != self._threads:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3  # warnings about unused initialisers are noise
            self._session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
            self._input_names = [i.name for i in self._session.get_inputs()]
            self._threads = threads
        return self._session
