"""Sequence packing: many short texts in one forward pass, without padding them to the longest.

A batch padded to its longest text spends most of its work on padding when lengths vary (a
10-token sentence padded to 40 costs what four such sentences cost). Packed, the texts lie end
to end in rows of about ``max_tokens`` tokens; a block-diagonal attention mask lets each token
see only its own text, and position ids restart at 0 for each text, so every text is encoded
as if it were alone. That holds for models whose position ids count from 0 (BERT, MiniLM);
:meth:`~demitasse.encoders.transformer.TransformerEncoder.packing_matches` checks a model
before anyone relies on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedBatch:
    """The model inputs of packed texts, and where each text's tokens lie in them."""

    input_ids: torch.Tensor  # [rows, width]
    position_ids: torch.Tensor  # [rows, width], from 0 in each text
    attention_mask: torch.Tensor  # [rows, 1, width, width], additive: 0 or the dtype's minimum
    #: [texts, longest text]: flat indices into ``rows * width`` of each text's tokens in order,
    #: and the mask of those that are real (the rest repeat index 0 and are masked).
    token_index: torch.Tensor
    token_mask: torch.Tensor


def pack_rows(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Texts (by index) in as few rows as ``max_tokens`` tokens a row allow, the rows of about
    equal width (all are padded to the widest): the narrowest width, from the even share up,
    at which placing the texts longest first, each in the first row it fits, needs no more
    rows. A text longer than the width has a row of its own."""
    if not lengths:
        return []
    total = sum(lengths)
    rows_needed = -(-total // max_tokens)
    width = max(max(lengths), -(-total // rows_needed))
    while True:
        rows = _first_fit(lengths, width)
        if len(rows) <= rows_needed:
            return rows
        width += max(1, width // 16)


def _first_fit(lengths: Sequence[int], width: int) -> list[list[int]]:
    rows: list[list[int]] = []
    free: list[int] = []
    for text in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, space in enumerate(free) if space >= lengths[text]), None)
        if row is None:
            rows.append([text])
            free.append(width - lengths[text])
        else:
            rows[row].append(text)
            free[row] -= lengths[text]
    return rows


def packed_batch(ids: Sequence[Sequence[int]], rows: list[list[int]], pad_id: int) -> PackedBatch:
    """The inputs of the texts with token ids ``ids`` laid out in ``rows``."""
    width = max(sum(len(ids[text]) for text in row) for row in rows)
    longest = max(len(tokens) for tokens in ids)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    segment = torch.full((len(rows), width), -1, dtype=torch.long)
    token_index = torch.zeros((len(ids), longest), dtype=torch.long)
    token_mask = torch.zeros((len(ids), longest), dtype=torch.long)
    for r, row in enumerate(rows):
        at = 0
        for text in row:
            n = len(ids[text])
            input_ids[r, at : at + n] = torch.tensor(ids[text], dtype=torch.long)
            position_ids[r, at : at + n] = torch.arange(n)
            segment[r, at : at + n] = text
            token_index[text, :n] = r * width + at + torch.arange(n)
            token_mask[text, :n] = 1
            at += n
    # A token sees the tokens of its own text; a padding token sees only itself, so that its
    # softmax has something to normalise (its output is never read).
    visible = segment[:, :, None] == segment[:, None, :]
    visible &= (segment[:, :, None] >= 0) | torch.eye(width, dtype=torch.bool)
    mask = torch.zeros((len(rows), 1, width, width))
    mask.masked_fill_(~visible[:, None], torch.finfo(mask.dtype).min)
    return PackedBatch(input_ids, position_ids, mask, token_index, token_mask)


def unpack(hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """Token states ``[rows, width, dim]`` → each text's own ``[texts, longest, dim]``, from
    position 0 as if encoded alone and padded (``batch.token_mask`` marks the real ones)."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    index, mask = batch.token_index.to(hidden.device), batch.token_mask.to(hidden.device)
    return flat[index] * mask.unsqueeze(-1).to(hidden.dtype)
