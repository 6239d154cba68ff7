"""The pure parts of ``benchmarks/edge_probe.py``: how a run or an answer is classified, what
counts as a lost file, and the raw HTTP it reads."""

from __future__ import annotations

import io
import signal
from pathlib import Path

import numpy as np
import pytest

import edge_probe as probe


@pytest.mark.parametrize(
    ("expect", "code", "stderr", "flags", "outcome"),
    [
        (probe.REFUSE, 2, "demitasse: error: x.txt: file not found\n", {}, probe.OK_REFUSED),
        (probe.REFUSE, 2, "demitasse: warning: w\ndemitasse: error: e\n", {}, probe.MULTI_LINE),
        (probe.REFUSE, 2, "", {}, probe.MULTI_LINE),
        (probe.REFUSE, 0, "", {}, probe.ACCEPTED_BAD),
        (probe.REFUSE, 1, "Traceback (most recent call last):\n  ...\n", {}, probe.TRACEBACK),
        (probe.REFUSE, 1, "boom\n", {}, probe.OTHER_EXIT),
        (probe.REFUSE, 2, "demitasse: error: e\n", {"left": True}, probe.LEFT_FILES),
        (probe.REFUSE, 2, "demitasse: error: e\n", {"lost": True}, probe.LOST),
        (probe.REFUSE, None, "", {"timed_out": True}, probe.TIMEOUT),
        (probe.SUCCEED, 0, "demitasse: warning: replaced 2 characters\n", {}, probe.OK_SUCCEEDED),
        (probe.SUCCEED, 2, "demitasse: error: e\n", {}, probe.REFUSED_GOOD),
        (probe.EITHER, 0, "", {}, probe.OK_SUCCEEDED),
        (probe.EITHER, 2, "demitasse: error: e\n", {}, probe.OK_REFUSED),
        (probe.EITHER, 0, "", {"left": True}, probe.LEFT_FILES),
    ],
)
def test_a_command_line_run_is_classified(
    expect: str, code: int | None, stderr: str, flags: dict[str, bool], outcome: str
) -> None:
    assert probe.classify_cli(expect, code, stderr, **flags) == outcome


def test_an_interrupted_run_ends_with_128_plus_the_signal_in_one_line() -> None:
    term = int(signal.SIGTERM)
    line = "demitasse: interrupted (SIGTERM); earlier outputs are intact\n"
    assert probe.classify_cli(probe.INTERRUPT, 128 + term, line, signum=term) == (
        probe.OK_INTERRUPTED
    )
    assert probe.classify_cli(probe.INTERRUPT, -term, "", signum=term) == probe.OK_INTERRUPTED
    assert probe.classify_cli(probe.INTERRUPT, 0, "", signum=term) == probe.OK_SUCCEEDED
    assert probe.classify_cli(probe.INTERRUPT, 2, "e\n", signum=term) == probe.OTHER_EXIT
    assert probe.classify_cli(probe.INTERRUPT, 143, "a\nb\n", signum=term) == probe.MULTI_LINE


ERROR = b'{"error": {"message": "m", "type": "invalid_request_error", "param": null, "code": null}}'


@pytest.mark.parametrize(
    ("expect", "status", "body", "outcome"),
    [
        (probe.REFUSE, 400, ERROR, probe.OK_REFUSED),
        (probe.REFUSE, 503, ERROR, probe.OK_REFUSED),
        (probe.REFUSE, 500, ERROR, probe.HTTP_500),
        (probe.REFUSE, 400, b"Invalid HTTP request received.", probe.NON_JSON),
        (probe.REFUSE, 404, b'{"detail": "Not Found"}', probe.BAD_ERROR),
        (probe.REFUSE, 200, b'{"data": []}', probe.ACCEPTED_BAD),
        (probe.SUCCEED, 200, b'{"data": []}', probe.OK_SUCCEEDED),
        (probe.SUCCEED, 400, ERROR, probe.REFUSED_GOOD),
        (probe.EITHER, 429, ERROR, probe.OK_REFUSED),
        (probe.REFUSE, None, b"", probe.NO_ANSWER),
        (probe.REFUSE, 307, b"", probe.OTHER_STATUS),
    ],
)
def test_an_answer_is_classified(
    expect: str, status: int | None, body: bytes, outcome: str
) -> None:
    assert probe.classify_http(expect, status, body) == outcome


