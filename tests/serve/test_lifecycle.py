"""``demitasse serve`` as a process: it starts on a free port, answers, and on SIGTERM lets
the request in flight finish before it exits cleanly; bad starts end in one line."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demitasse.cli import main
from demitasse.model import CompressedModel
from tests.conftest import REPO
from tests.helpers import correlated
from tests.serve.servers import get


def _start(model_dir: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "demitasse", "serve", str(model_dir), "--port", "0",
         "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    line = process.stdout.readline()  # printed once the socket is listening
    match = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
    assert match, line + process.stderr.read()
    return process, match.group(1)


def test_sigterm_lets_the_request_in_flight_finish(model_dir: Path) -> None:
    process, base = _start(model_dir)
    try:
        body = json.dumps({"input": ["a dog plays"], "model": model_dir.name}).encode()
        port = int(base.rsplit(":", 1)[1])
        conn = socket.create_connection(("127.0.0.1", port), timeout=60)
        head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
        conn.sendall(head % len(body) + body[:5])
        deadline = time.monotonic() + 30
        while get(base, "/health")[1]["receiving"] < 1:  # its body is arriving
            assert time.monotonic() < deadline
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the server is shutting down now, the request still in flight
        assert process.poll() is None
        conn.sendall(body[5:])
        reply = b""
        while chunk := conn.recv(1 << 20):  # the server closes the connection once it answered
            reply += chunk
        conn.close()
        reply = reply.decode()
        assert reply.startswith("HTTP/1.1 200"), reply
        assert '"object":"embedding"' in reply
        assert process.wait(timeout=60) == 0
        stderr = process.stderr.read()
        assert "stopped on SIGTERM" in stderr and "Traceback" not in stderr
        with pytest.raises(OSError):  # it listens no more
            socket.create_connection(("127.0.0.1", port), timeout=5)
    finally:
        process.kill()
        process.wait()


def test_a_vectors_only_model_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    CompressedModel(None, compressor="pca", dim=4).fit(vectors=correlated()).save(tmp_path / "v")
    assert main(["serve", str(tmp_path / "v"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "vectors-only model" in err and len(err.strip().splitlines()) == 1


def test_a_taken_port_is_refused_in_one_line(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(model_dir), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and len(err.strip().splitlines()) == 1


def test_a_missing_model_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", str(tmp_path / "nothing-here"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("demitasse: error:") and len(err.strip().splitlines()) == 1
