"""One stage of SMEC's chain (see :mod:`demitasse.compress.smec`): select ``d_out`` of the
previous stage's ``d_in`` outputs (ADS or a prefix), then reduce them to ``d_out``.

This module imports torch at the top; :class:`~demitasse.compress.smec.SMEC` imports it only
when it builds a network, so that ``import demitasse.compress`` stays free of torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)


def gumbel_top_k(logits: torch.Tensor, k: int, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A Gumbel top-``k`` sample of ``logits``: the hard 0/1 selection and its relaxation."""
    uniform = torch.rand_like(logits).clamp(1e-9, 1 - 1e-9)
    perturbed = logits - torch.log(-torch.log(uniform))
    top = perturbed.topk(min(k + 1, perturbed.numel()))
    hard = torch.zeros_like(perturbed).scatter(0, top.indices[:k], 1.0)
    # Each input's membership is a sigmoid of its distance to the cut between the k-th and
    # (k+1)-th perturbed logit (at most 1 each, unlike k·softmax, which lets one input take
    # the mass of several).
    cut = top.values[-2:].mean().detach()
    return hard, torch.sigmoid((perturbed - cut) / tau)


class SelectionStage(torch.nn.Module):
    """Select ``d_out`` of ``d_in`` inputs (ADS or prefix), then reduce them to ``d_out`` with
    ``linear(v) + mlp([v, context])``; the linear part starts as the identity on the first
    ``d_out`` inputs and the MLP at zero."""

    prefix: torch.Tensor  # a buffer

    def __init__(
        self, d_in: int, d_out: int, d_context: int, hidden: int, ads: bool, tau: float
    ) -> None:
        super().__init__()
        self.d_out, self.tau = d_out, tau
        self.logits = torch.nn.Parameter(torch.zeros(d_in)) if ads else None
        self.linear = torch.nn.Linear(d_in, d_out, bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(torch.eye(d_out, d_in))
        self.hidden = torch.nn.Linear(d_in + d_context, hidden)
        self.out = torch.nn.Linear(hidden, d_out)
        torch.nn.init.zeros_(self.out.weight)
        torch.nn.init.zeros_(self.out.bias)
        prefix = torch.zeros(d_in)
        prefix[:d_out] = 1.0
        self.register_buffer("prefix", prefix, persistent=False)
        self.soft_mask: torch.Tensor | None = None
        self.soft_output: torch.Tensor | None = None
        #: Rows of the next inputs the ADS term reads (None: all): the relaxed pass is as
        #: costly as the forward pass, and refreshed memory neighbours need only the latter.
        self.soft_rows: int | None = None
        #: Rows of the next inputs that carry gradients (None: all); the others, refreshed
        #: memory neighbours, are computed without, which saves their backward pass.
        self.gradient_rows: int | None = None

    def selected(self) -> torch.Tensor:
        """Indices of the inputs used at inference, most important first."""
        if self.logits is None:
            return torch.arange(self.d_out)
        return self.logits.detach().topk(self.d_out).indices

    def mask(self) -> torch.Tensor:
        """Hard selection: prefix, top-k logits (eval) or a Gumbel top-k sample (train)."""
        self.soft_mask = None
        if self.logits is None:
            return self.prefix
        if not self.training:
            hard = torch.zeros_like(self.logits)
            return hard.scatter(0, self.logits.topk(self.d_out).indices, 1.0)
        hard, self.soft_mask = gumbel_top_k(self.logits, self.d_out, self.tau)
        return hard.detach()

    def reduce(self, v: torch.Tensor, context: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        weights = [
            self.linear.weight,
            self.hidden.weight,
            self.hidden.bias,
            self.out.weight,
            self.out.bias,
        ]
        if frozen:
            weights = [w.detach() for w in weights]
        linear, hidden_w, hidden_b, out_w, out_b = weights
        hidden_in = torch.cat([v, context], dim=1)
        return F.linear(v, linear) + F.linear(
            F.gelu(F.linear(hidden_in, hidden_w, hidden_b)), out_w, out_b
        )

    def forward(self, h: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        mask = self.mask()  # one sample for every row
        n = self.gradient_rows
        if n is None or n >= len(h):
            out = self.reduce(h * mask, context)
        else:
            with torch.no_grad():
                rest = self.reduce(h[n:] * mask, context[n:])
            out = torch.cat([self.reduce(h[:n] * mask, context[:n]), rest])
        # Straight-through, evaluated at the relaxed point: the logits learn from the softly
        # masked input pushed through the (detached) reduction trained on the hard selection.
        # At the hard point itself the gradient only says how to rescale dims that are already
        # selected, which the reduction's weights make meaningless.
        if self.soft_mask is None:
            self.soft_output = None
        else:
            rows = slice(self.soft_rows)
            self.soft_output = self.reduce(h[rows] * self.soft_mask, context[rows], True)
        return out


class WidthNetwork(torch.nn.Module):
    """One stage width's output straight from the rotated embedding, ``linear(u) +
    out(gelu(hidden(u)))``: distilled from the chain of stages up to that width, so that
    inference runs two layers instead of the chain (SMEC's ``inference="distilled"``)."""

    def __init__(self, d_in: int, d_out: int, hidden: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(d_in, d_out)
        self.hidden = torch.nn.Linear(d_in, hidden)
        self.out = torch.nn.Linear(hidden, d_out)
        torch.nn.init.zeros_(self.out.weight)
        torch.nn.init.zeros_(self.out.bias)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.linear(u) + self.out(F.gelu(self.hidden(u)))

    def start_from_least_squares(self, u: torch.Tensor, target: torch.Tensor) -> None:
        """The linear part set to the least-squares fit of ``target`` (the MLP is at zero)."""
        with torch.no_grad():
            ones = torch.ones(len(u), 1, dtype=torch.float64, device=u.device)
            design = torch.cat([u.double(), ones], 1)
            solution = torch.linalg.lstsq(design, target.double()).solution
            self.linear.weight.copy_(solution[:-1].T.to(self.linear.weight.dtype))
            self.linear.bias.copy_(solution[-1].to(self.linear.bias.dtype))
