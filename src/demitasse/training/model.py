"""A trainable sentence encoder: the pooled embedding of every hidden state, with gradients."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from demitasse.encoders.transformer import TransformerEncoder, load_transformer, pool
from demitasse.io import atomic_directory


class SentenceModel(torch.nn.Module):
    """Wraps a :class:`TransformerEncoder`'s backbone for fine-tuning.

    ``forward(texts)`` returns one pooled [batch, dim] tensor per hidden state (index 0: the
    embedding layer, index n: the last block), before any normalisation: the losses compare
    directions, and Espresso's alignment works on the raw pooled vectors. ``save`` writes a
    sentence-transformers directory that :func:`demitasse.loading.load_encoder` and
    ``SentenceTransformer(path)`` both load.
    """

    def __init__(self, encoder: TransformerEncoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.backbone = encoder.model
        self.num_layers = encoder.num_layers
        self.dim = encoder.dim

    @classmethod
    def load(cls, name_or_path: str | Path, device: str | None = None) -> SentenceModel:
        """A model by local path or packaged name (as ``load_transformer``), without the cache."""
        return cls(load_transformer(name_or_path, cache=False, device=device))

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def forward(self, texts: list[str]) -> list[torch.Tensor]:
        features = self.encoder.tokenize(list(texts))
        hidden = self.backbone(**features, output_hidden_states=True).hidden_states
        mask = features["attention_mask"]
        return [pool(states, mask, self.encoder.pooling) for states in hidden]

    def save(self, directory: str | Path, artifacts: Callable[[Path], None] | None = None) -> Path:
        """Write the model as a sentence-transformers directory, atomically; ``artifacts``
        adds files (e.g. a trained pooler) to it before it takes the final name."""
        with atomic_directory(
            directory, kind="sentence-transformers model", recognise=_earlier_model
        ) as tmp:
            self.encoder.sentence_transformer.save(str(tmp))
            if artifacts is not None:
                artifacts(tmp)
        return Path(directory)


def _earlier_model(path: Path) -> bool:
    """A model folder a training run wrote before outputs carried a marker."""
    return (path / "modules.json").is_file() and (path / "config.json").is_file()
