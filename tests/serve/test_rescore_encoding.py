"""A model that rescores serves what each document keeps for its rescoring (issue #50): a
vector database stores it beside the codes, so the tuned binary + rescoring model can be
rebuilt outside demitasse from the server alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from demitasse.model import CompressedModel, encoder_vectors
from demitasse.serve import ServeSettings, create_app, load_served_model
from tests.serve.servers import sentences
from tests.serve.test_request_properties import LIMITS, InProcess


@pytest.fixture(scope="module")
def rescoring_dir(tiny_encoder_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = CompressedModel(
        str(tiny_encoder_dir), compressor="pca", dim=16, precision="binary", rescore_factor=4
    )
    model.fit(sentences(200), data_label="serve-test")
    return model.save(tmp_path_factory.mktemp("serve-rescoring") / "tiny-binary")


@pytest.fixture(scope="module")
def server(rescoring_dir: Path) -> Iterator[InProcess]:
    app = create_app(load_served_model(rescoring_dir), ServeSettings(name="tiny", limits=LIMITS))
    server = InProcess(app)
    yield server
    server.close()


def _post(server: InProcess, **request: object) -> tuple[int, dict]:
    status, body = server.post(json.dumps({"model": "tiny", **request}).encode())
    return status, json.loads(body)


def test_rescore_gives_what_a_document_keeps(server: InProcess, rescoring_dir: Path) -> None:
    texts = sentences(5)
    status, answer = _post(server, input=texts, encoding_format="rescore")
    assert status == 200, answer
    served = np.array([row["embedding"] for row in answer["data"]])
    model = CompressedModel.load(rescoring_dir)
    kept = model.stages().rescore_store.keep(encoder_vectors(model, texts))
    assert kept.dtype == np.int8
    np.testing.assert_array_equal(served, kept)
    # The codes the first stage searches, as before.
    status, answer = _post(server, input=texts, encoding_format="binary")
    assert status == 200
    codes = np.array([row["embedding"] for row in answer["data"]], dtype=np.uint8)
    np.testing.assert_array_equal(codes, model.encode(texts))


def test_rescore_is_refused_where_it_does_not_apply(server: InProcess, model_dir: Path) -> None:
    status, answer = _post(server, input=["a dog"], encoding_format="rescore", dimensions=8)
    assert status == 400 and "does not apply to 'rescore'" in answer["error"]["message"]
    plain = InProcess(create_app(load_served_model(model_dir), ServeSettings(name="tiny")))
    try:
        status, answer = _post(plain, input=["a dog"], encoding_format="rescore")
        assert status == 400 and "does not rescore" in answer["error"]["message"]
    finally:
        plain.close()
