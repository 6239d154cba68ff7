"""docs/serve.md's client snippets (plain requests, LangChain, LlamaIndex) run as written against
a real server on loopback (issue #50: LangChain needs check_embedding_ctx_length=False offline;
LlamaIndex's OpenAIEmbedding refuses a model name not on OpenAI's list)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from demitasse.model import CompressedModel
from demitasse.serve import load_served_model
from tests.serve.servers import running

DOC = Path(__file__).resolve().parents[2] / "docs" / "serve.md"


def _snippets() -> dict[str, str]:
    section = DOC.read_text(encoding="utf-8").split("## Clients", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    found = {}
    for block in blocks:
        name = next((n for n in ("langchain", "llama_index") if n in block), "requests")
        found[name] = block
    return found


@pytest.fixture(scope="module")
def served(model_dir: Path) -> Iterator[tuple[str, CompressedModel]]:
    model = load_served_model(model_dir)
    with running(model, name="minilm-pca64") as base_url:
        yield base_url, model


def _run(snippet: str, base_url: str) -> dict:
    namespace: dict = {}
    exec(snippet.replace("http://127.0.0.1:8000/v1", base_url), namespace)  # our own docs
    return namespace


def test_plain_requests(served: tuple[str, CompressedModel]) -> None:
    base_url, model = served
    found = _run(_snippets()["requests"], base_url)
    expected = model.encode(["How do I reset my password?"], precision="float32")[0]
    vector = np.asarray(found["vector"], dtype=np.float32)
    assert vector.shape == expected.shape
    assert float(vector @ expected / np.linalg.norm(expected)) > 0.99999


def test_langchain_offline(served: tuple[str, CompressedModel]) -> None:
    pytest.importorskip("langchain_openai")
    base_url, model = served
    found = _run(_snippets()["langchain"], base_url)
    expected = model.encode(["How do I reset my password?"], precision="float32")[0]
    vector = np.asarray(found["vectors"][0], dtype=np.float32)
    assert float(vector @ expected / np.linalg.norm(expected)) > 0.99999
    assert len(found["query"]) == len(expected)


def test_llamaindex_offline(served: tuple[str, CompressedModel]) -> None:
    pytest.importorskip("llama_index.embeddings.openai_like")
    base_url, model = served
    found = _run(_snippets()["llama_index"], base_url)
    # LlamaIndex sends "\n" as " ", which a whitespace-splitting tokenizer reads the same.
    lines = found["embeddings"].get_text_embedding_batch(["How do I\nreset my password?"])
    texts = ["How do I reset my password?", "password reset", "How do I\nreset my password?"]
    expected = model.encode(texts, precision="float32")
    vectors = np.asarray([found["vectors"][0], found["query"], lines[0]], dtype=np.float32)
    assert vectors.shape == expected.shape
    cosines = np.sum(vectors * expected, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() > 0.99999
