"""Every refusal is a 4xx with OpenAI's error object, which the openai client raises as its
own exception; nothing a request holds yields a 500 or stops the server."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openai
import pytest

from demitasse.model import CompressedModel
from demitasse.serve import Limits, load_served_model
from tests.serve.servers import client, get, post, running, sentences

LIMITS = Limits(max_inputs=5, max_chars=60, max_body_bytes=4000, max_concurrent=2)


@pytest.fixture(scope="module")
def model(model_dir: Path) -> CompressedModel:
    return load_served_model(model_dir)


@pytest.fixture(scope="module")
def url(model: CompressedModel) -> str:
    with running(model, limits=LIMITS) as base_url:
        yield base_url


def _error(status: int, body: dict) -> dict:
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and "\n" not in error["message"]
    return error


def test_too_many_inputs_is_a_400(url: str) -> None:
    with pytest.raises(openai.BadRequestError, match="at most 5") as caught:
        client(url).embeddings.create(input=sentences(6), model="tiny")
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == "input"


def test_too_long_an_input_is_a_400(url: str) -> None:
    with pytest.raises(openai.BadRequestError, match="at most 60"):
        client(url).embeddings.create(input=["a " * 31], model="tiny")


def test_too_large_a_body_is_a_413(url: str) -> None:
    with pytest.raises(openai.APIStatusError, match="at most 4000") as caught:
        client(url).embeddings.create(input=["x"], model="tiny", user="u" * 5000)
    assert caught.value.status_code == 413
    status, body = post(url, "/embeddings", b"{" + b" " * 5000 + b"}")
    assert status == 413 and _error(status, body)["code"] == "request_too_large"


def test_a_body_without_content_length_is_counted_as_it_arrives(url: str) -> None:
    port = int(url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Type: application/json\r\n\r\n")  # fmt: skip
        for _ in range(5):
            conn.sendall(b"3e8\r\n" + b" " * 1000 + b"\r\n")
        conn.sendall(b"0\r\n\r\n")
        reply = conn.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413"), reply


def test_more_concurrent_requests_than_allowed_is_a_429(model: CompressedModel) -> None:
    # Two requests in flight, long enough to be seen there: a few thousand texts each, on the
    # encoder thread one after the other. A request counts once its body has arrived.
    texts = [" ".join(sentences(8, seed=i)) for i in range(2000)]
    with running(model, limits=Limits(max_concurrent=2)) as url, ThreadPoolExecutor(2) as pool:
        held = [
            pool.submit(post, url, "/embeddings", {"input": texts, "model": "tiny"})
            for _ in range(2)
        ]
        _wait_for_in_flight(url, 2)
        with pytest.raises(openai.RateLimitError) as caught:
            client(url).embeddings.create(input=["a cat"], model="tiny")
        assert caught.value.status_code == 429
        assert caught.value.body["code"] == "rate_limit_exceeded"
        for future in held:  # the held ones finish normally
            status, reply = future.result()
            assert status == 200 and len(reply["data"]) == len(texts)
        assert client(url).embeddings.create(input=["a cat"], model="tiny").data


def _wait_for_in_flight(url: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while get(url.removesuffix("/v1"), "/health")[1]["in_flight"] < count:
        assert time.monotonic() < deadline, "the held requests never started"
        time.sleep(0.02)


def test_dimensions_larger_than_the_model_are_a_400(url: str) -> None:
    with pytest.raises(openai.BadRequestError, match=r"1\.\.16 dimensions") as caught:
        client(url).embeddings.create(input=["a dog"], model="tiny", dimensions=17)
    assert caught.value.body["param"] == "dimensions"


def test_an_unknown_model_is_a_404(url: str) -> None:
    with pytest.raises(openai.NotFoundError, match="serves 'tiny'") as caught:
        client(url).embeddings.create(input=["a dog"], model="/etc/passwd")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client(url).models.retrieve("text-embedding-3-small")


def test_malformed_json_is_a_400(url: str) -> None:
    for body in (b"{", b"\xff\xfe", b"[" * 3000, b"null", b'"text"'):
        status, reply = post(url, "/embeddings", body)
        assert status == 400, body[:10]
        assert _error(status, reply)["type"] == "invalid_request_error"


def test_an_empty_list_is_a_400(url: str) -> None:
    with pytest.raises(openai.BadRequestError, match="empty list"):
        client(url).embeddings.create(input=[], model="tiny")


def test_token_id_input_is_refused_clearly(url: str) -> None:
    for tokens in ([1, 2, 3], [[1, 2], [3]]):
        with pytest.raises(openai.BadRequestError, match="token-id input is not supported"):
            client(url).embeddings.create(input=tokens, model="tiny")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"model": "tiny"},
        {"input": "a dog"},
        {"input": "a dog", "model": 3},
        {"input": None, "model": "tiny"},
        {"input": {"text": "a"}, "model": "tiny"},
        {"input": ["a dog", None], "model": "tiny"},
        {"input": ["a dog", True], "model": "tiny"},
        {"input": ["   "], "model": "tiny"},
        {"input": "a dog", "model": "tiny", "dimensions": 0},
        {"input": "a dog", "model": "tiny", "dimensions": -1},
        {"input": "a dog", "model": "tiny", "dimensions": 2.5},
        {"input": "a dog", "model": "tiny", "dimensions": "8"},
        {"input": "a dog", "model": "tiny", "dimensions": True},
        {"input": "a dog", "model": "tiny", "dimensions": 10**30},
        {"input": "a dog", "model": "tiny", "encoding_format": "float16"},
        {"input": "a dog", "model": "tiny", "encoding_format": ["float"]},
    ],
)
def test_bad_fields_are_a_400_and_the_server_keeps_serving(url: str, body: dict) -> None:
    status, reply = post(url, "/embeddings", body)
    assert status == 400, reply
    _error(status, reply)
    status, _ = post(url, "/embeddings", {"input": "a dog", "model": "tiny"})
    assert status == 200


def test_unknown_routes_and_methods_answer_in_openai_error_format(url: str) -> None:
    status, reply = post(url, "/chat/completions", {"model": "tiny"})
    assert status == 404 and "/v1/chat/completions" in _error(status, reply)["message"]
    status, reply = get(url, "/embeddings")
    assert status == 405
    _error(status, reply)


def test_a_wrong_or_missing_api_key_is_a_401(model: CompressedModel) -> None:
    with running(model, api_key="s3cret") as url:
        with pytest.raises(openai.AuthenticationError) as caught:
            client(url, api_key="wrong").embeddings.create(input=["a dog"], model="tiny")
        assert caught.value.status_code == 401
        assert caught.value.body["code"] == "invalid_api_key"
        status, _ = post(url, "/embeddings", {"input": "a dog", "model": "tiny"})
        assert status == 401
        assert get(url.removesuffix("/v1"), "/health")[0] == 401
        good = client(url, api_key="s3cret").embeddings.create(input=["a dog"], model="tiny")
        assert np.isclose(np.linalg.norm(good.data[0].embedding), 1.0)


def test_request_ids_are_echoed_and_logged(url: str, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="demitasse.serve")
    response = client(url).embeddings.with_raw_response.create(
        input=["a dog"], model="tiny", extra_headers={"X-Request-ID": "trace-42"}
    )
    assert response.headers["x-request-id"] == "trace-42"
    other = client(url).embeddings.with_raw_response.create(input=["a dog"], model="tiny")
    generated = other.headers["x-request-id"]
    assert len(generated) == 32 and generated != "trace-42"
    deadline = time.monotonic() + 10
    while generated not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "trace-42 POST /v1/embeddings → 200" in caplog.text
    assert f"{generated} POST /v1/embeddings → 200" in caplog.text
