"""Inference plans of the learned compressors: their networks folded into few matrix products.

A trained network is written for training: the input rotation, each SMEC stage's selection
mask, its linear part, its MLP and its concatenation are separate operations. At inference
all of those that are linear in the same input can be multiplied out once:

* the rotation ``u = (x − mean) @ R`` goes into every matrix that reads ``u`` (and its mean
  into their biases), so the raw embedding is read by one matrix product;
* an ADS selection mask zeroes rows of the matrices that read the masked input;
* every matrix that reads the raw embedding (the adaptor's hidden layer and residual, every
  SMEC stage's context part) is stacked into one product;
* output columns past the requested width are not computed, as far as that keeps
  ``transform(dim=k)`` an exact prefix of every wider transform.

A plan holds only weights derived from the fitted network (nothing is saved: a loaded
compressor builds its plan again), and it computes what the network computes, up to
floating-point rounding (tests check 1e-5 on random inputs).
"""

# ruff: noqa: N803, N806  (matrices are capitalised)
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)

from demitasse.compress.smec_stage import SelectionStage, WidthNetwork

#: Compressed [n, k] vectors of raw float32 embeddings [n, D] (eval mode, no grad).
Plan = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Rotation:
    """The fixed input change of basis ``u = (x − mean) @ rotation``."""

    mean: torch.Tensor  # [D]
    rotation: torch.Tensor  # [D, D]

    def reads_input(self, W: torch.Tensor, b: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """``u @ W + b`` as ``x @ W' + b'`` (W [D, m], in float64 for the products)."""
        R = self.rotation.double()
        folded = R @ W.double()
        bias = -(self.mean.double() @ folded)
        if b is not None:
            bias = bias + b.double()
        return folded, bias


def _f32(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.float().contiguous() for t in tensors)


#: Width of the first block of output columns; each later block is as wide as all before it.
FIRST_OUTPUT_BLOCK = 32


def output_blocks(dim: int) -> list[tuple[int, int]]:
    """Column ranges ``[0, 32), [32, 64), [64, 128), …`` that cover ``dim`` outputs.

    A plan computes its last layer one block per product. The blocks have fixed shapes, so
    every ``transform(dim=k)`` is an exact prefix of the wider ones (a product's last bits
    depend on its shape); doubling widths keep a wide output to a few efficient products,
    while a narrow one computes at most one 32-column block.
    """
    edges = [0, FIRST_OUTPUT_BLOCK]
    while edges[-1] < dim:
        edges.append(2 * edges[-1])
    return list(itertools.pairwise(edges))


def two_layer_plan(
    rotation: Rotation,
    linear: tuple[torch.Tensor, torch.Tensor],
    hidden: torch.nn.Linear,
    out: torch.Tensor,
    dim: int,
) -> Plan:
    """``u @ A + a + gelu(hidden(u)) @ O``, first ``dim`` outputs (``linear`` = (A [D, m], a),
    ``hidden`` a ``torch.nn.Linear``, ``out`` = O [h, m]): one product for the hidden layer,
    then per block of outputs (:func:`output_blocks`) one for the linear part and one for the
    output layer."""
    W1, b1 = rotation.reads_input(hidden.weight.T, hidden.bias)
    A, a = rotation.reads_input(*linear)
    W1, b1, A, a, out = _f32(W1, b1, A, a, out)
    blocks = [
        (a[i:j], A[:, i:j].contiguous(), out[:, i:j].contiguous()) for i, j in output_blocks(dim)
    ]

    def plan(X: torch.Tensor) -> torch.Tensor:
        G = F.gelu(torch.addmm(b1, X, W1))
        parts = [torch.addmm(b, X, lin).addmm_(G, out_w) for b, lin, out_w in blocks]
        return torch.cat(parts, 1)[:, :dim]

    return plan


def adaptor_plan(rotation: Rotation, network: Any, dim: int) -> Plan:
    """The adaptor ``u + out(gelu(hidden(u)))``: a two-layer plan whose linear part is the
    identity."""
    # network: the adaptor's ResidualMLP (a class local to a function, hence Any).
    eye = torch.eye(rotation.rotation.shape[0], dtype=torch.float64)
    return two_layer_plan(
        rotation, (eye, network.out.bias), network.hidden, network.out.weight.T, dim
    )


def width_network_plan(rotation: Rotation, network: WidthNetwork, dim: int) -> Plan:
    """A SMEC width network ``linear(u) + out(gelu(hidden(u)))`` as a two-layer plan."""
    linear, out = network.linear, network.out
    bias = linear.bias.double() + out.bias.double()
    return two_layer_plan(rotation, (linear.weight.T, bias), network.hidden, out.weight.T, dim)


def _stage_matrices(stage: SelectionStage) -> tuple[torch.Tensor, ...]:
    """A SMEC stage's weights with its inference selection folded in: (reads the previous
    output: hidden part, linear part), reads the context, hidden bias, output layer, output
    bias."""
    d_in = stage.linear.weight.shape[1]
    mask = torch.zeros(d_in, dtype=torch.float64)
    mask[stage.selected()] = 1.0
    hidden_w = stage.hidden.weight.double()
    from_h = torch.cat(
        [hidden_w[:, :d_in].T, stage.linear.weight.T.double()],
        1,
    ) * mask.unsqueeze(1)
    out = stage.out
    return (
        from_h,
        hidden_w[:, d_in:].T,
        stage.hidden.bias.double(),
        out.weight.T.double(),
        out.bias.double(),
    )


def smec_plan(rotation: Rotation, stages: Sequence[SelectionStage], dim: int) -> Plan:
    """A chain of SMEC stages, first ``dim`` outputs of the last: one product reads the raw
    embedding for every stage (the first stage's input is the rotated embedding itself);
    then per stage one product of the previous output (selection folded in) and one of the
    MLP's hidden layer. The last stage is computed at its full width, so every width it
    serves is an exact prefix of the others (and it is at most twice ``dim``)."""
    parts = [_stage_matrices(stage) for stage in stages]
    width = parts[0][1].shape[1]
    first_h, first_ctx, first_b, _, first_ob = parts[0]
    # Stage 1 reads u twice (as the selected input and as the context): one matrix.
    reads_u = [first_h[:, :width] + first_ctx, first_h[:, width:]]
    biases = [first_b, first_ob]
    for _, ctx, b, _, _ in parts[1:]:
        reads_u.append(ctx)
        biases.append(b)
    W, b = rotation.reads_input(torch.cat(reads_u, 1), torch.cat(biases))
    W, b = _f32(W, b)
    cuts = [width, parts[0][3].shape[1], *(width for _ in parts[1:])]
    stage_weights = [_f32(p[0], p[3], p[4]) for p in parts]
    first_out = stage_weights[0][1]

    def plan(X: torch.Tensor) -> torch.Tensor:
        Z = torch.addmm(b, X, W).split(cuts, dim=1)
        h = torch.addmm(Z[1], F.gelu(Z[0]), first_out)
        for (from_h, out_w, out_b), context in zip(stage_weights[1:], Z[2:], strict=True):
            both = h @ from_h
            g = F.gelu(both[:, :width] + context)
            h = torch.addmm(both[:, width:] + out_b, g, out_w)
        return h[:, :dim]

    return plan


def mcr2_plan(rotation: Rotation, network: Any) -> Plan:
    """MCR²'s feature path (trunk, feature head, L2 normalisation) without the cluster head,
    the rotation folded into the trunk's first layer."""
    first, second = network.trunk[0], network.trunk[2]
    features = network.features
    W1, b1 = rotation.reads_input(first.weight.T, first.bias)
    W1, b1, W2, b2, Wf, bf = _f32(
        W1, b1, second.weight.T, second.bias, features.weight.T, features.bias
    )

    def plan(X: torch.Tensor) -> torch.Tensor:
        h = F.elu(torch.addmm(b1, X, W1))
        h = F.elu(torch.addmm(b2, h, W2))
        return F.normalize(torch.addmm(bf, h, Wf), dim=1)

    return plan
