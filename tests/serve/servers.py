"""Helpers of the serve tests: a real uvicorn server in a thread on a free loopback port,
the openai client and raw HTTP for what that client will not send."""

from __future__ import annotations

import json
import random
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from demitasse.model import CompressedModel
from tests.helpers import WORDS


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(n)]


@contextmanager
def running(model: CompressedModel, **settings: Any) -> Iterator[str]:
    """Serve ``model`` on a free loopback port; yields the OpenAI base URL (…/v1)."""
    from demitasse.serve import ServeSettings, bind, serve

    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    started = threading.Event()
    servers: list[Any] = []

    def ready(server: Any) -> None:
        servers.append(server)
        started.set()

    settings.setdefault("name", "tiny")
    thread = threading.Thread(
        target=serve,
        args=(model, ServeSettings(**settings), sock),
        kwargs={"on_ready": ready},
        daemon=True,
    )
    thread.start()
    assert started.wait(60), "the server did not start"
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        servers[0].should_exit = True
        thread.join(60)
        assert not thread.is_alive()


def client(base_url: str, api_key: str = "unused") -> Any:
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)


def post(base_url: str, path: str, body: bytes | dict[str, Any], **headers: str) -> tuple[
    int, dict[str, Any]
]:  # fmt: skip
    """A raw POST (for what the openai client will not send): the status and the JSON body."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        base_url + path, data=data, headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def get(base_url: str, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(base_url + path, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
