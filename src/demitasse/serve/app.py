"""The FastAPI application: ``POST /v1/embeddings``, ``GET /v1/models``, ``GET /health``.

The request body is read and parsed here, not by FastAPI's models, so that every refusal is a
400, 401, 404, 413 or 429 with OpenAI's error object (FastAPI would answer 422 in its own
shape). The server serves the one model it was started with; a request names it, never a path.
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
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from demitasse.errors import DemitasseError, single_line
from demitasse.model import CompressedModel
from demitasse.serve.batching import EncoderWorker
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


@dataclass(frozen=True)
class ServeSettings:
    """How the server answers: the name clients use, the key, the limits, the batching."""

    name: str
    api_key: str | None = None
    limits: Limits = field(default_factory=Limits)
    max_batch: int = 128
    batch_wait_ms: float = 2.0
    batching: bool = True


def create_app(model: CompressedModel, settings: ServeSettings) -> GuardedApp:
    """The application serving ``model`` (fitted, with an encoder); its encoder thread starts
    with the application and stops after the last request in flight is answered."""
    worker = EncoderWorker(
        model,
        max_batch=settings.max_batch,
        max_wait_ms=settings.batch_wait_ms,
        batching=settings.batching,
    )
    in_flight = 0

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            worker.stop()

    app = FastAPI(
        title="demitasse", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    _add_error_handlers(app)
    _add_model_routes(app, model, settings.name)

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        nonlocal in_flight
        if in_flight >= settings.limits.max_concurrent:
            raise ApiError(
                429,
                f"{in_flight} requests are in flight, the most this server takes; retry later",
                kind="rate_limit_error",
                code="rate_limit_exceeded",
            )
        in_flight += 1
        try:
            return await _embed(request, model, worker, settings)
        finally:
            in_flight -= 1

    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = worker.stats
        return {
            "status": "ok",
            "model": settings.name,
            "in_flight": in_flight,
            "batches": stats.batches,
            "texts": stats.texts,
            "passes": stats.passes,
            "packing": worker.packing,
            "encoder_seconds": round(stats.encoder_seconds, 6),
            "encoder_cpu_seconds": round(stats.encoder_cpu_seconds, 6),
        }

    return GuardedApp(app, settings.api_key)


async def _embed(
    request: Request, model: CompressedModel, worker: EncoderWorker, settings: ServeSettings
) -> Response:
    body = await _read_body(request, settings.limits.max_body_bytes)
    parsed = parse_request(body, settings.name, settings.limits)
    try:  # a width or precision the model lacks: refused before any encoding
        model.bytes_per_vector(parsed.dim, parsed.precision)
    except DemitasseError as exc:
        param = "dimensions" if "dim" in str(exc) else "encoding_format"
        raise ApiError(400, str(exc), param=param) from None
    futures = worker.submit(parsed.texts, parsed.dim, parsed.precision)
    try:
        done = await asyncio.gather(*(asyncio.wrap_future(future) for future in futures))
    except DemitasseError as exc:
        raise ApiError(400, str(exc)) from None
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


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
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
        return JSONResponse(exc.body(), status_code=exc.status)

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
    gives every request an id, echoed in ``x-request-id`` and in its log line, and checks the
    API key before anything else runs."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _CLIENT_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        scope["demitasse.request_id"] = request_id
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

        if self.api_key is not None and not self._authorised(headers):
            error = ApiError(401, "incorrect or missing API key (Authorization: Bearer …)",
                             code="invalid_api_key")  # fmt: skip
            await JSONResponse(error.body(), status_code=401)(scope, receive, send_with_id)
        else:
            await self.app(scope, receive, send_with_id)
        logger.info(
            "%s %s %s → %d in %.1f ms (inputs: %s)",
            request_id,
            scope["method"],
            single_line(scope["path"]),
            status,
            1000 * (time.perf_counter() - started),
            scope.get("demitasse.inputs", "-"),
        )

    def _authorised(self, headers: dict[bytes, bytes]) -> bool:
        assert self.api_key is not None
        scheme, _, key = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(key.strip(), self.api_key)
