"""A sentence-transformers export carries ONNX files where ``backend="onnx"`` looks for them.

sentence-transformers runs ``onnx/model.onnx`` through Optimum's ORTModelForFeatureExtraction:
the graph maps the tokenizer's inputs to ``last_hidden_state``, and the pipeline's Pooling,
Dense and Normalize modules run after it. Optimum supports only transformers < 4.58, so where
it is missing (as with transformers 5) these tests run the file with ONNX Runtime the same
way; with Optimum installed they also load it through ``SentenceTransformer(backend="onnx")``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from demitasse.encoders.exit_heads import save_exit_heads
from demitasse.export import export_sentence_transformer
from demitasse.export.onnx_files import ONNX_INT8_FILE
from tests.helpers import build_tiny_model

TEXTS = [
    "A man is playing a guitar.",
    "The cat sat on the mat.",
    "Stocks fell sharply after the central bank raised interest rates again.",
    "ok",
    "Two dogs are running through a field of tall grass near the river bank.",
    "How do I reset my password?",
]


def run_like_sentence_transformers(folder: Path, file: str, texts: list[str]) -> np.ndarray:
    """What ``SentenceTransformer(folder, backend="onnx")`` computes: the ONNX graph for the
    Transformer module, then the export's own later modules."""
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu")
    session = ort.InferenceSession(str(folder / file), providers=["CPUExecutionProvider"])
    features = st.tokenize(texts)
    names = [i.name for i in session.get_inputs()]
    (states,) = session.run(["last_hidden_state"], {n: features[n].numpy() for n in names})
    out: dict[str, Any] = {**features, "token_embeddings": torch.from_numpy(states)}
    with torch.no_grad():
        for module in list(st)[1:]:
            out = module(out)
    return out["sentence_embedding"].numpy()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT cut at layer 2, whose exit head becomes a Dense module."""
    model = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    rng = np.random.default_rng(0)
    head = (rng.standard_normal((32, 32)).astype(np.float32) / 6, np.zeros(32, np.float32))
    save_exit_heads(model, {2: head})
    return export_sentence_transformer(model, tmp_path_factory.mktemp("out") / "st", layer=2)


@pytest.fixture(scope="module")
def minilm_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_sentence_transformer(
        "all-MiniLM-L6-v2", tmp_path_factory.mktemp("minilm") / "st", layer=3
    )


def test_the_export_lists_its_onnx_files(tiny_export: Path) -> None:
    info = json.loads((tiny_export / "demitasse_export.json").read_text())
    assert info["onnx"] == ["onnx/model.onnx", f"onnx/{ONNX_INT8_FILE}"]
    assert all((tiny_export / name).is_file() for name in info["onnx"])
    assert 'backend="onnx"' in (tiny_export / "README.md").read_text()


@pytest.mark.parametrize("fixture", ["tiny_export", "minilm_export"])
def test_the_onnx_file_gives_the_exports_vectors(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    from sentence_transformers import SentenceTransformer

    folder: Path = request.getfixturevalue(fixture)
    expected = SentenceTransformer(str(folder), device="cpu").encode(TEXTS)
    got = run_like_sentence_transformers(folder, "onnx/model.onnx", TEXTS)
    assert got.shape == expected.shape
    assert cosines(got, expected).min() >= 0.9999
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_the_int8_file_of_minilm_stays_close(minilm_export: Path) -> None:
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(minilm_export), device="cpu").encode(TEXTS)
    got = run_like_sentence_transformers(minilm_export, f"onnx/{ONNX_INT8_FILE}", TEXTS)
    similarity = cosines(got, expected)
    assert np.median(similarity) >= 0.99 and similarity.min() >= 0.95


def test_sentence_transformers_loads_it_with_the_onnx_backend(minilm_export: Path) -> None:
    pytest.importorskip("optimum.onnxruntime", reason="Optimum supports transformers < 4.58 only")
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(minilm_export), device="cpu").encode(TEXTS)
    onnx = SentenceTransformer(str(minilm_export), device="cpu", backend="onnx").encode(TEXTS)
    assert cosines(onnx, expected).min() >= 0.9999
