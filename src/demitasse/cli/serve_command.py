"""``demitasse serve``: an OpenAI-compatible embedding server for one model."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import Any

from demitasse.cli.arguments import (
    add_backend_argument,
    non_blank,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
)
from demitasse.errors import DemitasseError

API_KEY_VARIABLE = "DEMITASSE_API_KEY"


def add_serve_parser(commands: Any) -> None:  # argparse's subparsers action
    serve = commands.add_parser(
        "serve",
        help="serve a model over HTTP: OpenAI's /v1/embeddings, with dynamic batching",
        description="Serve one model (a model directory, or an encoder name or directory at "
        "full width) in OpenAI's embeddings wire format. Stop it with SIGTERM or Ctrl-C: the "
        "requests in flight are answered first (within --grace seconds; 503 for the rest).",
    )
    serve.add_argument("model", help="model directory, or encoder name / directory")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    serve.add_argument("--port", type=port_number, default=8000, help="port (0: any free one)")
    serve.add_argument(
        "--name",
        type=non_blank,
        default=None,
        help="model name clients send (default: the directory's name)",
    )
    serve.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' (or set ${API_KEY_VARIABLE})",
    )
    _add_limit_arguments(serve)
    batching = serve.add_argument_group("dynamic batching")
    batching.add_argument(
        "--max-batch", type=positive_int, default=128, help="texts per encoder call"
    )
    batching.add_argument(
        "--batch-wait-ms",
        type=non_negative_float,
        default=2.0,
        help="how long a batch waits for more requests",
    )
    batching.add_argument(
        "--no-batching", action="store_true", help="one request per encoder call (for comparison)"
    )
    batching.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="threads of the encoder, torch's or ONNX Runtime's (default: the usable cores)",
    )
    add_backend_argument(serve)
    serve.add_argument("--quiet", action="store_true", help="no log line per request")


def _add_limit_arguments(serve: argparse.ArgumentParser) -> None:
    limits = serve.add_argument_group("limits (over one: 400, 408, 413 or 429)")
    limits.add_argument("--max-inputs", type=positive_int, default=16384, help="per request")
    limits.add_argument("--max-chars", type=positive_int, default=32768, help="per input")
    limits.add_argument("--max-body-bytes", type=positive_int, default=8 * 1024 * 1024)
    limits.add_argument(
        "--max-concurrent",
        type=positive_int,
        default=64,
        help="requests in flight at once (counted once their body has arrived)",
    )
    limits.add_argument(
        "--body-timeout",
        type=positive_float,
        default=10.0,
        help="seconds a request's headers, then its body, may take to arrive (then 408)",
    )
    limits.add_argument(
        "--send-timeout",
        type=positive_float,
        default=30.0,
        help="seconds an answer may lie unread once the socket's buffers are full (then the "
        "connection is closed and the answer dropped)",
    )
    limits.add_argument(
        "--grace",
        type=non_negative_int,
        default=30,
        help="seconds SIGTERM waits for the requests in flight; the rest get a 503",
    )


def run_serve(args: argparse.Namespace) -> int:
    try:
        from demitasse.serve import (
            Limits,
            ServeSettings,
            bind,
            default_name,
            load_served_model,
            serve,
            set_threads,
        )
    except ImportError as exc:
        raise DemitasseError(
            f"demitasse serve needs the 'serve' extra ({exc.name} is missing): "
            "pip install 'demitasse[serve]'"
        ) from None
    api_key = args.api_key or os.environ.get(API_KEY_VARIABLE) or None
    settings = ServeSettings(  # checked first: a bad name fails before the port is taken
        name=default_name(args.model) if args.name is None else args.name,
        api_key=api_key,
        limits=Limits(args.max_inputs, args.max_chars, args.max_body_bytes, args.max_concurrent),
        max_batch=args.max_batch,
        batch_wait_ms=args.batch_wait_ms,
        batching=not args.no_batching,
        body_timeout_s=args.body_timeout,
        send_timeout_s=args.send_timeout,
    )
    sock = bind(args.host, args.port)  # a taken port fails now, not after the model loads
    model = load_served_model(args.model, backend=args.backend)
    set_threads(model, args.threads or len(os.sched_getaffinity(0)))
    log = logging.getLogger("demitasse.serve")
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)
    if api_key is None and not _loopback(args.host):
        log.warning(
            "listening on %s without an API key: anyone who reaches it may use it", args.host
        )
    host, port = sock.getsockname()[:2]

    def ready(server: Any) -> None:
        url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/v1"
        print(f"serving {settings.name!r} ({model!r}) at {url}", file=sys.stdout, flush=True)

    serve(model, settings, sock, shutdown_timeout_s=args.grace, on_ready=ready)
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
