"""Load any sentence encoder by name: a transformer or a static model.

This sits above :mod:`demitasse.encoders` and :mod:`demitasse.static` so that the static
recipe may build on transformer encoders without the encoders knowing about static models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demitasse.encoders.base import Encoder
from demitasse.encoders.resolve import DEFAULT_MODEL
from demitasse.errors import DemitasseError
from demitasse.static.model import StaticModel, is_static_model_dir


def load_encoder(name_or_path: str | Path = DEFAULT_MODEL, **kwargs: Any) -> Encoder:
    """Load a sentence encoder by local path, packaged model name or hub id.

    A directory saved by :meth:`demitasse.static.StaticModel.save` loads as that static model
    (transformer options such as ``cache`` do not apply to it and are ignored; a ``backend``
    other than torch is refused).
    """
    if is_static_model_dir(Path(name_or_path).expanduser()):
        backend = kwargs.get("backend", "torch")
        if backend != "torch":
            raise DemitasseError(
                f"{name_or_path} is a static model: the {backend} backend applies to "
                "transformer encoders only (a static model needs none)"
            )
        return StaticModel.load(Path(name_or_path).expanduser())
    # torch and transformers load only here: a static model needs neither.
    try:
        from demitasse.encoders.transformer import load_transformer
    except ImportError as exc:
        raise DemitasseError(
            f"the transformer encoder {name_or_path} needs torch and transformers ({exc.name} "
            "is missing): pip install 'demitasse[train]', or save the model with its ONNX "
            "graph (save(onnx=True), 'demitasse fit --onnx') to encode without them"
        ) from None

    return load_transformer(name_or_path, **kwargs)
