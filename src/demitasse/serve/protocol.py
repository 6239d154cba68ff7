"""OpenAI's embeddings wire format: the request checked field by field, the response built.

Everything here is plain data in, plain data out, so that the HTTP layer only maps an
:class:`ApiError` to its status and every check can be read in one place.

Extensions to OpenAI's format (documented in docs/serve.md): ``encoding_format`` also takes
the name of any precision with integer codes: ``"int8"`` (the model's int8 codes, a list of
integers in -128..127), ``"binary"`` (the sign bits packed eight to a byte, most significant
bit first, as ``numpy.packbits``: a list of integers in 0..255, ``ceil(dimensions / 8)`` of
them), or codebook codes such as ``"pq16"`` (a list of 16 codeword indices in 0..255). The
model answers only for the precisions it offers (``CompressedModel.precisions``).

Text that is not valid Unicode (invalid UTF-8 in the body, a ``"\ud800"`` escape in an input)
is replaced with U+FFFD and the server logs one warning per request that counts it, as every
reader of demitasse does (:mod:`demitasse.data.unicode`); it is never a 500.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from demitasse.compress import check_precision, make_quantizer, precision_help
from demitasse.data.unicode import Replacements
from demitasse.errors import DemitasseError, one_line

#: OpenAI's encoding_format names → the model precision that produces them; any other value
#: is a precision with integer codes, named as the quantiser registry names it.
FLOAT_ENCODINGS = {"float": "float32", "base64": "float32"}
#: The encoding_format of what a document keeps for a model's rescoring (int8 codes, or float32,
#: of the encoder's normalised full output): what a vector database stores beside the codes.
RESCORE_ENCODING = "rescore"


class ApiError(Exception):
    """A request the server refuses: its HTTP status and OpenAI's error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """``{"error": {...}}`` as OpenAI sends it, which its clients turn into exceptions."""
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class Limits:
    """What one request may hold; over a limit is a 400, 413 or 429, never a crash."""

    max_inputs: int = 16384
    max_chars: int = 32768
    max_body_bytes: int = 8 * 1024 * 1024
    max_concurrent: int = 64


@dataclass(frozen=True)
class EmbeddingRequest:
    texts: list[str]
    dim: int | None  # None: the model's full width
    encoding: str

    @property
    def precision(self) -> str:
        return FLOAT_ENCODINGS.get(self.encoding, self.encoding)


def parse_request(body: bytes, served_name: str, limits: Limits) -> EmbeddingRequest:
    """The checked request, or an :class:`ApiError` naming the field at fault."""
    replaced = Replacements("request", "input")
    payload = _payload(body, replaced)
    if not isinstance(payload, dict):
        raise ApiError(400, "the request body must be a JSON object")
    _check_model(payload.get("model"), served_name)
    texts = _texts(payload.get("input"), limits, replaced)
    request = EmbeddingRequest(texts, *_options(payload))
    replaced.warn()  # the request is taken: say what the policy replaced in it
    return request


def _payload(body: bytes, replaced: Replacements) -> Any:
    """The parsed body; UTF-8 (JSON's encoding) that is invalid is decoded under the policy."""
    try:
        try:
            return json.loads(body)
        except UnicodeDecodeError:
            if not json.detect_encoding(body).startswith("utf-8"):
                raise
        text = replaced.decode(body, "the body").removeprefix("\ufeff")
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # also an integer of > 4300 digits
        raise ApiError(400, f"the request body is not valid JSON ({one_line(exc)})") from None


def _check_model(model: Any, served_name: str) -> None:
    if not isinstance(model, str):
        raise ApiError(400, "'model' is required: a string", param="model")
    if model != served_name:
        raise ApiError(
            404,
            f"the model {model!r} does not exist; this server serves {served_name!r}",
            param="model",
            code="model_not_found",
        )


def _options(payload: dict[str, Any]) -> tuple[int | None, str]:
    """``dimensions`` and ``encoding_format``, checked."""
    encoding = payload.get("encoding_format", "float")
    if encoding is None:
        encoding = "float"
    if not is_encoding(encoding):
        shown = repr(encoding)[:60]
        raise ApiError(
            400,
            f"'encoding_format' must be {' or '.join(FLOAT_ENCODINGS)}, a precision of integer "
            f"codes ({precision_help()}) or {RESCORE_ENCODING!r}, got {shown}",
            param="encoding_format",
        )
    dim = payload.get("dimensions")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise ApiError(400, f"'dimensions' must be a positive integer, got {dim!r}",
                       param="dimensions")  # fmt: skip
    return dim, encoding


def is_encoding(encoding: Any) -> bool:
    """Whether ``encoding`` is an encoding_format: OpenAI's float ones, or the canonical name
    of a precision whose codes are integers (float32 vectors go as float or base64)."""
    if not isinstance(encoding, str):
        return False
    if encoding in FLOAT_ENCODINGS or encoding == RESCORE_ENCODING:
        return True
    try:
        canonical = check_precision(encoding)
    except DemitasseError:
        return False
    return canonical == encoding and make_quantizer(encoding).code_dtype.kind in "iu"


def _texts(value: Any, limits: Limits, replaced: Replacements) -> list[str]:
    if value is None:
        raise ApiError(400, "'input' is required: a string or a list of strings", param="input")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise ApiError(400, "'input' must be a string or a list of strings", param="input")
    if not texts:
        raise ApiError(400, "'input' is an empty list; send at least one string", param="input")
    if len(texts) > limits.max_inputs:
        raise ApiError(
            400,
            f"'input' holds {len(texts)} items; this server takes at most {limits.max_inputs} "
            "per request",
            param="input",
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            if isinstance(text, int | list) and not isinstance(text, bool):
                raise ApiError(400, "token-id input is not supported: send the texts as "
                               "strings", param="input")  # fmt: skip
            raise ApiError(400, f"'input' item {i} is a {type(text).__name__}, not a string",
                           param="input")  # fmt: skip
        if not text.strip():
            raise ApiError(400, f"'input' item {i} is empty", param="input")
        if len(text) > limits.max_chars:
            raise ApiError(
                400,
                f"'input' item {i} has {len(text)} characters; this server takes at most "
                f"{limits.max_chars}",
                param="input",
            )
    # A lone surrogate ("\ud800" in JSON) would fail the tokenizer: U+FFFD instead.
    return [replaced.text(text, f"input {i}") for i, text in enumerate(texts)]


def embedding_response(
    codes: np.ndarray, encoding: str, served_name: str, tokens: int
) -> dict[str, Any]:
    """OpenAI's response object for ``codes`` (one row per input, in input order)."""
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _encode_row(row, encoding)}
            for i, row in enumerate(codes)
        ],
        "model": served_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _encode_row(row: np.ndarray, encoding: str) -> list[float] | list[int] | str:
    if encoding == "base64":  # what OpenAI sends: little-endian float32 bytes
        return base64.b64encode(row.astype("<f4", copy=False).tobytes()).decode("ascii")
    return row.tolist()  # float32 → floats; int8 and packed uint8 codes → ints
