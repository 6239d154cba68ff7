"""Load the model to serve, bind the socket, run uvicorn until SIGTERM or Ctrl-C.

On SIGTERM (or SIGINT) uvicorn stops accepting connections, lets the requests in flight finish
(up to ``shutdown_timeout_s``), and only then does the application stop its encoder thread.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from demitasse.errors import DemitasseError
from demitasse.model import CompressedModel, open_model
from demitasse.serve.app import ServeSettings, create_app

logger = logging.getLogger(__name__)


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

    config = uvicorn.Config(
        create_app(model, settings),
        log_config=None,  # demitasse's logging, with request ids, not uvicorn's access log
        access_log=False,
        timeout_graceful_shutdown=shutdown_timeout_s,
        http="h11",
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
    if stopped_by:
        logger.warning(
            "stopped on %s; the requests in flight were answered",
            signal.Signals(stopped_by[0]).name,
        )


def _call_when_started(server: Any, on_ready: Callable[[Any], None]) -> None:
    startup = server.startup

    async def startup_then_report(*args: Any, **kwargs: Any) -> None:
        await startup(*args, **kwargs)
        if server.started:
            on_ready(server)

    server.startup = startup_then_report
