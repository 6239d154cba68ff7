"""Property-based tests (Hypothesis) over the server's request schema: whatever JSON (or bytes)
a client posts to ``/v1/embeddings`` (any type in any field, extra fields, huge numbers,
nested structures), the answer is a 200 with one embedding per input or a 4xx with OpenAI's
error object, never a 500.

The application runs in this process, driven through ASGI messages (its lifespan started once),
so each example costs a parse and, when valid, one encoder call. Bounded and deterministic like
tests/test_property_inputs.py (``derandomize=True``, a fixed example count, no database).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from demitasse.serve import GuardedApp, Limits, ServeSettings, create_app, load_served_model

LIMITS = Limits(max_inputs=8, max_chars=200, max_body_bytes=64 * 1024, max_concurrent=4)
SCHEMA = settings(
    max_examples=150,
    deadline=5000,  # ms per example; one is a parse and at most one small encoder call
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class InProcess:
    """An ASGI application on its own event loop: the lifespan started, requests sent as ASGI
    messages, as uvicorn would send them."""

    def __init__(self, app: GuardedApp) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.from_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.lifespan = self.loop.create_task(self._lifespan())
        assert self._lifespan_step("startup") == "lifespan.startup.complete"

    async def _lifespan(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        await self.app(scope, self.to_app.get, self.from_app.put)

    def _lifespan_step(self, step: str) -> str:
        async def run() -> str:
            await self.to_app.put({"type": f"lifespan.{step}"})
            return (await self.from_app.get())["type"]

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        assert self._lifespan_step("shutdown") == "lifespan.shutdown.complete"
        self.loop.run_until_complete(self.lifespan)
        self.loop.close()

    def post(self, body: bytes) -> tuple[int, bytes]:
        return self.loop.run_until_complete(self._post(body))

    async def _post(self, body: bytes) -> tuple[int, bytes]:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/v1/embeddings",
            "raw_path": b"/v1/embeddings", "query_string": b"", "root_path": "",
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {},
        }  # fmt: skip
        incoming = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if incoming:
                return incoming.pop()
            await asyncio.Event().wait()  # the client stays until it has its answer
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        assert sent[0]["type"] == "http.response.start"
        return sent[0]["status"], b"".join(message.get("body", b"") for message in sent[1:])


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[InProcess]:
    model = load_served_model(model_dir)
    server = InProcess(create_app(model, ServeSettings(name="tiny", limits=LIMITS)))
    yield server
    server.close()


def _check(server: InProcess, body: bytes) -> None:
    status, reply = server.post(body)
    assert status == 200 or 400 <= status < 500, (status, reply[:300])
    payload = json.loads(reply)
    if status == 200:
        sent = json.loads(body)["input"]
        assert len(payload["data"]) == (1 if isinstance(sent, str) else len(sent))
        assert payload["model"] == "tiny"
    else:
        error = payload["error"]
        assert set(payload) == {"error"} and set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and "\n" not in error["message"]


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**30, -(2**63), 2**64, 1e308, -0.0])
    | st.floats()  # NaN and ±Infinity too, which json writes and reads
    | st.text(max_size=20)
)


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)


ANY_JSON = st.recursive(SCALARS, _nested, max_leaves=12)
#: Any text, lone surrogates included (json writes them as \ud800 escapes).
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60)
TEXTS = ANY_TEXT | st.sampled_from(["a dog plays", "   ", "", "x" * (LIMITS.max_chars + 1)])
#: Each field of the schema: a value the model takes, and any other.
VALID = {
    "model": st.just("tiny"),
    "input": ANY_TEXT | st.lists(ANY_TEXT, min_size=1, max_size=LIMITS.max_inputs),
    "dimensions": st.none() | st.integers(min_value=1, max_value=16),
    "encoding_format": st.sampled_from(["float", "base64", "int8", "binary", None]),
}
ODD = {
    "model": st.sampled_from(["", "Tiny", "/etc/passwd"]) | ANY_JSON,
    "input": TEXTS
    | st.lists(TEXTS, max_size=LIMITS.max_inputs + 1)
    | st.lists(st.integers(), max_size=4)
    | ANY_JSON,
    "dimensions": st.integers(min_value=-2, max_value=40) | ANY_JSON,
    "encoding_format": st.sampled_from(["float32", "float16", "ubinary", "pq16", ""]) | ANY_JSON,
}


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A request object: each field of the schema absent, valid (most often) or any JSON
    value, and extra fields."""
    body = draw(st.dictionaries(st.text(max_size=10), ANY_JSON, max_size=2))
    for name in VALID:
        kind = draw(st.sampled_from(["valid"] * 4 + ["odd", "absent"]))
        if kind != "absent":
            body[name] = draw((VALID if kind == "valid" else ODD)[name])
    return body


@SCHEMA
@given(body=requests())
@example(body={"model": "tiny", "input": ["a dog plays", "a cat"], "dimensions": 8})
@example(body={"model": "tiny", "input": "a dog", "encoding_format": "binary", "dimensions": 9})
@example(body={"model": "tiny", "input": "a dog", "dimensions": 10**30})
@example(body={"model": "tiny", "input": [[1, 2], [3]], "extra": {"nested": [[[[]]]]}})
@example(body={"model": "tiny", "input": ["\ud800 a lone surrogate", "\x00"]})
def test_any_request_object_is_answered_200_or_4xx(server: InProcess, body: dict) -> None:
    _check(server, json.dumps(body).encode())


@SCHEMA
@given(body=ANY_JSON.map(lambda value: json.dumps(value).encode()) | st.binary(max_size=200))
@example(body=b"[" * 5000)
@example(body=b'{"model": "tiny", "input": "a dog", "dimensions": 1e400}')
@example(body=b'{"model": "tiny", "input": "a dog", "dimensions": ' + b"9" * 5000 + b"}")
@example(body=b"\xff\xfe{}")
@example(body=b"x" * (LIMITS.max_body_bytes + 1))
def test_any_body_is_answered_200_or_4xx(server: InProcess, body: bytes) -> None:
    _check(server, body)
