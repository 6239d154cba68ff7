"""The FastAPI application: ``POST /v1/embeddings``, ``GET /v1/models``, ``GET /health``.

The request body is read and parsed here, not by FastAPI's models, so that every refusal is a
400, 401, 404, 408, 413 or 429 with OpenAI's error object (FastAPI would answer 422 in its own
shape). The server serves the one model it was started with; a request names it, never a path.

No client can hold the server hostage: a body must arrive within ``body_timeout_s`` of the
request's start (else 408, connection closed), and only requests whose body has arrived count
towards ``max_concurrent``, so slow senders hold no slot; an answer its client leaves unread
is dropped with its connection after ``send_timeout_s`` (:mod:`demitasse.serve.server`); a
client that goes away is one log line, and its chunks still queued are never encoded; a
request cut at the end of the shutdown grace period is answered 503 in OpenAI's error format
and counted.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from demitasse.errors import DemitasseError, single_line
from demitasse.model import CompressedModel
from demitasse.serve.batching import Encoded, EncoderWorker, check_encoding
from demitasse.serve.protocol import ApiError, Limits, embedding_response, parse_request

logger = logging.getLogger(__name__)

# ASGI's callables, spelled out (starlette.types names them the same way).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: A client's own X-Request-ID is kept when it is this tame (it goes into log lines).
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: Responses this large are serialised off the event loop, which keeps accepting meanwhile.
_LARGE_RESPONSE_ROWS = 256
_CUT_MESSAGE = (
    "the server is shutting down and its grace period ended before this request was "
    "answered; send it again (to another server, or once this one is back)"
)


@dataclass(frozen=True)
class ServeSettings:
    """How the server answers: the name clients use, the key, the limits, the batching."""

    name: str
    api_key: str | None = None
    limits: Limits = field(default_factory=Limits)
    max_batch: int = 128
    batch_wait_ms: float = 2.0
    batching: bool = True
    #: Seconds a request's body may take to arrive, from the request's start (then 408).
    body_timeout_s: float = 10.0
    #: Seconds an answer may wait, unread, once the socket's buffers are full (then closed).
    send_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        # Clients send the name as the request's "model" and find it in /v1/models: an empty
        # one would be matched only by an empty "model", which OpenAI's clients never send.
        if not self.name.strip():
            raise DemitasseError(f"the model name is empty ({self.name!r}); give a name")


@dataclass
class ServerCounters:
    """What the server counts besides the encoder's work; ``/health`` reports them."""

    in_flight: int = 0  # requests whose body has arrived: what ``max_concurrent`` bounds
    receiving: int = 0  # requests whose body is still arriving: they hold no slot
    timed_out: int = 0  # dropped with a 408: headers or body slower than the deadline
    unread: int = 0  # closed with their answer unread at the send deadline
    disconnected: int = 0  # clients gone before their answer
    cut: int = 0  # answered 503 at the end of the shutdown grace period


def create_app(model: CompressedModel, settings: ServeSettings) -> GuardedApp:
    """The application serving ``model`` (fitted, with an encoder); its encoder thread starts
    with the application and stops after the last request in flight is answered."""
    worker = EncoderWorker(
        model,
        max_batch=settings.max_batch,
        max_wait_ms=settings.batch_wait_ms,
        batching=settings.batching,
    )
    counters = ServerCounters()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:  # off the event loop, which meanwhile answers what the grace period cut
            await asyncio.to_thread(worker.stop)

    # No redirect of "/v1/embeddings/" to the route without the slash: an empty 307 is no
    # answer an OpenAI client reads; it gets the JSON 404 of any unknown path.
    app = FastAPI(
        title="demitasse", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
        redirect_slashes=False,
    )  # fmt: skip
    _add_error_handlers(app)
    _add_model_routes(app, model, settings.name)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        _check_capacity(counters, settings.limits)  # a full server refuses before the body
        counters.receiving += 1
        try:
            body = await _read_body(request, settings, counters)
        except ClientDisconnect:
            return _gone(request, counters, "mid-body")
        finally:
            counters.receiving -= 1
        _check_capacity(counters, settings.limits)
        counters.in_flight += 1
        try:
            return await _embed(request, body, model, worker, settings, counters)
        finally:
            counters.in_flight -= 1

    _add_health_route(app, worker, counters, settings.name)
    return GuardedApp(app, settings.api_key, counters)


