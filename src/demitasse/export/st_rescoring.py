"""The rescoring part of a sentence-transformers export: what a model that rescores keeps per
document (int8 codes, or float32, of its encoder's normalised full output), the ranges of those
int8 codes, the factor, and the few lines of sentence-transformers + faiss that search as
demitasse searches: the first stage finds the top ``ceil(max(k, 10)·F)`` documents by the
model's codes, then the query's full output scores them against what they keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from demitasse.compress import Int8Quantizer
from demitasse.search import RESCORE_POOL_K

RESCORE_RANGES = "rescore_ranges.safetensors"


@dataclass(frozen=True)
class RescoringPart:
    """How a model rescores: the factor F and, for int8, the ranges of its kept codes (None:
    float32 vectors are kept)."""

    factor: float
    ranges: Int8Quantizer | None


def write_rescoring(
    part: RescoringPart | None, encoder_modules: int, folder: Path
) -> dict[str, Any] | None:
    """Write the ranges of the kept codes; describe the part for ``demitasse_export.json``."""
    if part is None:
        return None
    info: dict[str, Any] = {
        "factor": part.factor,
        "precision": "float32" if part.ranges is None else "int8",
        "pool_k": RESCORE_POOL_K,
        "encoder_modules": encoder_modules,
        "file": None,
    }
    if part.ranges is not None:
        from safetensors.numpy import save_file

        ranges = np.stack([part.ranges.lo_, part.ranges.hi_]).astype(np.float32)
        save_file({"ranges": np.ascontiguousarray(ranges)}, str(folder / RESCORE_RANGES))
        info["file"] = RESCORE_RANGES
    return info


def rescoring_readme(info: dict[str, Any], first_stage: list[str]) -> list[str]:
    """The README section: the search with rescoring, in sentence-transformers and faiss;
    ``first_stage`` defines ``candidates(queries, depth)`` for the model's codes."""
    rescoring = info.get("rescoring")
    if rescoring is None:
        return []
    factor = rescoring["factor"]
    load = "trust_remote_code=True" if info["trust_remote_code"] else ""
    int8 = rescoring["precision"] == "int8"
    keep = (
        'ranges = load_file(f"{folder}/' + RESCORE_RANGES + '")["ranges"]\n\n\n'
        "def kept(texts):  # per document: int8 codes of the normalised full output\n"
        "    full_output = full.encode(texts, normalize_embeddings=True)\n"
        '    return quantize_embeddings(full_output, "int8", ranges=ranges)\n\n\n'
        "def unpack(kept_rows):  # what int8 codes stand for: their bucket centres\n"
        "    step = (ranges[1] - ranges[0]) / 255\n"
        "    return ranges[0] + (kept_rows.astype(np.float32) + 128.5) * step\n"
        if int8
        else "def kept(texts):  # per document: its normalised full output, float32\n"
        "    return full.encode(texts, normalize_embeddings=True)\n\n\n"
        "def unpack(kept_rows):\n    return kept_rows\n"
    )
    code = (
        "import math\n\nimport faiss\nimport numpy as np\n"
        "from safetensors.numpy import load_file\n"
        "from sentence_transformers import SentenceTransformer\n"
        "from sentence_transformers.util import quantize_embeddings\n\n"
        'folder = "path/to/this/folder"\n'
        f"model = SentenceTransformer(folder{', ' + load if load else ''})\n"
        "# The encoder's own output (before the compressor), which rescoring compares.\n"
        f"full = SentenceTransformer(modules=list(model)[:{rescoring['encoder_modules']}])\n"
        + "".join(line + "\n" for line in first_stage)
        + "\n"
        + keep
        + "\n\nstore = kept(documents)\n\n\n"
        "def search(queries, k):\n"
        f"    depth = min(len(store), math.ceil(max(k, {rescoring['pool_k']}) * {factor!r}))\n"
        "    rows = candidates(queries, depth)\n"
        "    documents_kept = unpack(store[rows])\n"
        "    documents_kept /= np.linalg.norm(documents_kept, axis=2, keepdims=True)\n"
        "    query_output = full.encode(queries, normalize_embeddings=True)\n"
        '    scores = np.einsum("qcd,qd->qc", documents_kept, query_output)\n'
        '    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]\n'
        "    return np.take_along_axis(rows, best, 1), np.take_along_axis(scores, best, 1)\n\n\n"
        "rows, scores = search(queries, 10)  # the top 10 documents of each query\n"
    )
    what = "int8 codes" if int8 else "float32 vectors"
    text = (
        f"demitasse searches this model with rescoring (factor {factor:g}): the first stage finds "
        f"the top ceil(max(k, {rescoring['pool_k']})·{factor:g}) documents by their codes, then "
        f"the query's normalised full output (the encoder before the compressor) scores them "
        f"against what each keeps, {what} of its own normalised full output"
        + (f" (ranges in `{RESCORE_RANGES}`: row 0 the minimum, row 1 the maximum)" if int8 else "")
        + ". With `documents` and `queries` lists of texts, sentence-transformers and faiss "
        "reproduce that search:\n\n```python\n" + code + "```"
    )
    return ["## Search with rescoring (as demitasse searches)", text]


