"""Clients that would hold the server hostage (issue #49): slow senders, a body shorter than its
Content-Length, headers never finished, clients that leave mid-request or never read their
answer, and a shutdown whose grace period ends with a request unanswered. Real servers on
loopback, raw sockets."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from demitasse.model import CompressedModel
from demitasse.serve import Limits, load_served_model
from tests.conftest import REPO
from tests.serve.servers import get, post, running, sentences

#: The servers' deadline for headers and for a body, short to keep the tests fast.
BODY_TIMEOUT = 1.0
#: What a loaded machine may add to a deadline before the drop is seen.
MARGIN = 2.0
BODY = json.dumps({"input": ["a dog plays"], "model": "tiny"}).encode()


@pytest.fixture(scope="module")
def model(model_dir: Path) -> CompressedModel:
    return load_served_model(model_dir)


@pytest.fixture(scope="module")
def url(model: CompressedModel) -> Iterator[str]:
    with running(model, limits=Limits(max_concurrent=2), body_timeout_s=BODY_TIMEOUT) as base:
        yield base


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def _head(length: int, request_id: str = "") -> bytes:
    extra = f"X-Request-ID: {request_id}\r\n" if request_id else ""
    return (f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"{extra}Content-Length: {length}\r\n\r\n").encode()  # fmt: skip


def _send(url: str, data: bytes) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", _port(url)), timeout=60)
    conn.sendall(data)
    return conn


def _reply(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    reply = b""
    while chunk := conn.recv(1 << 20):
        reply += chunk
    conn.close()
    return reply


def _error(reply: bytes, status: int) -> dict[str, Any]:
    """The OpenAI error object of a raw reply, checked to be JSON with ``status``."""
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), reply[:200]
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def _health(url: str) -> dict[str, Any]:
    return get(url.removesuffix("/v1"), "/health")[1]


def _wait_for(url: str, key: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while _health(url)[key] < count:
        assert time.monotonic() < deadline, f"{key} never reached {count}"
        time.sleep(0.02)


def test_slow_senders_hold_no_slot_and_are_dropped_with_a_408(url: str) -> None:
    before = _health(url)
    opened = time.monotonic()
    # Twice --max-concurrent: headers and 5 bytes of the body, then nothing.
    slow = [_send(url, _head(len(BODY)) + BODY[:5]) for _ in range(4)]
    _wait_for(url, "receiving", before["receiving"] + 4)
    status, reply = post(url, "/embeddings", {"input": "a dog", "model": "tiny"})
    assert status == 200, reply  # not 429: the slow senders hold no slot
    assert _health(url)["receiving"] == before["receiving"] + 4  # served while they stall
    held = []
    for conn in slow:
        error = _error(_reply(conn), 408)  # then the connection is closed
        held.append(time.monotonic() - opened)
        assert error["code"] == "request_timeout" and "5 bytes of" in error["message"]
    assert min(held) >= BODY_TIMEOUT * 0.9 and max(held) < BODY_TIMEOUT + MARGIN, held
    after = _health(url)
    assert after["timed_out"] == before["timed_out"] + 4
    assert after["receiving"] == before["receiving"] and after["in_flight"] == 0


def test_a_body_shorter_than_its_content_length_is_a_408(url: str) -> None:
    started = time.monotonic()
    conn = _send(url, _head(len(BODY) + 100) + BODY)  # all of it, 100 bytes short
    error = _error(_reply(conn), 408)
    elapsed = time.monotonic() - started
    assert f"{len(BODY)} bytes of {len(BODY) + 100}" in error["message"]
    assert BODY_TIMEOUT * 0.9 <= elapsed < BODY_TIMEOUT + MARGIN, elapsed
    assert post(url, "/embeddings", {"input": "a dog", "model": "tiny"})[0] == 200


@pytest.mark.parametrize(
    "framing",
    [b"Content-Length: abc", b"Content-Length: -1", b"Content-Length: 5, 7",
     b"Transfer-Encoding: gzip"],
)  # fmt: skip
def test_malformed_framing_is_a_json_400(url: str, framing: bytes) -> None:
    """What uvicorn cannot parse is answered below the app: still OpenAI's JSON, not text."""
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    error = _error(_reply(_send(url, head + framing + b"\r\n\r\n" + BODY)), 400)
    assert error["code"] == "malformed_request"
    assert post(url, "/embeddings", {"input": "a dog", "model": "tiny"})[0] == 200


def test_a_trailing_slash_is_a_json_404_not_a_redirect(url: str) -> None:
    status, reply = post(url, "/embeddings/", {"input": "a dog", "model": "tiny"})
    assert status == 404 and set(reply["error"]) == {"message", "type", "param", "code"}


