"""Plots of result records (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from demitasse.evaluation.records import ResultRecord
from demitasse.io import atomic_path


def plot_sts_vs_dim(records: Sequence[ResultRecord], path: str | Path, title: str = "") -> Path:
    """STS average against dimension: one line per compressor and precision, a panel per layer."""
    averages = [r for r in records if r.task == "sts" and r.dataset == "avg"]
    layers = sorted({r.layer for r in averages}, key=lambda v: (v is None, v))
    fig, axes = plt.subplots(
        1,
        max(1, len(layers)),
        figsize=(5.5 * max(1, len(layers)), 4.2),
        squeeze=False,
        sharey=True,
    )
    methods = list(dict.fromkeys(r.method for r in averages))
    colours = plt.get_cmap("tab10" if len(methods) <= 10 else "tab20").colors
    for ax, layer in zip(axes[0], layers, strict=False):
        lines = dict.fromkeys((r.method, r.precision) for r in averages if r.layer == layer)
        for method, precision in lines:
            points = sorted(
                (r.dim, r.score)
                for r in averages
                if r.layer == layer and r.method == method and r.precision == precision
            )
            xs, ys = zip(*points, strict=True)
            style = {"float32": "-", "int8": "--", "binary": ":"}.get(precision, "-")
            ax.plot(
                xs,
                ys,
                style,
                color=colours[methods.index(method) % len(colours)],
                marker="o",
                markersize=3,
                label=f"{method} ({precision})",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("dimensions")
        ax.set_title(f"layer {layer}" if len(layers) > 1 else (title or "STS"))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("STS average (Spearman ×100)")
    if title and len(layers) > 1:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path
