"""ONNX Runtime backends of the transformer encoder: ``onnx`` (float32) and ``onnx-int8``.

The transformer, cut after the deepest layer asked for, with its pooling and each layer's exit
head, is exported once with ``torch.onnx.export`` into a graph whose outputs are exactly the
vectors the torch encoder pools (before normalisation, which stays in numpy). ``onnx-int8``
quantises that graph's weight matrices to int8 with ONNX Runtime's dynamic quantisation
(per-channel weights, activations quantised per batch at run time). Graphs are cached under
``cache_root()/onnx``, never inside the model's folder (the user's); the file name is a hash
of the model's files and of everything that shapes the graph, and each file is written
atomically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from demitasse.encoders.base import check_backend
from demitasse.encoders.cache import fingerprint_directory
from demitasse.encoders.onnx_graph import (
    GRAPH_CONFIG,
    GRAPH_FILES,
    GRAPH_FORMAT_VERSION,
    GRAPH_KIND,
    TOKENIZER_FILE,
    file_sha256,
)
from demitasse.encoders.resolve import cache_root
from demitasse.errors import DemitasseError
from demitasse.io import atomic_path
from demitasse.persistence import demitasse_version

if TYPE_CHECKING:
    from demitasse.encoders.transformer import TransformerEncoder

logger = logging.getLogger(__name__)

#: Bumped whenever the exported graph changes, so that older cached graphs are not reused.
EXPORT_VERSION = 1
#: Bumped whenever the int8 graph made from it changes (its cached file and the embedding
#: cache's key for ``onnx-int8`` carry it). 2: the output projections stay float32
#: (:func:`float_matmuls`).
INT8_VERSION = 2
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
            f"exporting the {backend} backend's graph needs onnx and onnxruntime ({exc.name} "
            "is missing): pip install 'demitasse[train]'"
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
    """Where ``encoder``'s graphs are cached: demitasse's cache, also for a local model, whose
    folder is the user's (the file names hash its content, so two folders of one name differ)."""
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


def float_matmuls(graph: Any) -> list[str]:
    """The matrix products :func:`quantize_graph` leaves in float32: those that narrow their
    input, the feed-forward output projections (3072 → 768 in mpnet). Their input, after the
    activation function, carries rare values far larger than the rest (the outlier
    dimensions of transformer encoders), and one dynamic int8 scale per tensor loses the
    others to them. Measured text by text against torch on 500 unlabeled sentences when this
    was chosen: with every product in int8, all-mpnet-base-v2's vectors kept a median cosine
    of 0.88 (16 % of sign bits flipped); with these in float32, 0.99 (MiniLM: 0.992 →
    0.996), for about a fifth of int8's speed (the benchmarks' figures:
    benchmarks/results/backend_agreement.md and backends.md)."""
    weights = {tensor.name: tuple(tensor.dims) for tensor in graph.initializer}
    narrowing = []
    for node in graph.node:
        shape = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if shape is not None and len(shape) == 2 and shape[0] > shape[1]:
            narrowing.append(node.name)
    return narrowing