def test_headers_never_finished_are_a_408_and_a_silent_connection_is_closed(url: str) -> None:
    started = time.monotonic()
    partial = _send(url, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
    silent = _send(url, b"")
    assert _error(_reply(partial), 408)["code"] == "request_timeout"
    assert _reply(silent) == b""  # closed without a word: it said nothing either
    elapsed = time.monotonic() - started
    assert BODY_TIMEOUT * 0.9 <= elapsed < BODY_TIMEOUT + MARGIN, elapsed
    # A refusal that leaves the body unread does not keep a dribbling client connected.
    dribbling = _send(url, _head(10**6).replace(b"/v1/embeddings", b"/v1/nothing") + b"x")
    for _ in range(int((BODY_TIMEOUT + MARGIN) / 0.2)):
        try:
            dribbling.sendall(b"x")
        except OSError:
            break
        time.sleep(0.2)
    assert _reply(dribbling).startswith(b"HTTP/1.1 404")


def _log_lines(caplog: pytest.LogCaptureFixture, text: str, count: int = 1) -> list[str]:
    deadline = time.monotonic() + 10
    while True:
        lines = [record.getMessage() for record in caplog.records]
        found = [line for line in lines if text in line]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_a_client_leaving_mid_body_is_one_log_line(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="demitasse.serve")
    before = _health(url)
    conn = _send(url, _head(len(BODY), "gone-mid-body") + BODY[:5])
    _wait_for(url, "receiving", before["receiving"] + 1)
    conn.close()
    lines = _log_lines(caplog, "gone-mid-body")
    assert len(lines) == 1 and "client disconnected mid-body" in lines[0], lines
    assert not [record for record in caplog.records if record.exc_info], caplog.text
    assert "Traceback" not in caplog.text
    assert _health(url)["disconnected"] == before["disconnected"] + 1
    assert post(url, "/embeddings", {"input": "a dog", "model": "tiny"})[0] == 200


def _long_texts(n: int) -> list[str]:
    """Texts the tiny model truncates at its longest (32 tokens): about a millisecond each."""
    return [" ".join(sentences(8, seed=i)) for i in range(n)]


def test_a_client_leaving_before_its_answer_frees_the_encoder(
    model: CompressedModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="demitasse.serve")
    with running(model) as url:
        body = json.dumps({"input": _long_texts(4000), "model": "tiny"}).encode()
        conn = _send(url, _head(len(body), "gone-early") + body)
        _wait_for(url, "in_flight", 1)
        conn.close()
        lines = _log_lines(caplog, "gone-early")
        assert len(lines) == 1 and "client disconnected before its answer" in lines[0], lines
        assert _health(url)["disconnected"] == 1
        # Answered after whatever of the 4000 texts was encoded: the chunks still queued when
        # the client left were skipped.
        assert post(url, "/embeddings", {"input": "a dog", "model": "tiny"})[0] == 200
        assert _health(url)["texts"] < 4000
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


#: The send deadline of the unread-answer test, short to keep it fast.
SEND_TIMEOUT = 1.0


def _small_send_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers started from here get sockets whose accepted connections (they inherit it) have
    a 4 KiB send buffer: an unread answer then waits in the server's memory after a few KiB,
    not after the megabytes loopback would buffer in the kernel."""
    import demitasse.serve

    bind = demitasse.serve.bind

    def small(host: str, port: int) -> socket.socket:
        sock = bind(host, port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        return sock

    monkeypatch.setattr(demitasse.serve, "bind", small)


def _drained(conn: socket.socket) -> bytes:
    """What the server sent before it closed (or reset) the connection."""
    reply = b""
    try:
        while chunk := conn.recv(1 << 16):
            reply += chunk
    except ConnectionResetError:
        pass
    conn.close()
    return reply


def test_an_answer_left_unread_is_dropped_at_the_send_deadline(
    model: CompressedModel, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="demitasse.serve")
    _small_send_buffers(monkeypatch)
    body = json.dumps({"input": ["a dog plays"] * 2000, "model": "tiny"}).encode()
    with running(model, limits=Limits(max_concurrent=1), send_timeout_s=SEND_TIMEOUT) as url:
        # A client that asks for about 700 KB and never reads: a 1 KiB receive window, set
        # before it connects, fills at once.
        unread = socket.socket()
        unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        unread.settimeout(60)
        unread.connect(("127.0.0.1", _port(url)))
        unread.sendall(_head(len(body), "never-read") + body)
        assert _log_lines(caplog, "never-read POST /v1/embeddings → 200")
        answered = time.monotonic()
        lines = _log_lines(caplog, "answer left unread")
        elapsed = time.monotonic() - answered
        assert len(lines) == 1 and lines[0].startswith("never-read answer left unread"), lines
        assert f"for {SEND_TIMEOUT:g} s" in lines[0] and "connection closed" in lines[0]
        assert SEND_TIMEOUT * 0.5 <= elapsed < SEND_TIMEOUT + MARGIN, elapsed
        # Served after it, the same answer read as it comes (never cut, however large); the
        # unread one was dropped, not kept to be sent whenever its client reads.
        full = _reply(_send(url, _head(len(body)) + body))
        assert full.startswith(b"HTTP/1.1 200 ") and len(full) > 500_000
        assert len(_drained(unread)) < len(full) // 10
        health = _health(url)
        assert health["unread"] == 1 and health["in_flight"] == 0
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(_log_lines(caplog, "answer left unread")) == 1


def _start(model_dir: Path, *options: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "demitasse", "serve", str(model_dir), "--port", "0",
         "--threads", "1", *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    line = process.stdout.readline()  # printed once the socket is listening
    match = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
    assert match, line + process.stderr.read()
    return process, match.group(1)


def test_sigterm_past_the_grace_period_answers_503_and_counts_it(model_dir: Path) -> None:
    process, url = _start(model_dir, "--grace", "1")
    try:
        # Several seconds of encoding on one thread: still in flight when the grace ends.
        body = json.dumps({"input": _long_texts(12000), "model": model_dir.name}).encode()
        conn = _send(url, _head(len(body)) + body)
        _wait_for(url, "in_flight", 1)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        error = _error(_reply(conn), 503)
        elapsed = time.monotonic() - signalled
        assert error["type"] == "server_error" and error["code"] == "server_shutting_down"
        assert 1.0 <= elapsed < 1.0 + MARGIN, elapsed
        assert process.wait(timeout=60) == 0
        stderr = process.stderr.read()
        assert "stopped on SIGTERM; 1 request cut at the end of the grace period" in stderr
        assert "was answered" not in stderr and "Traceback" not in stderr, stderr
    finally:
        process.kill()
        process.wait()
