"""Load the model to serve, bind the socket, run uvicorn until SIGTERM or Ctrl-C.

On SIGTERM (or SIGINT) uvicorn stops accepting connections, lets the requests in flight finish
(up to ``shutdown_timeout_s``, the grace period), and only then does the application stop its
encoder thread; what is still unanswered then gets a 503 and the log counts it.

uvicorn drops a keep-alive connection idle between requests, but not one that never finishes
its request's headers, nor one whose client never reads its answer: :func:`deadline_protocol`
adds those deadlines (a 408, then closed; closed, the answer dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from demitasse.errors import DemitasseError
from demitasse.model import CompressedModel, open_model
from demitasse.serve.app import ServerCounters, ServeSettings, create_app
from demitasse.serve.protocol import ApiError

logger = logging.getLogger(__name__)

#: Seconds a keep-alive connection may stay idle between requests (uvicorn's default).
KEEP_ALIVE_S = 5


def load_served_model(source: str | Path, *, backend: str | None = None) -> CompressedModel:
    """A model directory as saved, or a plain encoder (name or directory, transformer or
    static) at its full width; refused when it cannot embed texts (vectors-only).
    ``backend`` replaces a model directory's saved one (an encoder's default: torch)."""
    model = open_model(source, cache=False)
    if model.recipe.encoder is None:
        raise DemitasseError(
            f"{source} is a vectors-only model: it has no encoder to embed texts with, so "
            "there is nothing to serve (use 'demitasse transform' on your vectors)"
        )
    if backend is not None:
        model.settings.backend = backend
    model.load_encoder()  # now, not during the first request
    return model


def default_name(source: str | Path) -> str:
    """The model name clients send: a directory's own name, or the name as given."""
    path = Path(source).expanduser()
    return path.resolve().name if path.is_dir() else str(source)


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on ``host:port`` (port 0: a free one), or a one-line error."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise DemitasseError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def set_threads(model: CompressedModel, threads: int) -> None:
    """The encoder thread's torch uses ``threads`` cores for each forward pass, and no
    inter-op pool: there is one encoder call at a time, and the event loop needs a core too."""
    if model.recipe.encoder_kind != "transformer":
        return
    try:
        import torch
    except ImportError:  # the core install: the transformer runs in ONNX Runtime
        return
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set, or torch ran parallel work
        torch.set_num_interop_threads(1)


def serve(
    model: CompressedModel,
    settings: ServeSettings,
    sock: socket.socket,
    *,
    shutdown_timeout_s: int = 30,
    on_ready: Callable[[Any], None] | None = None,
) -> None:
    """Serve until SIGTERM / SIGINT (or ``server.should_exit``, for callers in a thread);
    ``on_ready(server)`` runs once the socket is listening."""
    import uvicorn

    app = create_app(model, settings)
    config = uvicorn.Config(
        app,
        log_config=None,  # demitasse's logging, with request ids, not uvicorn's access log
        access_log=False,
        timeout_graceful_shutdown=shutdown_timeout_s,
        timeout_keep_alive=KEEP_ALIVE_S,
        http=deadline_protocol(settings, app.counters),
        loop="asyncio",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    if on_ready is not None:
        _call_when_started(server, on_ready)
    stopped_by: list[int] = []
    in_main = threading.current_thread() is threading.main_thread()
    # uvicorn installs its own handlers while it runs and re-raises the signal afterwards, to
    # the handlers it found: record it there, so that a requested stop ends as a clean exit.
    previous = {}
    if in_main:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda s, _: stopped_by.append(s))
    try:
        server.run(sockets=[sock])
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    _log_stop(stopped_by, app.counters.cut, shutdown_timeout_s)


def _log_stop(stopped_by: list[int], cut: int, grace_s: int) -> None:
    """How the server stopped; "answered" only when no request was cut."""
    how = f"stopped on {signal.Signals(stopped_by[0]).name}" if stopped_by else "stopped"
    if cut:
        requests = "request" if cut == 1 else "requests"
        logger.warning(
            "%s; %d %s cut at the end of the grace period (%d s), answered 503",
            how, cut, requests, grace_s,
        )  # fmt: skip
    elif stopped_by:
        logger.warning("%s; every request in flight was answered", how)


