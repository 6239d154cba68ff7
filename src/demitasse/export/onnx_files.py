"""The ONNX files of a sentence-transformers export, where ``backend="onnx"`` finds them.

``SentenceTransformer(path, backend="onnx")`` (through Optimum's ``ORTModelForFeatureExtraction``)
loads ``onnx/model.onnx``: the Transformer module's graph, from the tokenizer's inputs to
``last_hidden_state``; the pipeline's Pooling, Dense and Normalize modules run after it as
they do in torch. The export writes that graph for the transformer as exported (cut after its
layer), and ``onnx/model_qint8.onnx``, its dynamic int8 version (the settings of demitasse's
``onnx-int8`` backend), which loads with ``model_kwargs={"file_name": "onnx/model_qint8.onnx"}``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from demitasse.encoders.backends import OPSET, quantize_graph

ONNX_FOLDER = "onnx"
ONNX_FILE = "model.onnx"
ONNX_INT8_FILE = "model_qint8.onnx"


class _TokenStates(torch.nn.Module):
    """The transformer's token states, as ``ORTModelForFeatureExtraction`` names them."""

    def __init__(self, model: Any, inputs: list[str]) -> None:
        super().__init__()
        self.model = model
        self.inputs = inputs

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        features = dict(zip(self.inputs, tensors, strict=True))
        return self.model(**features).last_hidden_state


def write_onnx_files(transformer: Any, folder: Path) -> list[str]:
    """Export ``transformer`` (sentence-transformers' Transformer module, already cut) into
    ``folder/onnx``; the files written, relative to ``folder``."""
    # sentence-transformers >= 6.2 renamed tokenize to preprocess and logs a deprecation
    # warning on every export through the old name; earlier releases have tokenize only.
    tokenize = getattr(transformer, "preprocess", None) or transformer.tokenize
    sample = tokenize(["a short one", "a somewhat longer sentence to pad the other"])
    inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample]
    graph = _TokenStates(transformer.auto_model.eval(), inputs)
    target = folder / ONNX_FOLDER
    target.mkdir(parents=True, exist_ok=True)
    dynamic = {name: {0: "batch", 1: "tokens"} for name in [*inputs, "last_hidden_state"]}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes are for transformers' developers
        torch.onnx.export(
            graph,
            tuple(sample[name].cpu() for name in inputs),
            str(target / ONNX_FILE),
            input_names=inputs,
            output_names=["last_hidden_state"],
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )
    quantize_graph(target / ONNX_FILE, target / ONNX_INT8_FILE)
    return [f"{ONNX_FOLDER}/{ONNX_FILE}", f"{ONNX_FOLDER}/{ONNX_INT8_FILE}"]
