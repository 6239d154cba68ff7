"""Functional similarity losses, shared by the learned compressors (Matryoshka-Adaptor, SMEC),
static distillation and fine-tuning.

Unsupervised terms compare the cosine similarities of the original (frozen-backbone) embeddings
with those of their compressed versions: over all pairs of a batch, over each sample's top-k
neighbours in the batch, over neighbours retrieved from a cross-batch memory, or over given
pairs of related texts (a sentence and a perturbed copy of it, say). Supervised
terms are Search-Adaptor's pairwise rank loss on query–document relevance and CoSENT on scored
pairs. Every function returns a scalar tensor.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)


def cosine_matrix(left: torch.Tensor, right: torch.Tensor | None = None) -> torch.Tensor:
    """Cosine similarity of every row of ``left`` with every row of ``right`` (default: left)."""
    left = F.normalize(left, dim=-1)
    right = left if right is None else F.normalize(right, dim=-1)
    return left @ right.T


def pairwise_similarity_loss(original: torch.Tensor, reduced: torch.Tensor) -> torch.Tensor:
    """Mean |cos(e_i, e_j) − cos(r_i, r_j)| over all pairs i < j of the batch."""
    n = original.shape[0]
    upper = torch.triu_indices(n, n, offset=1, device=original.device)
    target = cosine_matrix(original)[upper[0], upper[1]]
    return (cosine_matrix(reduced)[upper[0], upper[1]] - target).abs().mean()


def topk_similarity_loss(original: torch.Tensor, reduced: torch.Tensor, k: int) -> torch.Tensor:
    """Mean similarity gap over each sample's ``k`` nearest in-batch neighbours (by original)."""
    n = original.shape[0]
    k = min(k, n - 1)
    target = cosine_matrix(original)
    eye = torch.eye(n, dtype=torch.bool, device=original.device)
    nearest = target.masked_fill(eye, -2.0).topk(k, dim=1).indices
    gap = cosine_matrix(reduced).gather(1, nearest) - target.gather(1, nearest)
    return gap.abs().mean()


def neighbour_similarity_loss(
    original: torch.Tensor,
    reduced: torch.Tensor,
    neighbour_original: torch.Tensor,
    neighbour_reduced: torch.Tensor,
) -> torch.Tensor:
    """Similarity gap between each sample and its own retrieved neighbours.

    ``neighbour_*`` are [n, k, ·]: the k neighbours of sample i (e.g. from a memory queue),
    as original and as compressed vectors.
    """
    target = torch.einsum(
        "nd,nkd->nk", F.normalize(original, dim=-1), F.normalize(neighbour_original, dim=-1)
    )
    ours = torch.einsum(
        "nd,nkd->nk", F.normalize(reduced, dim=-1), F.normalize(neighbour_reduced, dim=-1)
    )
    return (ours - target).abs().mean()


def pair_similarity_loss(
    left: torch.Tensor, right: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Mean |cos(l_i, r_i) − target_i| over row-aligned pairs (target: the original cosines)."""
    return (F.cosine_similarity(left, right, dim=-1) - target).abs().mean()


def reconstruction_loss(reconstructed: torch.Tensor, original: torch.Tensor) -> torch.Tensor:
    """Mean squared distance between the adapted and the original embeddings, per row."""
    return (reconstructed - original).pow(2).sum(dim=1).mean()


def rank_loss(
    queries: torch.Tensor,
    documents: torch.Tensor,
    relevance: torch.Tensor | None = None,
    scale: float = 20.0,
) -> torch.Tensor:
    """Search-Adaptor's pairwise rank loss over query–document relevance.

    Row i of ``documents`` is relevant to query i with grade ``relevance[i]`` (default 1); every
    other document of the batch has grade 0 for query i. For each query, every pair of documents
    whose grades differ adds ``softplus(scale · (s_lower − s_higher))``.
    """
    n = queries.shape[0]
    sims = cosine_matrix(queries, documents)
    grades = torch.zeros_like(sims)
    diagonal = torch.arange(n, device=sims.device)
    grades[diagonal, diagonal] = 1.0 if relevance is None else relevance.to(sims.dtype)
    # s[q, a, b] = s_qb − s_qa, counted where document a is graded above document b.
    gaps = sims.unsqueeze(1) - sims.unsqueeze(2)
    better = grades.unsqueeze(2) > grades.unsqueeze(1)
    if not better.any():
        return sims.sum() * 0.0
    return F.softplus(scale * gaps[better]).mean()


def cosent_loss(
    left: torch.Tensor, right: torch.Tensor, scores: torch.Tensor, scale: float = 20.0
) -> torch.Tensor:
    """CoSENT: log(1 + Σ exp(scale · (cos_j − cos_i))) over pairs with score_i > score_j."""
    return pairwise_ranking_loss(F.cosine_similarity(left, right, dim=-1) * scale, scores)


def pairwise_ranking_loss(predicted: torch.Tensor, grades: torch.Tensor) -> torch.Tensor:
    """log(1 + Σ exp(p_j − p_i)) over pairs with grade_i > grade_j: higher grades should get
    higher ``predicted`` values (CoSENT on scaled cosines, AnglE on negated angle distances)."""
    gaps = predicted.unsqueeze(0) - predicted.unsqueeze(1)  # [i, j] = p_j − p_i
    better = grades.unsqueeze(1) > grades.unsqueeze(0)
    gaps = gaps.masked_fill(~better, float("-inf"))
    zero = torch.zeros(1, dtype=gaps.dtype, device=gaps.device)
    return torch.logsumexp(torch.cat([zero, gaps.flatten()]), dim=0)
