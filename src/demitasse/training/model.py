"""A trainable sentence encoder: the pooled embedding of every hidden state, with gradients,
and the exit heads that map an inner layer's embedding."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from demitasse.encoders.exit_heads import save_exit_heads
from demitasse.encoders.transformer import TransformerEncoder, pool
from demitasse.errors import DemitasseError
from demitasse.io import atomic_directory
from demitasse.loading import load_encoder
from demitasse.training.losses import PairBatch


class ExitHeads(torch.nn.ModuleDict):
    """A linear ``dim`` × ``dim`` head per hidden state, keyed by its index as a string.

    A head maps its layer's pooled embedding (before normalisation), as the encoder applies it
    when encoding a model saved with heads (:mod:`demitasse.encoders.exit_heads`).
    """

    def add(self, layers: Iterable[int], dim: int, device: torch.device | str = "cpu") -> None:
        """A head for each of ``layers`` that has none yet, starting as the identity."""
        for layer in layers:
            if str(layer) in self:
                continue
            # skip_init leaves the global random generator alone: adding heads must not
            # change the dropout noise of the training that follows.
            head = torch.nn.utils.skip_init(torch.nn.Linear, dim, dim, device=device)
            with torch.no_grad():
                head.weight.copy_(torch.eye(dim, device=device))
                head.bias.zero_()
            self[str(layer)] = head

    def apply_to(self, layers: Sequence[PairBatch]) -> list[PairBatch]:
        """``layers[i]`` through head i where there is one, unchanged elsewhere."""
        return [
            batch.mapped(self[str(index)]) if str(index) in self else batch
            for index, batch in enumerate(layers)
        ]

    def arrays(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """(weight, bias) of every head by layer, as :func:`save_exit_heads` takes them."""
        arrays = {}
        for layer, head in self.items():
            assert isinstance(head, torch.nn.Linear)  # the only modules add() puts here
            arrays[int(layer)] = (
                head.weight.detach().cpu().numpy(),
                head.bias.detach().cpu().numpy(),
            )
        return arrays


class SentenceModel(torch.nn.Module):
    """Wraps a :class:`TransformerEncoder`'s backbone for fine-tuning.

    ``forward(texts)`` returns one pooled [batch, dim] tensor per hidden state (index 0: the
    embedding layer, index n: the last block), before any normalisation and before any exit
    head: the losses compare directions, and Espresso's alignment works on the raw pooled
    vectors. ``exit_heads`` holds the heads an objective reads inner layers through
    (:meth:`add_exit_heads`); they train with the model and are saved with it. ``save``
    writes a sentence-transformers directory that :func:`demitasse.loading.load_encoder` and
    ``SentenceTransformer(path)`` both load.
    """

    def __init__(self, encoder: TransformerEncoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.backbone = encoder.model
        self.num_layers = encoder.num_layers
        self.dim = encoder.dim
        self.exit_heads = ExitHeads()

    @classmethod
    def load(cls, name_or_path: str | Path, device: str | None = None) -> SentenceModel:
        """A model by local path or packaged name (as ``load_encoder``), without the cache."""
        encoder = load_encoder(name_or_path, cache=False, device=device)
        if not isinstance(encoder, TransformerEncoder):
            raise DemitasseError(
                f"{name_or_path} is a static model; fine-tuning needs a transformer"
            )
        return cls(encoder)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def add_exit_heads(self, layers: Iterable[int]) -> None:
        """An exit head, starting as the identity, for each of ``layers`` that has none."""
        self.exit_heads.add(layers, self.dim, self.device)

    def forward(self, texts: list[str]) -> list[torch.Tensor]:
        features = self.encoder.tokenize(list(texts))
        hidden = self.backbone(**features, output_hidden_states=True).hidden_states
        mask = features["attention_mask"]
        return [pool(states, mask, self.encoder.pooling) for states in hidden]

    def save(self, directory: str | Path, artifacts: Callable[[Path], None] | None = None) -> Path:
        """Write the model and its exit heads as a sentence-transformers directory,
        atomically; ``artifacts`` adds files (e.g. a trained pooler) to it before it takes the
        final name."""
        with atomic_directory(directory, kind="sentence-transformers model") as tmp:
            self.encoder.sentence_transformer.save(str(tmp))
            if len(self.exit_heads):
                save_exit_heads(tmp, self.exit_heads.arrays())
            if artifacts is not None:
                artifacts(tmp)
        return Path(directory)