def deadline_protocol(settings: ServeSettings, counters: ServerCounters) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, with a deadline on what waits for the client and for no one
    else: a connection opened, or a request started, whose headers are not complete within
    ``body_timeout_s`` gets a 408 (nothing, if it sent nothing) and is closed; so is one still
    sending a body after its answer went out (a refusal that did not read it); one whose
    answer lies unread for ``send_timeout_s`` is closed (:class:`_UnreadAnswer`)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    header_timeout_s, send_timeout_s = settings.body_timeout_s, settings.send_timeout_s

    class DeadlineProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._deadline = self.loop.call_later(header_timeout_s, self._expired)
            self._unread = _UnreadAnswer(send_timeout_s, counters)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._waiting_on_client():
                self._disarm()
            elif self._deadline is None:
                self._deadline = self.loop.call_later(header_timeout_s, self._expired)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._unread.disarm()
            super().connection_lost(exc)

        def pause_writing(self) -> None:
            super().pause_writing()
            self._unread.arm(self)

        def resume_writing(self) -> None:
            self._unread.disarm()
            super().resume_writing()

        def send_400_response(self, msg: str) -> None:
            _answer_400(self, msg)

        def _waiting_on_client(self) -> bool:
            theirs, ours = self.conn.their_state, self.conn.our_state
            return theirs is h11.IDLE or (theirs is h11.SEND_BODY and ours is h11.DONE)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.transport.is_closing() or not self._waiting_on_client():
                return
            if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
                _answer_408(self, header_timeout_s, counters)
            self.transport.close()

    return DeadlineProtocol


class _UnreadAnswer:
    """The send deadline of one connection. uvicorn hands the transport an answer whole, read
    or not: what the socket's buffers cannot take waits in memory, and closing the transport
    waits for it to be sent, so a client that never reads would keep its connection and its
    answer for good (and hold a graceful shutdown for all of ``--grace``). Once the buffer
    passes its high-water mark (asyncio calls ``pause_writing``), the client has ``seconds``
    to take it below the low one (``resume_writing``), as a body has ``--body-timeout`` to
    arrive; else the connection is aborted, the answer dropped, and one log line says so.
    The request's ``max_concurrent`` slot is free by then: it is held until the answer is
    made, not until it is read."""

    def __init__(self, seconds: float, counters: ServerCounters) -> None:
        self.seconds, self.counters = seconds, counters
        self.timer: asyncio.TimerHandle | None = None

    def arm(self, protocol: Any) -> None:  # the connection's H11Protocol
        if self.timer is None:
            self.timer = protocol.loop.call_later(self.seconds, self._expired, protocol)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self, protocol: Any) -> None:
        self.timer = None
        self.counters.unread += 1
        scope = protocol.cycle.scope if protocol.cycle is not None else {}
        logger.info(
            "%s answer left unread by %s for %g s (%d bytes waiting): connection closed",
            scope.get("demitasse.request_id", "-"), _peer(protocol), self.seconds,
            protocol.transport.get_write_buffer_size(),
        )  # fmt: skip
        protocol.transport.abort()  # close() would wait for the client to read it all


def _peer(protocol: Any) -> str:
    """The client of a connection (uvicorn's protocol), as log lines name it."""
    return f"{protocol.client[0]}:{protocol.client[1]}" if protocol.client else "a client"


def _answer_408(protocol: Any, timeout_s: float, counters: ServerCounters) -> None:
    """Answer a connection whose request headers did not arrive in time: 408, one log line."""
    counters.timed_out += 1
    logger.info("%s sent no complete request headers within %g s: 408, closed",
                _peer(protocol), timeout_s)  # fmt: skip
    protocol.transport.write(_headers_timeout_response(timeout_s))


def _answer_400(protocol: Any, msg: str) -> None:
    """uvicorn's answer to a request it cannot parse (a bad Content-Length, an unknown
    Transfer-Encoding) is plain text; this API's clients read its errors as JSON."""
    error = ApiError(400, f"malformed HTTP request: {msg}", code="malformed_request")
    protocol.transport.write(_error_response(error, "Bad Request"))
    protocol.transport.close()


def _headers_timeout_response(timeout_s: float) -> bytes:
    error = ApiError(
        408,
        f"the request headers did not arrive within {timeout_s:g} s",
        code="request_timeout",
    )
    return _error_response(error, "Request Timeout")


def _error_response(error: ApiError, reason: str) -> bytes:
    """A whole HTTP answer carrying ``error`` as OpenAI's JSON, closing the connection: for
    what is answered below the app (the request never reached it)."""
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {error.status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def _call_when_started(server: Any, on_ready: Callable[[Any], None]) -> None:
    startup = server.startup

    async def startup_then_report(*args: Any, **kwargs: Any) -> None:
        await startup(*args, **kwargs)
        if server.started:
            on_ready(server)

    server.startup = startup_then_report
