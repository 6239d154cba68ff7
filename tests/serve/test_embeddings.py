"""The openai client against a real server: the vectors are the model's, at any width and in
every encoding the server offers."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import openai
import pytest

from demitasse.cli import main
from demitasse.model import CompressedModel
from demitasse.serve import load_served_model
from tests.serve.servers import client, cosines, get, post, running, sentences

TEXTS = sentences(40, seed=1)


@pytest.fixture(scope="module")
def model(model_dir: Path) -> CompressedModel:
    return load_served_model(model_dir)


@pytest.fixture(scope="module")
def url(model: CompressedModel) -> str:
    with running(model) as base_url:
        yield base_url


def _vectors(response: object) -> np.ndarray:
    data = response.data  # type: ignore[attr-defined]
    assert [item.index for item in data] == list(range(len(data)))
    return np.array([item.embedding for item in data], dtype=np.float32)


def test_vectors_equal_demitasse_encode(url: str, model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert main(["encode", str(model_dir), "--input", str(tmp_path / "texts.txt"),
                 "--out", str(tmp_path / "out.npy"), "--precision", "float32"]) == 0  # fmt: skip
    expected = np.load(tmp_path / "out.npy")
    # Without encoding_format the client asks for base64 and decodes it itself.
    for options in ({"encoding_format": "float"}, {}):
        response = client(url).embeddings.create(input=TEXTS, model="tiny", **options)
        served = _vectors(response)
        assert served.shape == expected.shape == (len(TEXTS), 16)
        assert cosines(served, expected).min() >= 0.99999
        np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    assert response.model == "tiny" and response.object == "list"
    assert response.usage.prompt_tokens == response.usage.total_tokens >= len(TEXTS)


def test_a_single_string_is_one_input(url: str, model: CompressedModel) -> None:
    response = client(url).embeddings.create(input=TEXTS[0], model="tiny")
    assert len(response.data) == 1
    assert cosines(_vectors(response), model.encode(TEXTS[:1], precision="float32"))[0] >= 0.99999


@pytest.mark.parametrize("dim", [1, 4, 15])
def test_dimensions_truncate_and_renormalise(url: str, model: CompressedModel, dim: int) -> None:
    served = _vectors(client(url).embeddings.create(input=TEXTS, model="tiny", dimensions=dim))
    assert served.shape == (len(TEXTS), dim)
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    assert cosines(served, model.encode(TEXTS, dim=dim, precision="float32")).min() >= 0.99999


def test_base64_round_trips_to_the_float_vectors(url: str) -> None:
    strings = client(url).embeddings.create(
        input=TEXTS, model="tiny", encoding_format="base64", dimensions=8
    )
    decoded = [
        np.frombuffer(base64.b64decode(item.embedding), dtype="<f4") for item in strings.data
    ]
    floats = client(url).embeddings.create(
        input=TEXTS, model="tiny", encoding_format="float", dimensions=8
    )
    np.testing.assert_array_equal(np.stack(decoded), _vectors(floats))


@pytest.mark.parametrize(("encoding", "precision"), [("int8", "int8"), ("binary", "binary")])
def test_int8_and_packed_binary_codes_are_the_models(
    url: str, model: CompressedModel, encoding: str, precision: str
) -> None:
    status, raw = post(url, "/embeddings",
                       {"input": TEXTS, "model": "tiny", "encoding_format": encoding})  # fmt: skip
    assert status == 200
    served = np.array([item["embedding"] for item in raw["data"]])
    expected = model.encode(TEXTS, precision=precision)
    assert served.shape == expected.shape
    np.testing.assert_array_equal(served, expected.astype(np.int64))


def test_binary_codes_at_a_reduced_width_pack_that_many_bits(
    url: str, model: CompressedModel
) -> None:
    body = {"input": TEXTS, "model": "tiny", "encoding_format": "binary", "dimensions": 12}
    status, raw = post(url, "/embeddings", body)
    assert status == 200
    served = np.array([item["embedding"] for item in raw["data"]])
    np.testing.assert_array_equal(served, model.encode(TEXTS, dim=12, precision="binary"))
    assert served.shape == (len(TEXTS), 2)


def test_ten_thousand_inputs_in_one_request(url: str, model: CompressedModel) -> None:
    texts = sentences(10_000, seed=2)
    response = client(url).embeddings.create(input=texts, model="tiny", dimensions=8)
    served = _vectors(response)
    assert served.shape == (10_000, 8)
    assert cosines(served, model.encode(texts, dim=8, precision="float32")).min() >= 0.99999


def test_models_and_health_describe_the_one_model_served(url: str, model: CompressedModel) -> None:
    listed = client(url).models.list()
    assert [m.id for m in listed.data] == ["tiny"]
    card = listed.data[0].model_dump()
    assert (card["dimensions"], card["matryoshka"]) == (16, True)
    assert card["precisions"] == model.precisions == ["float32", "int8", "binary"]
    assert client(url).models.retrieve("tiny").id == "tiny"
    status, health = get(url.removesuffix("/v1"), "/health")
    assert status == 200 and health["status"] == "ok" and health["model"] == "tiny"
    assert health["texts"] >= health["batches"] >= 1
    assert health["encoder_cpu_seconds"] > 0 and health["encoder_seconds"] > 0


def test_a_plain_encoder_serves_its_own_vectors(tiny_encoder_dir: Path) -> None:
    from demitasse.loading import load_encoder

    model = load_served_model(tiny_encoder_dir)
    assert model.recipe.compressor == "none" and model.dims == [32]
    expected = load_encoder(tiny_encoder_dir, cache=False).encode(TEXTS)
    with running(model, name="plain") as url:
        served = _vectors(client(url).embeddings.create(input=TEXTS, model="plain"))
        # Without a Matryoshka compressor the encoder has its one width: less is refused.
        with pytest.raises(openai.BadRequestError, match="produces 32 dimensions"):
            client(url).embeddings.create(input=TEXTS, model="plain", dimensions=16)
    assert cosines(served, expected).min() >= 0.99999


def test_a_static_model_is_served(static_dir: Path) -> None:
    from demitasse.loading import load_encoder

    model = load_served_model(static_dir)
    assert model.recipe.encoder_kind == "static"
    expected = load_encoder(static_dir).encode(TEXTS)
    with running(model, name="static") as url:
        response = client(url).embeddings.create(input=TEXTS, model="static")
    assert cosines(_vectors(response), expected).min() >= 0.99999
    assert response.usage.prompt_tokens > 0
