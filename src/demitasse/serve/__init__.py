"""An OpenAI-compatible embedding server for any demitasse model (``demitasse serve``).

``POST /v1/embeddings`` answers in OpenAI's wire format, with the model's widths
(``dimensions``, re-normalised) and its int8 and packed-binary codes as extensions; concurrent
requests are batched into one encoder call. Needs the ``serve`` extra (FastAPI, uvicorn).
"""

from demitasse.serve.app import GuardedApp, ServeSettings, create_app
from demitasse.serve.protocol import ApiError, Limits
from demitasse.serve.server import bind, default_name, load_served_model, serve, set_threads

__all__ = [
    "ApiError",
    "GuardedApp",
    "Limits",
    "ServeSettings",
    "bind",
    "create_app",
    "default_name",
    "load_served_model",
    "serve",
    "set_threads",
]
