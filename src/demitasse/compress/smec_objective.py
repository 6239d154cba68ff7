"""SMEC's training objective (see :mod:`demitasse.compress.smec`): the batch loss of the
stages trained together, and the S-XBM memory of frozen-backbone embeddings it fills as
training goes and searches for each row's nearest stored neighbours.

torch is imported inside the functions, as in :mod:`demitasse.compress.smec`, so that
``import demitasse.compress`` stays free of it.
"""

# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from demitasse.arrays import is_int
from demitasse.errors import CompressorError

if TYPE_CHECKING:
    import torch

    from demitasse.compress.smec import SMEC
    from demitasse.compress.smec_stage import SelectionStage


class EmbeddingMemory:
    """FIFO queue of embeddings (and aligned fields) across batches; stores no gradients."""

    def __init__(self, capacity: int) -> None:
        if not is_int(capacity) or capacity < 1:
            raise CompressorError(f"memory capacity must be a positive integer, got {capacity!r}")
        self.capacity = int(capacity)
        self._slots: list[torch.Tensor] = []
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, *tensors: torch.Tensor) -> None:
        """Add rows (one tensor per stored field, aligned), overwriting the oldest when full."""
        import torch

        tensors = tuple(t.detach() for t in tensors)
        if not self._slots:
            self._slots = [
                torch.empty((self.capacity, *t.shape[1:]), dtype=t.dtype, device=t.device)
                for t in tensors
            ]
        n = tensors[0].shape[0]
        if n >= self.capacity:
            tensors = tuple(t[-self.capacity :] for t in tensors)
            n = self.capacity
        positions = (self._next + torch.arange(n, device=tensors[0].device)) % self.capacity
        for slot, t in zip(self._slots, tensors, strict=True):
            slot[positions] = t
        self._next = (self._next + n) % self.capacity
        self._size = min(self.capacity, self._size + n)

    def contents(self) -> tuple[torch.Tensor, ...]:
        """Stored fields, oldest row first."""
        import torch

        if self._size < self.capacity:
            return tuple(s[: self._size] for s in self._slots)
        order = torch.cat(
            [torch.arange(self._next, self.capacity), torch.arange(0, self._next)]
        ).to(self._slots[0].device)
        return tuple(s[order] for s in self._slots)

    def stored(self) -> tuple[torch.Tensor, ...]:
        """Stored fields in slot order: cheaper than ``contents``, and search ignores order."""
        return tuple(s[: self._size] for s in self._slots)


@dataclass
class Neighbours:
    """What the S-XBM memory holds for each row of a batch: its ``topk`` stored neighbours."""

    embeddings: torch.Tensor  #: their backbone embeddings, unit length [n, k, D]
    outputs: list[torch.Tensor]  #: per trained stage, their compressed vectors [n, k, d_s]