def test_the_worst_outcome_wins() -> None:
    assert probe.worst([probe.OK_SUCCEEDED, probe.OK_REFUSED]) == probe.OK_SUCCEEDED
    assert probe.worst([probe.OK_SUCCEEDED, probe.HTTP_500, probe.NON_JSON]) == probe.HTTP_500
    assert probe.worst([probe.OK_REFUSED, probe.TRACEBACK]) == probe.TRACEBACK


def test_changes_see_removed_changed_and_added_files(tmp_path: Path) -> None:
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    (tmp_path / "user" / "gone.txt").write_text("mine too")
    (tmp_path / "cache").mkdir()
    (tmp_path / "link").symlink_to("user/notes.txt")
    before = probe.snapshot(tmp_path, skip=frozenset({"cache"}))
    assert before["link"] == "link:user/notes.txt" and before["user"] == "dir"
    (tmp_path / "user" / "notes.txt").write_text("changed")
    (tmp_path / "user" / "gone.txt").unlink()
    (tmp_path / "user" / ".dt-1234-tmp").write_text("left")
    (tmp_path / "cache" / "anything").write_text("not watched")
    after = probe.snapshot(tmp_path, skip=frozenset({"cache"}))
    changed, added = probe.changes(before, after)
    assert changed == ["user/gone.txt", "user/notes.txt"]
    assert added == ["user/.dt-1234-tmp"] and probe.temporaries(added) == added
    assert probe.changes(before, after, ["user"]) == ([], [])
    assert probe.changes(before, after, ["user/notes.txt"])[0] == ["user/gone.txt"]


def test_http_replies_are_parsed_with_either_framing() -> None:
    plain = b'HTTP/1.1 400 Bad Request\r\ncontent-length: 4\r\n\r\n{"a"HTTP/1.1 200 OK\r\n'
    chunked = (
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"b\r\n2\r\n":\r\n0\r\n\r\n'
    )
    replies = probe.parse_replies(plain[:-17] + chunked)
    assert [(r.status, r.body) for r in replies] == [(400, b'{"a"'), (200, b'{"b":')]
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    assert [(r.status, r.body) for r in probe.parse_replies(interim)] == [(200, b"{}")]
    assert probe.parse_replies(b"") == []
    assert probe.parse_replies(b"Invalid HTTP request") == []


def test_a_request_carries_its_length_unless_told_otherwise() -> None:
    raw = probe.request(b"{}")
    assert raw.startswith(b"POST /v1/embeddings HTTP/1.1\r\n")
    assert b"Content-Length: 2\r\n" in raw and raw.endswith(b"\r\n\r\n{}")
    assert b"Content-Length: abc" in probe.request(b"{}", length="abc")
    assert b"Content-Length" not in probe.request(None, method="GET")
    assert b"Content-Type" not in probe.request(b"{}", headers={"Content-Type": None})


def test_a_shape_bomb_keeps_the_header_readable() -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((120, 32), np.float32))
    bomb = io.BytesIO(probe.npy_with_shape(buffer.getvalue(), "(100000000000, 32)"))
    assert np.lib.format.read_magic(bomb) == (1, 0)
    shape, _, dtype = np.lib.format.read_array_header_1_0(bomb)
    assert shape == (100_000_000_000, 32) and dtype == np.float32


def test_cases_are_selected_by_name_stride_and_limit() -> None:
    names = ["encode/a", "encode/b", "fit/a", "server/x", "encode/c"]
    assert probe.select(names, "encode/", None) == [0, 1, 4]
    assert probe.select(names, "fit/,server/", None) == [2, 3]
    assert probe.select(names, None, 2) == [0, 1]
    assert probe.select(names, None, None, every=2) == [0, 2, 4]


def test_commands_are_shown_as_a_shell_reads_them() -> None:
    work = Path("/tmp/edge")
    assert probe.shown_argument("/tmp/edge/models/tm", work) == "$W/models/tm"
    assert probe.shown_argument("/tmp/edge/a b", work) == '"$W/a b"'
    assert probe.shown_argument("d\udcffg", work) == "$'d\\xffg'"
    assert probe.shown_argument("", work) == "''"
    assert probe.slug("a/b") != probe.slug("a_b")
