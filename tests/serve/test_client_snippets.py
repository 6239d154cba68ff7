"""docs/serve.md's client snippets (plain requests, LangChain) run as written against a real
server on loopback (issue #50: LangChain needs check_embedding_ctx_length=False offline)."""

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
    return {("langchain" if "langchain" in b else "requests"): b for b in blocks}


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
