"""Fixtures of the serve tests: the tiny models served (built here, nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demitasse.model import CompressedModel
from tests.helpers import build_tiny_model
from tests.serve.servers import sentences

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("serve-encoder"))


@pytest.fixture(scope="session")
def model_dir(tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model with every feature the server exposes: Matryoshka widths (PCA) and int8."""
    model = CompressedModel(str(tiny_encoder_dir), compressor="pca", dim=16, precision="int8")
    model.fit(sentences(300), data_label="serve-test")
    return model.save(tmp_path_factory.mktemp("serve-model") / "tiny-pca16")


@pytest.fixture(scope="session")
def static_dir(tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer

    from demitasse.static.model import StaticModel

    tokenizer = Tokenizer.from_file(str(tiny_encoder_dir / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    vectors = np.random.default_rng(0).standard_normal((vocab, 24)).astype(np.float32)
    return StaticModel(vectors, tokenizer, name="tiny-static").save(
        tmp_path_factory.mktemp("serve-static") / "tiny-static"
    )