class GroupObjective:
    """The batch loss of SMEC stages trained together (see the module doc), with the S-XBM
    memory it fills as training goes."""

    def __init__(
        self,
        smec: SMEC,
        frozen: list[SelectionStage],
        trained: list[SelectionStage],
        H: torch.Tensor,
        U: torch.Tensor,
        X: torch.Tensor,
    ) -> None:
        self.smec, self.frozen, self.trained = smec, frozen, trained
        self.H, self.U, self.X = H, U, X
        self.variant = variant = smec._variant
        self.memory = EmbeddingMemory(int(variant.memory_size)) if variant.xbm else None
        self.k = int(smec.topk)

    def chain(self, h: torch.Tensor, u: torch.Tensor) -> list[torch.Tensor]:
        """The outputs of every trained stage for frozen-stage output ``h``."""
        outputs = []
        for stage in self.trained:
            h = stage(h, u)
            outputs.append(h)
        return outputs

    def from_rotated(self, u: torch.Tensor) -> list[torch.Tensor]:
        import torch

        h = u
        with torch.no_grad():
            for stage in self.frozen:
                h = stage(h, u)
        return self.chain(h, u)

    def batch_loss(self, rows: torch.Tensor, training: bool) -> torch.Tensor:
        import torch

        rows = rows.to(self.X.device)  # may be stored in the memory and joined to its rows
        x = self.X[rows]
        outputs, neighbours = self._compress(rows, self._nearest(x) if training else None)
        # Stale neighbours replace the in-batch top-k; refreshed ones are added to it.
        in_batch_topk = bool(self.variant.refresh_memory) or neighbours is None
        terms = [
            self._stage_loss(index, reduced, x, neighbours, in_batch_topk)
            for index, reduced in enumerate(outputs)
        ]
        loss = torch.stack(terms).mean() + self.smec.supervised_loss(self.from_rotated, training)
        if training and self.memory is not None:
            payload = [rows] if self.variant.refresh_memory else outputs
            self.memory.push(torch.nn.functional.normalize(x, dim=1), *payload)
        return loss

    def _nearest(self, x: torch.Tensor) -> torch.Tensor | None:
        """Slots of the memory's ``topk`` nearest rows to each of ``x`` (None: memory off or
        not yet filled)."""
        import torch

        if self.memory is None or len(self.memory) < self.k:
            return None
        stored_x = self.memory.stored()[0]  # rows of unit length
        return (torch.nn.functional.normalize(x, dim=1) @ stored_x.T).topk(self.k).indices

    def _compress(
        self, rows: torch.Tensor, nearest: torch.Tensor | None
    ) -> tuple[list[torch.Tensor], Neighbours | None]:
        """The trained stages' outputs for ``rows``, and those of the memory's neighbours."""
        import torch

        H, U = self.H, self.U
        if nearest is None or self.memory is None:
            return self.chain(H[rows], U[rows]), None
        stored_x, *stored = self.memory.stored()
        if not self.variant.refresh_memory:  # as in XBM: compressed when stored, a few steps stale
            neighbours = Neighbours(stored_x[nearest], [payload[nearest] for payload in stored])
            return self.chain(H[rows], U[rows]), neighbours
        # The backbone is frozen, so a stored embedding never goes stale: neighbours are
        # compressed again by the current stages, in the same pass (same ADS sample).
        extra, where = stored[0][nearest].unique(return_inverse=True)
        everything = torch.cat([rows, extra])
        n = len(rows)
        for stage in self.trained:
            stage.soft_rows = n  # the ADS term reads the batch's rows only
            stage.gradient_rows = None if self.variant.memory_gradients else n
        try:
            outputs = self.chain(H[everything], U[everything])
        finally:
            for stage in self.trained:
                stage.soft_rows = stage.gradient_rows = None
        neighbours = Neighbours(stored_x[nearest], [out[n:][where] for out in outputs])
        return [out[:n] for out in outputs], neighbours

    def _stage_loss(
        self,
        index: int,
        reduced: torch.Tensor,
        x: torch.Tensor,
        neighbours: Neighbours | None,
        in_batch_topk: bool,
    ) -> torch.Tensor:
        """Stage ``index``'s similarity gaps averaged over its training widths, plus the ADS
        term (which trains the importance logits only)."""
        import torch

        from demitasse.losses import (
            neighbour_similarity_loss,
            pairwise_similarity_loss,
            topk_similarity_loss,
        )

        smec, stage = self.smec, self.trained[index]
        widths = smec._prefix_widths(stage.d_out)
        prefixes = [reduced[:, :w] for w in widths]
        parts = [smec.all_pairs_loss(x, p) for p in prefixes] if smec.pairwise_weight else []
        if in_batch_topk:
            parts += [topk_similarity_loss(x, p, self.k) for p in prefixes]
        if neighbours is not None:
            stored = neighbours.outputs[index]
            parts += [
                neighbour_similarity_loss(x, p, neighbours.embeddings, stored[..., :w])
                for p, w in zip(prefixes, widths, strict=True)
            ]
        loss = torch.stack(parts).sum() / len(widths)
        if stage.soft_output is not None:
            loss = loss + pairwise_similarity_loss(x, stage.soft_output[: len(x)])
        return loss
