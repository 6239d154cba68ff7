"""Semantic textual similarity: Spearman ×100 between predicted similarity and gold scores."""

from __future__ import annotations

from demitasse.metrics import spearman_x100

__all__ = ["spearman_x100"]
