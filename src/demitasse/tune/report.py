"""The tune report: the Pareto plot of quality against index bytes, the front, every
configuration, as one Markdown file and one self-contained HTML page (``demitasse.report``'s
blocks and renderers)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from demitasse.io import atomic_directory
from demitasse.report.plots import MARKERS, method_colours, save_figure
from demitasse.report.render import (
    Block,
    FigureBlock,
    Heading,
    ReportPaths,
    TableBlock,
    Text,
    to_html,
    to_markdown,
)
from demitasse.report.tables import Table
from demitasse.tune.choice import Outcome, Requirement, pareto_front
from demitasse.tune.output import outcome_header, outcome_row


def plot_pareto(
    outcomes: Sequence[Outcome],
    path: str | Path,
    needed: Requirement,
    chosen: Outcome | None = None,
    title: str = "",
) -> Path:
    """Quality against index bytes per vector (log scale): every configuration (colour: the
    compressor, marker: the precision), the Pareto front as a step line, the chosen one ringed,
    the required quality as a dashed line."""
    colours = method_colours(o.config.method for o in outcomes)
    fig, ax = plt.subplots(figsize=(8.4, 5.0), layout="constrained")
    for outcome in outcomes:
        ax.scatter(
            outcome.index_bytes,
            outcome.quality,
            s=22,
            alpha=0.7,
            linewidths=0,
            color=colours[outcome.config.method],
            marker=MARKERS.get(outcome.config.precision, "D"),
        )
    front = pareto_front(outcomes)
    ax.step(
        [o.index_bytes for o in front],
        [o.quality for o in front],
        where="post",
        color="black",
        linewidth=1.0,
        alpha=0.8,
    )
    if needed.required is not None:
        ax.axhline(needed.required, color="0.4", linestyle="--", linewidth=1.0)
    if chosen is not None:
        ax.scatter(
            chosen.index_bytes,
            chosen.quality,
            s=140,
            facecolors="none",
            edgecolors="red",
            linewidths=1.6,
        )
        ax.annotate(
            chosen.config.describe(),
            (chosen.index_bytes, chosen.quality),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=8,
            color="red",
        )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_xlabel("index bytes per vector (held in memory)")
    ax.set_ylabel(needed.metric)
    ax.grid(True, alpha=0.3)
    ax.legend(handles=_legend(colours, outcomes, needed, chosen), fontsize=8, loc="lower right")
    ax.set_title(title or f"{needed.metric} against index bytes", fontsize=10)
    return save_figure(fig, path)


def _legend(
    colours: dict[str, Any],
    outcomes: Sequence[Outcome],
    needed: Requirement,
    chosen: Outcome | None,
) -> list[Line2D]:
    handles = [Line2D([], [], color=c, marker="o", ls="", label=m) for m, c in colours.items()]
    for precision in dict.fromkeys(o.config.precision for o in outcomes):
        marker = MARKERS.get(precision, "D")
        handles.append(Line2D([], [], color="0.35", marker=marker, ls="", label=precision))
    handles.append(Line2D([], [], color="black", label="Pareto front"))
    if needed.required is not None:
        handles.append(Line2D([], [], color="0.4", ls="--", label="target"))
    if chosen is not None:
        handles.append(Line2D([], [], color="red", marker="o", mfc="none", ls="", label="chosen"))
    return handles


def render_tune_report(
    outcomes: Sequence[Outcome],
    out_dir: str | Path,
    needed: Requirement,
    *,
    title: str,
    summary: Sequence[str],
    chosen: Outcome | None = None,
) -> ReportPaths:
    """Write ``report.md``, ``report.html`` and ``figures/pareto.png`` under ``out_dir``."""
    out_dir = Path(out_dir)
    several = len({o.config.encoder for o in outcomes}) > 1
    with atomic_directory(out_dir, kind="report") as tmp:
        figure = plot_pareto(outcomes, tmp / "figures" / "pareto.png", needed, chosen)
        caption = (
            f"{needed.metric} against index bytes per vector; the Pareto front as a line, the "
            "chosen configuration ringed."
        )
        blocks: list[Block] = [
            Heading(1, title),
            *(Text(line) for line in summary),
            FigureBlock(figure, caption),
            Heading(2, "Pareto front"),
            TableBlock(_table(pareto_front(outcomes), needed, several)),
            Heading(2, "Every configuration"),
            TableBlock(_table(_by_cost(outcomes), needed, several)),
        ]
        (tmp / "report.md").write_text(to_markdown(blocks, tmp), encoding="utf-8")
        (tmp / "report.html").write_text(to_html(blocks, title), encoding="utf-8")
    return ReportPaths(
        out_dir / "report.md", out_dir / "report.html", (out_dir / "figures" / "pareto.png",)
    )


def _by_cost(outcomes: Sequence[Outcome]) -> list[Outcome]:
    return sorted(outcomes, key=lambda o: (o.index_bytes, -o.quality, o.cost()))


def _table(outcomes: Sequence[Outcome], needed: Requirement, several: bool) -> Table:
    rows = tuple(outcome_row(o, needed, with_encoder=several) for o in outcomes)
    return Table(outcome_header(needed), rows)
