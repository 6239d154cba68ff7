"""The tune report: the Pareto plot of quality against bytes per document (under the tune's
budget: codes + rescoring copy, or codes only), the front, every configuration, as one Markdown
file and one self-contained HTML page (``demitasse.report``'s blocks and renderers)."""

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
from demitasse.tune.choice import Outcome, Requirement, budget_label, pareto_front
from demitasse.tune.output import outcome_header, outcome_row


def plot_pareto(
    outcomes: Sequence[Outcome],
    path: str | Path,
    needed: Requirement,
    chosen: Outcome | None = None,
    title: str = "",
    budget: str = "total",
) -> Path:
    """Quality against bytes per vector under ``budget`` (log scale): every configuration
    (colour: the compressor, marker: the precision), the Pareto front as a step line, the
    chosen one ringed, the required quality as a dashed line."""
    colours = method_colours(o.config.method for o in outcomes)
    fig, ax = plt.subplots(figsize=(8.4, 5.0), layout="constrained")
    for outcome in outcomes:
        ax.scatter(
            outcome.budget_bytes(budget),
            outcome.quality,
            s=22,
            alpha=0.7,
            linewidths=0,
            color=colours[outcome.config.method],
            marker=MARKERS.get(outcome.config.precision, "D"),
        )
    front = pareto_front(outcomes, budget)
    ax.step(
        [o.budget_bytes(budget) for o in front],
        [o.quality for o in front],
        where="post",
        color="black",
        linewidth=1.0,
        alpha=0.8,
    )
    if needed.required is not None:
        ax.axhline(needed.required, color="0.4", linestyle="--", linewidth=1.0)
    if chosen is not None:
        _ring(ax, chosen, budget)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis = "index bytes per vector (held in memory)" if budget == "memory" else budget_label(budget)
    ax.set_xlabel(axis)
    ax.set_ylabel(needed.metric)
    ax.grid(True, alpha=0.3)
    ax.legend(handles=_legend(colours, outcomes, needed, chosen), fontsize=8, loc="lower right")
    bytes_name = "index bytes" if budget == "memory" else "bytes per vector"
    ax.set_title(title or f"{needed.metric} against {bytes_name}", fontsize=10)
    return save_figure(fig, path)


def _ring(ax: Any, chosen: Outcome, budget: str) -> None:
    """The chosen configuration ringed in red and named."""
    at = (chosen.budget_bytes(budget), chosen.quality)
    ax.scatter(*at, s=140, facecolors="none", edgecolors="red", linewidths=1.6)
    ax.annotate(
        chosen.config.describe(),
        at,
        textcoords="offset points",
        xytext=(6, -12),
        fontsize=8,
        color="red",
    )


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
    budget: str = "total",
) -> ReportPaths:
    """Write ``report.md``, ``report.html`` and ``figures/pareto.png`` under ``out_dir``; the
    plot, the front and the order of the tables count bytes under ``budget``."""
    out_dir = Path(out_dir)
    several = len({o.config.encoder for o in outcomes}) > 1
    with atomic_directory(out_dir, kind="report") as tmp:
        figure = plot_pareto(
            outcomes, tmp / "figures" / "pareto.png", needed, chosen, budget=budget
        )
        caption = (
            f"{needed.metric} against {budget_label(budget)}; the Pareto front as a line, the "
            "chosen configuration ringed."
        )
        blocks: list[Block] = [
            Heading(1, title),
            *(Text(line) for line in summary),
            FigureBlock(figure, caption),
            Heading(2, "Pareto front"),
            TableBlock(_table(pareto_front(outcomes, budget), needed, several, budget)),
            Heading(2, "Every configuration"),
            TableBlock(_table(_by_cost(outcomes, budget), needed, several, budget)),
        ]
        (tmp / "report.md").write_text(to_markdown(blocks, tmp), encoding="utf-8")
        (tmp / "report.html").write_text(to_html(blocks, title), encoding="utf-8")
    return ReportPaths(
        out_dir / "report.md", out_dir / "report.html", (out_dir / "figures" / "pareto.png",)
    )


def _by_cost(outcomes: Sequence[Outcome], budget: str) -> list[Outcome]:
    return sorted(outcomes, key=lambda o: (o.budget_bytes(budget), -o.quality, o.cost(budget)))


def _table(outcomes: Sequence[Outcome], needed: Requirement, several: bool, budget: str) -> Table:
    rows = tuple(outcome_row(o, needed, with_encoder=several, budget=budget) for o in outcomes)
    return Table(outcome_header(needed, budget), rows)