def first_stage_lines(quantization: dict[str, Any] | None, dim: int) -> list[str]:
    """Code defining ``candidates(queries, depth)``: the first stage over the model's codes
    (Hamming for binary codes; the cosine of float vectors, or of int8 bucket centres)."""
    if quantization is not None and quantization["precision"] == "binary":
        return [
            *_binary_codes(quantization),
            "",
            "",
            f"index = faiss.IndexBinaryFlat({dim})  # Hamming distance over the packed bits",
            "index.add(codes(documents))",
            "",
            "",
            "def candidates(queries, depth):",
            "    return index.search(codes(queries), depth)[1]",
        ]
    return [
        *_document_vectors(quantization),
        "",
        "",
        "def normalised(x):",
        "    return x / np.linalg.norm(x, axis=1, keepdims=True)",
        "",
        "",
        f"index = faiss.IndexFlatIP({dim})  # the cosine",
        "index.add(normalised(vectors(documents)))",
        "",
        "",
        "def candidates(queries, depth):",
        "    return index.search(normalised(model.encode(queries)), depth)[1]",
    ]


def _binary_codes(quantization: dict[str, Any]) -> list[str]:
    """``codes(texts)``: the packed bits, as the Quantisation section makes them."""
    params, file = quantization["params"], quantization.get("file")
    if params.get("rotation", "none") != "none":
        return [
            f'rotation = load_file(f"{{folder}}/{file}")',
            "",
            "",
            "def codes(texts):",
            '    shifted = model.encode(texts) - rotation["mean"]',
            '    return quantize_embeddings(shifted @ rotation["rotation"], "ubinary")',
        ]
    if params.get("threshold") == "mean":
        return [
            f'thresholds = load_file(f"{{folder}}/{file}")["thresholds"]',
            "",
            "",
            "def codes(texts):",
            '    return quantize_embeddings(model.encode(texts) - thresholds, "ubinary")',
        ]
    return ["def codes(texts):", '    return quantize_embeddings(model.encode(texts), "ubinary")']


def _document_vectors(quantization: dict[str, Any] | None) -> list[str]:
    """``vectors(texts)``: what the first stage compares the query's float vector with: the
    documents' float vectors, or their int8 codes' bucket centres."""
    if quantization is None or quantization["precision"] != "int8":
        return ["def vectors(texts):", "    return model.encode(texts)"]
    return [
        f'code_ranges = load_file(f"{{folder}}/{quantization["file"]}")["ranges"]',
        "",
        "",
        "def vectors(texts):",
        '    codes = quantize_embeddings(model.encode(texts), "int8", ranges=code_ranges)',
        "    step = (code_ranges[1] - code_ranges[0]) / 255",
        "    return code_ranges[0] + (codes.astype(np.float32) + 128.5) * step",
    ]