def _add_health_route(
    app: FastAPI, worker: EncoderWorker, counters: ServerCounters, name: str
) -> None:
    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = worker.stats
        return {
            "status": "ok",
            "model": name,
            "in_flight": counters.in_flight,
            "receiving": counters.receiving,
            "timed_out": counters.timed_out,
            "unread": counters.unread,
            "disconnected": counters.disconnected,
            "batches": stats.batches,
            "texts": stats.texts,
            "passes": stats.passes,
            "packing": worker.packing,
            "encoder_seconds": round(stats.encoder_seconds, 6),
            "encoder_cpu_seconds": round(stats.encoder_cpu_seconds, 6),
        }


def _check_capacity(counters: ServerCounters, limits: Limits) -> None:
    if counters.in_flight >= limits.max_concurrent:
        message = f"{counters.in_flight} requests are in flight, the most this server takes"
        raise ApiError(
            429, f"{message}; retry later", kind="rate_limit_error", code="rate_limit_exceeded"
        )


def _gone(request: Request, counters: ServerCounters, when: str) -> Response:
    """What a request whose client went away ends with: its log line says so (499, as nginx
    counts them), and nothing is sent."""
    counters.disconnected += 1
    request.scope["demitasse.note"] = f"client disconnected {when}"
    return Response(status_code=499)


async def _embed(
    request: Request,
    body: bytes,
    model: CompressedModel,
    worker: EncoderWorker,
    settings: ServeSettings,
    counters: ServerCounters,
) -> Response:
    parsed = parse_request(body, settings.name, settings.limits)
    try:  # a width or precision the model lacks: refused before any encoding
        check_encoding(model, parsed.dim, parsed.precision)
    except DemitasseError as exc:
        param = "dimensions" if "dim" in str(exc) else "encoding_format"
        raise ApiError(400, str(exc), param=param) from None
    try:
        done = await _encoded(request, worker.submit(parsed.texts, parsed.dim, parsed.precision))
    except DemitasseError as exc:
        raise ApiError(400, str(exc)) from None
    if done is None:
        return _gone(request, counters, "before its answer")
    codes = np.concatenate([rows for rows, _ in done])
    tokens = sum(count for _, count in done)
    request.scope["demitasse.inputs"] = len(parsed.texts)

    def serialise() -> bytes:
        payload = embedding_response(codes, parsed.encoding, settings.name, tokens)
        return json.dumps(payload, separators=(",", ":")).encode()

    content = (
        serialise() if len(codes) < _LARGE_RESPONSE_ROWS else await asyncio.to_thread(serialise)
    )
    return Response(content, media_type="application/json")


async def _encoded(request: Request, futures: list[Future[Encoded]]) -> list[Encoded] | None:
    """The chunks' results, in order; ``None`` when the client goes away first, and then its
    chunks still queued are cancelled (the encoder skips them)."""
    results = asyncio.gather(*(asyncio.wrap_future(future) for future in futures))
    gone = asyncio.ensure_future(_disconnect(request.receive))
    waiting: set[asyncio.Future[Any]] = {results, gone}
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this request is cancelled: nothing is left waiting
        gone.cancel()
        if not results.done():
            results.cancel()  # it ends with a CancelledError set as its exception: read it
            results.add_done_callback(lambda done: done.cancelled() or done.exception())
    if not results.done():
        return None
    return results.result()


async def _disconnect(receive: Receive) -> None:
    """Returns once the client has gone away (the body was read: nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _read_body(request: Request, settings: ServeSettings, counters: ServerCounters) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed the limit, and with 408
    when it has not arrived ``body_timeout_s`` after the request started."""
    limit, timeout = settings.limits.max_body_bytes, settings.body_timeout_s
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    started = request.scope.get("demitasse.started", time.monotonic())
    chunks, size = [], 0
    try:
        async with asyncio.timeout(started + timeout - time.monotonic()):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(size, limit)
                chunks.append(chunk)
    except TimeoutError:
        counters.timed_out += 1
        expected = f"of {declared} " if declared is not None and declared.isdigit() else ""
        raise ApiError(
            408,
            f"the request body did not arrive within {timeout:g} s ({size} bytes {expected}"
            "came); send the whole body at once",
            code="request_timeout",
        ) from None
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(
        413,
        f"the request body has {size}+ bytes; this server takes at most {limit}",
        code="request_too_large",
    )