def quantize_graph(source: Path, target: Path) -> None:
    """Dynamic int8 quantisation of ``source``'s weight matrices into ``target``, all but
    :func:`float_matmuls`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logger.info("quantising %s to int8: %s", source.name, target)
    kept = float_matmuls(onnx.load(str(source), load_external_data=False).graph)
    quant_logger = logging.getLogger()  # the quantiser advises pre-processing on the root logger
    level = quant_logger.level
    quant_logger.setLevel(logging.ERROR)
    try:
        with atomic_path(target, suffix=".onnx") as tmp:
            quantize_dynamic(
                str(source), str(tmp), weight_type=QuantType.QInt8, nodes_to_exclude=kept,
                **INT8_OPTIONS,
            )  # fmt: skip
    finally:
        quant_logger.setLevel(level)


def cached_graphs(encoder: TransformerEncoder, layers: Sequence[int]) -> tuple[Path, Path]:
    """Where the float32 and the int8 graph of ``layers`` are cached (they may not exist)."""
    inputs = list(encoder.tokenize(["x"]))
    key = graph_key(encoder, inputs, layers)
    folder = graph_directory(encoder)
    return folder / f"{key}.onnx", folder / f"{key}-int8v{INT8_VERSION}.onnx"


def graph_path(encoder: TransformerEncoder, backend: str, layers: Sequence[int]) -> Path:
    """The cached graph of ``backend`` for ``layers``, exported (and quantised) if missing."""
    check_backend(backend)
    float_path, int8_path = cached_graphs(encoder, layers)
    wanted = int8_path if backend == "onnx-int8" else float_path
    if wanted.is_file():
        return wanted
    if not float_path.is_file():
        export_graph(encoder, layers, float_path)
    if backend == "onnx-int8":
        quantize_graph(float_path, int8_path)
    return wanted


# ---- a graph folder: the encoder inside a model directory ------------------------------------


def write_graph_folder(
    encoder: TransformerEncoder, layer: int, backends: Sequence[str], source: str, target: Path
) -> None:
    """Write ``encoder`` cut after ``layer`` as a graph folder (see
    :mod:`demitasse.encoders.onnx_graph`) into the new folder ``target``: the float32 graph,
    the int8 one too when ``backends`` has ``onnx-int8`` (both copied from the graph cache
    when there), the configured tokenizer and the record naming ``source``."""
    check_installed("onnx")
    target.mkdir(parents=True)
    float_cached, int8_cached = cached_graphs(encoder, [layer])
    graphs = {"onnx": target / GRAPH_FILES["onnx"]}
    if float_cached.is_file():
        shutil.copyfile(float_cached, graphs["onnx"])
    else:
        export_graph(encoder, [layer], graphs["onnx"])
    if "onnx-int8" in backends:
        graphs["onnx-int8"] = target / GRAPH_FILES["onnx-int8"]
        if float_cached.is_file() and int8_cached.is_file():
            shutil.copyfile(int8_cached, graphs["onnx-int8"])
        else:
            quantize_graph(graphs["onnx"], graphs["onnx-int8"])
    hf_tokenizer = encoder.tokenizer
    configured_tokenizer(encoder).save(str(target / TOKENIZER_FILE))
    config = {
        "kind": GRAPH_KIND,
        "format_version": GRAPH_FORMAT_VERSION,
        "demitasse_version": demitasse_version(),
        "name": encoder.name,
        "source": source,
        "fingerprint": fingerprint_directory(Path(encoder.path)),
        "dim": encoder.dim,
        "num_layers": encoder.num_layers,
        "layer": layer,
        "pooling": encoder.pooling,
        "exit_head": layer in encoder.heads,
        "normalize": encoder.normalize,
        "max_seq_length": encoder.max_seq_length,
        "do_lower_case": encoder.do_lower_case,
        "split_special_tokens": bool(getattr(hf_tokenizer, "split_special_tokens", False)),
        "inputs": list(encoder.tokenize(["x"])),
        "output": f"layer{layer}",
        "tokenizer": {"file": TOKENIZER_FILE, "sha256": file_sha256(target / TOKENIZER_FILE)},
        "graphs": {
            backend: {"file": path.name, "sha256": file_sha256(path)}
            for backend, path in graphs.items()
        },
        "exported_with": {
            "torch": torch.__version__,
            "opset": OPSET,
            "export": EXPORT_VERSION,
            "int8": INT8_VERSION,
        },
    }
    text = json.dumps(config, indent=2, ensure_ascii=False)
    (target / GRAPH_CONFIG).write_text(text + "\n", encoding="utf-8")


def configured_tokenizer(encoder: TransformerEncoder) -> Any:
    """A copy of the encoder's fast tokenizer (``tokenizers.Tokenizer``) set to truncate and
    pad as :meth:`~demitasse.encoders.transformer.TransformerEncoder.features` asks
    transformers to: ``longest_first`` to ``max_seq_length``, padded to the longest text."""
    from tokenizers import Tokenizer

    hf = encoder.tokenizer
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise DemitasseError(f"{encoder.name} has no fast tokenizer (tokenizer.json) to carry")
    tokenizer = Tokenizer.from_str(backend.to_str())
    tokenizer.enable_truncation(
        max_length=encoder.max_seq_length, stride=0, strategy="longest_first",
        direction=hf.truncation_side,
    )  # fmt: skip
    tokenizer.enable_padding(
        direction=hf.padding_side, pad_id=hf.pad_token_id, pad_type_id=hf.pad_token_type_id,
        pad_token=hf.pad_token, length=None, pad_to_multiple_of=None,
    )  # fmt: skip
    return tokenizer