def _add_model_routes(app: FastAPI, model: CompressedModel, name: str) -> None:
    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(model, name)]}

    @app.get("/v1/models/{model_id:path}")
    async def one_model(model_id: str) -> dict[str, Any]:
        if model_id != name:
            raise ApiError(404, f"the model {model_id!r} does not exist", code="model_not_found")
        return _model_card(model, name)


def _model_card(model: CompressedModel, name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": _fitted_at(model),
        "owned_by": "demitasse",
        # Extensions: what ``dimensions`` and ``encoding_format`` may ask of this model.
        "dimensions": model.output_dim,
        "matryoshka": len(model.dims) > 1,
        "precisions": model.precisions,
    }


def _fitted_at(model: CompressedModel) -> int:
    """When the model was fitted, in Unix seconds (0 when unrecorded), for ``created``."""
    try:
        return int(datetime.fromisoformat(str((model.fit_info or {})["fitted_at"])).timestamp())
    except (KeyError, ValueError):
        return 0


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        # A 408 leaves the rest of the body unread: the connection cannot serve another request.
        headers = {"connection": "close"} if exc.status == 408 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "request refused"
        message = f"{detail}: {request.method} {single_line(request.url.path)}"
        return JSONResponse(
            ApiError(exc.status_code, message).body(),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        request_id = request.scope.get("demitasse.request_id", "?")
        logger.error("request %s failed: %r", request_id, exc, exc_info=exc)
        error = ApiError(500, f"internal error (request {request_id})", kind="server_error")
        return JSONResponse(error.body(), status_code=500)


class GuardedApp:
    """The application behind its outermost layer (plain ASGI, cheap per request), which
    gives every request an id, echoed in ``x-request-id`` and in its log line, checks the
    API key before anything else runs, and answers 503 for a request cut at the end of the
    shutdown grace period (uvicorn cancels it; it would send a text/plain 500)."""

    def __init__(
        self, app: ASGIApp, api_key: str | None, counters: ServerCounters | None = None
    ) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.counters = counters if counters is not None else ServerCounters()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _CLIENT_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        scope["demitasse.request_id"] = request_id
        scope["demitasse.started"] = time.monotonic()  # the body's deadline counts from here
        started, status = time.perf_counter(), 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        try:
            await self._answer(scope, receive, send_with_id, headers)
        except asyncio.CancelledError:  # the grace period is over: only uvicorn cancels
            self.counters.cut += 1
            scope["demitasse.note"] = "cut at the end of the grace period"
            if status == 0:  # else the response is under way: uvicorn closes the connection
                await _json_error(503, _CUT_MESSAGE, "server_shutting_down")(
                    scope, receive, send_with_id
                )
        note = scope.get("demitasse.note")
        logger.info(
            "%s %s %s → %d in %.1f ms (%s)",
            request_id,
            scope["method"],
            single_line(scope["path"]),
            status,
            1000 * (time.perf_counter() - started),
            note or f"inputs: {scope.get('demitasse.inputs', '-')}",
        )

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> None:
        if self.api_key is not None and not self._authorised(headers):
            error = ApiError(401, "incorrect or missing API key (Authorization: Bearer …)",
                             code="invalid_api_key")  # fmt: skip
            await JSONResponse(error.body(), status_code=401)(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _authorised(self, headers: dict[bytes, bytes]) -> bool:
        assert self.api_key is not None
        scheme, _, key = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(key.strip(), self.api_key)


def _json_error(status: int, message: str, code: str) -> JSONResponse:
    """A server-side error in OpenAI's format, the connection closed after it."""
    error = ApiError(status, message, kind="server_error", code=code)
    return JSONResponse(error.body(), status_code=status, headers={"connection": "close"})
