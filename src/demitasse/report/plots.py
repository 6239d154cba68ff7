"""Plots of result records (matplotlib Agg, no display needed).

Every plot draws one colour per compressor (method) and one line style (or marker, for
scatter plots) per precision, so figures of one report read alike. Each is written atomically.
"""

from __future__ import annotations

import functools
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from demitasse import metrics
from demitasse.compress import sort_precisions
from demitasse.errors import DataError
from demitasse.evaluation.records import ResultRecord
from demitasse.io import atomic_path
from demitasse.report.tables import (
    EFFICIENCY,
    ConfigKey,
    Headline,
    config_key,
    headline,
)

LINE_STYLES = {"float32": "-", "int8": "--", "binary": ":"}
MARKERS = {"float32": "o", "int8": "s", "binary": "^"}
#: The style of a precision not in LINE_STYLES / MARKERS (product codes, residual codes, ...).
DEFAULT_LINE_STYLE = "-."
DEFAULT_MARKER = "D"
TASK_LABELS = {"sts": "STS", "classification": "Classification", "retrieval": "Retrieval"}
SEARCH_SPEED = "queries_per_s"
ENCODE_SPEED = "sentences_per_s"
DPI = 110
PANEL_COLUMNS = 3
MAX_LABELLED_FRONTIER = 10
MAX_ANNOTATED_CELLS = 160
ENCODING = "encoding speed"

Colours = Mapping[str, tuple[float, ...]]


def _plain_text(plot: Callable[..., Path]) -> Callable[..., Path]:
    """Draw every text of the plot as typed: names in records are no TeX, so a "$" in one must
    be neither parsed as math nor fail to parse (``"$}$"`` made matplotlib raise)."""

    @functools.wraps(plot)
    def plain(*args: object, **kwargs: object) -> Path:
        with plt.rc_context({"text.parse_math": False}):
            return plot(*args, **kwargs)

    return plain


@dataclass(frozen=True)
class Point:
    """One configuration in a quality-against-speed plot."""

    key: ConfigKey
    speed: float
    quality: float


def _colour(colours: Colours | None, method: str) -> Any:
    """The method's colour for matplotlib (black when it has none)."""
    return (colours or {}).get(method, "black")


def method_colours(methods: Iterable[str]) -> dict[str, tuple[float, ...]]:
    """A fixed colour per method, in order of first appearance."""
    names = list(dict.fromkeys(methods))
    palette = cast(Any, plt.get_cmap("tab10" if len(names) <= 10 else "tab20")).colors
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def search_speeds(records: Sequence[ResultRecord]) -> dict[str, dict[ConfigKey, float]]:
    """Search throughput (queries/s) per efficiency data set, per configuration."""
    speeds: dict[str, dict[ConfigKey, float]] = {}
    for r in records:
        if r.task == EFFICIENCY and r.metric == SEARCH_SPEED:
            speeds.setdefault(r.dataset, {})[config_key(r)] = r.score
    return speeds


def encode_speeds(records: Sequence[ResultRecord]) -> dict[tuple[str, int | None], float]:
    """Encoding throughput (sentences/s) per (model, layer)."""
    return {
        (r.model, r.layer): r.score
        for r in records
        if r.task == EFFICIENCY and r.metric == ENCODE_SPEED
    }


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both speed and quality, fastest first."""
    return metrics.pareto_front(points, cost=lambda p: -p.speed, quality=lambda p: p.quality)


def speed_points(
    records: Sequence[ResultRecord], task: str, speeds: Mapping[ConfigKey, float]
) -> list[Point]:
    """Headline quality of ``task`` against the speed of the same configuration."""
    scores = headline(records, task).scores
    return [Point(key, speeds[key], score) for key, score in scores.items() if key in speeds]


def encode_points(records: Sequence[ResultRecord], task: str) -> list[Point]:
    """Headline quality of every configuration against the encoding speed of its layer."""
    speeds = encode_speeds(records)
    scores = headline(records, task).scores
    return [
        Point(key, speeds[key[:2]], score) for key, score in scores.items() if key[:2] in speeds
    ]


@_plain_text
def plot_quality_vs_dim(
    records: Sequence[ResultRecord],
    path: str | Path,
    task: str = "sts",
    *,
    title: str = "",
    colours: Colours | None = None,
) -> Path:
    """Headline quality against dimension: a line per method and precision, a panel per layer."""
    best = _headline_or_fail(records, task)
    return _line_panels(
        best,
        {key: float(key[3]) for key in best.scores},
        "dimensions",
        Path(path),
        title,
        colours or method_colours(k[2] for k in best.scores),
    )


@_plain_text
def plot_quality_vs_bytes(
    records: Sequence[ResultRecord],
    path: str | Path,
    task: str = "sts",
    *,
    title: str = "",
    colours: Colours | None = None,
) -> Path:
    """Headline quality against bytes per stored vector, so precisions compare at equal memory."""
    best = _headline_or_fail(records, task)
    xs = vector_sizes(records, best)
    if not xs:
        raise DataError(f"no {task} records carry bytes_per_vector to plot")
    colours = colours or method_colours(key[2] for key in xs)
    return _line_panels(best, xs, "bytes per vector", Path(path), title, colours)


def vector_sizes(records: Sequence[ResultRecord], best: Headline) -> dict[ConfigKey, float]:
    """Bytes per stored vector of each configuration of ``best`` whose records give it."""
    size = {config_key(r): r.bytes_per_vector for r in records if r.task == best.task}
    return {key: float(nbytes) for key in best.scores if (nbytes := size.get(key))}


@_plain_text
def plot_quality_vs_search_speed(
    records: Sequence[ResultRecord],
    path: str | Path,
    task: str,
    *,
    dataset: str | None = None,
    title: str = "",
    colours: Colours | None = None,
) -> Path:
    """Headline quality against search queries/s of the same configuration, Pareto front marked.

    ``dataset`` names the efficiency data set holding the search speeds (needed only when the
    records hold several).
    """
    speeds = search_speeds(records)
    if dataset is None and len(speeds) > 1:
        raise DataError(f"several search benchmarks ({', '.join(speeds)}): pass dataset=")
    chosen = speeds.get(dataset) if dataset else next(iter(speeds.values()), None)
    if not chosen:
        raise DataError(f"no efficiency records with {SEARCH_SPEED} to plot {task} against")
    points = speed_points(records, task, chosen)
    label = f"{dataset or next(iter(speeds))}: queries per second"
    return _pareto_plot(records, task, points, label, Path(path), title, colours, "search speed")


@_plain_text
def plot_quality_vs_encode_speed(
    records: Sequence[ResultRecord],
    path: str | Path,
    task: str,
    *,
    title: str = "",
    colours: Colours | None = None,
) -> Path:
    """Headline quality against the encoding speed of each layer cut, Pareto front marked."""
    points = encode_points(records, task)
    return _pareto_plot(
        records,
        task,
        points,
        "encoding: sentences per second",
        Path(path),
        title,
        colours,
        ENCODING,
    )


@_plain_text
def plot_layer_heatmap(
    records: Sequence[ResultRecord],
    path: str | Path,
    task: str,
    *,
    title: str = "",
) -> Path:
    """Headline quality over layer × dimension: a panel per precision (rows) and method."""
    best = _headline_or_fail(records, task)
    _one_model(best.scores, "a layer heatmap")
    scores = {k: v for k, v in best.scores.items() if k[1] is not None}
    layers = sorted({int(k[1]) for k in scores if k[1] is not None})
    if len(layers) < 2:
        raise DataError(f"a layer heatmap needs several layers; {task} has {len(layers)}")
    methods = list(dict.fromkeys(k[2] for k in scores))
    precisions = _precisions(k[4] for k in scores)
    values = list(scores.values())
    vmin, vmax = min(values), max(values)
    fig, axes = plt.subplots(
        len(precisions),
        len(methods),
        figsize=(2.2 + 2.6 * len(methods), 0.9 + (0.35 * len(layers) + 0.9) * len(precisions)),
        squeeze=False,
        layout="constrained",
    )
    image = None
    for row, precision in enumerate(precisions):
        for col, method in enumerate(methods):
            ax = axes[row][col]
            dims = sorted({k[3] for k in scores if k[2] == method and k[4] == precision})
            grid = np.full((len(layers), max(1, len(dims))), np.nan)
            for (_, layer, m, dim, p), score in scores.items():
                if m == method and p == precision:
                    grid[layers.index(int(layer or 0)), dims.index(dim)] = score
            image = ax.imshow(
                grid, aspect="auto", origin="lower", cmap="viridis", vmin=vmin, vmax=vmax
            )
            ax.set_xticks(range(len(dims)), [str(d) for d in dims], fontsize=7)
            ax.set_yticks(range(len(layers)), [str(layer) for layer in layers], fontsize=7)
            if grid.size <= MAX_ANNOTATED_CELLS:
                _annotate_cells(ax, grid, (vmin + vmax) / 2)
            ax.set_title(f"{method} ({precision})", fontsize=9)
            if row == len(precisions) - 1:
                ax.set_xlabel("dimensions", fontsize=8)
            if col == 0:
                ax.set_ylabel("layer", fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label=quality_label(best))
    fig.suptitle(_title(title, f"{_task_label(task)} by layer and dimension"))
    return save_figure(fig, Path(path))


@_plain_text
def plot_matrix_heatmap(
    matrix: np.ndarray,
    rows: Sequence[str],
    columns: Sequence[str],
    path: str | Path,
    *,
    row_label: str,
    column_label: str,
    value_label: str,
    title: str = "",
) -> Path:
    """Any annotated score matrix, e.g. encoder × pooler swaps (NaN cells stay blank)."""
    grid = np.asarray(matrix, dtype=float)
    if grid.shape != (len(rows), len(columns)) or np.isnan(grid).all():
        raise DataError(f"a heatmap needs a {len(rows)} × {len(columns)} matrix with values")
    vmin, vmax = np.nanmin(grid), np.nanmax(grid)
    fig, ax = plt.subplots(
        figsize=(1.6 + 0.7 * len(columns), 1.2 + 0.45 * len(rows)), layout="constrained"
    )
    image = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(columns)), list(columns), fontsize=8)
    ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    ax.set_xlabel(column_label, fontsize=9)
    ax.set_ylabel(row_label, fontsize=9)
    if grid.size <= MAX_ANNOTATED_CELLS:
        _annotate_cells(ax, grid, (vmin + vmax) / 2)
    fig.colorbar(image, ax=ax, shrink=0.8, label=value_label)
    if title:
        ax.set_title(title, fontsize=10)
    return save_figure(fig, Path(path))


@_plain_text
def plot_sts_vs_dim(records: Sequence[ResultRecord], path: str | Path, title: str = "") -> Path:
    """STS average against dimension: one line per compressor and precision, a panel per layer."""
    return plot_quality_vs_dim(records, path, "sts", title=title)


def _headline_or_fail(records: Sequence[ResultRecord], task: str) -> Headline:
    best = headline(records, task)
    if not best.scores:
        raise DataError(f"no {task} records to plot")
    return best


def _one_model(keys: Iterable[ConfigKey], what: str) -> None:
    models = list(dict.fromkeys(k[0] for k in keys))
    if len(models) > 1:
        raise DataError(f"{what} shows one model at a time; got {', '.join(models)}")


def _precisions(values: Iterable[str]) -> list[str]:
    return sort_precisions(values)


def _line_style(precision: str) -> str:
    return LINE_STYLES.get(precision, DEFAULT_LINE_STYLE)


def _marker(precision: str) -> str:
    return MARKERS.get(precision, DEFAULT_MARKER)


def _task_label(task: str) -> str:
    return TASK_LABELS.get(task, task.capitalize())


def quality_label(best: Headline) -> str:
    return f"{_task_label(best.task)} {best.metric} ({best.label})"


def _title(title: str, subject: str) -> str:
    # Wrapped, because one narrow panel plus an outside legend leaves little width.
    return "\n".join(textwrap.wrap(f"{title}: {subject}" if title else subject, 55))


def _line_panels(
    best: Headline,
    xs: Mapping[ConfigKey, float],
    xlabel: str,
    path: Path,
    title: str,
    colours: Colours,
) -> Path:
    models = list(dict.fromkeys(k[0] for k in xs))
    panels = sorted(
        {(k[0], k[1]) for k in xs},
        key=lambda panel: (models.index(panel[0]), panel[1] is None, panel[1] or 0),
    )
    several_models = len({model for model, _ in panels}) > 1
    columns = min(PANEL_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(1.8 + 4.2 * columns, 0.6 + 3.4 * rows),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    flat = [ax for row in axes for ax in row]
    for ax, (model, layer) in zip(flat, panels, strict=False):
        _draw_lines(ax, best, {k: x for k, x in xs.items() if k[:2] == (model, layer)}, colours)
        _log2_axis(ax)
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3, which="both")
        name = f"layer {layer}" if layer is not None else "vectors"
        ax.set_title(f"{model} · {name}" if several_models else name, fontsize=10)
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel(quality_label(best))
    heading = _title(title, f"{_task_label(best.task)} against {xlabel}")
    return _finish_figure(fig, _line_legend(xs, colours), heading, path)


def _draw_lines(
    ax: plt.Axes, best: Headline, xs: Mapping[ConfigKey, float], colours: Colours
) -> None:
    """One panel: a line per method and precision through its configurations' scores."""
    for method, precision in dict.fromkeys((k[2], k[4]) for k in xs):
        points = sorted((xs[k], best.scores[k]) for k in xs if (k[2], k[4]) == (method, precision))
        x, y = zip(*points, strict=True)
        # A lone point (the uncompressed vectors) would hide under the lines: a star on top.
        lone = len(points) == 1
        ax.plot(
            x,
            y,
            _line_style(precision),
            color=colours.get(method, "black"),
            marker="*" if lone else "o",
            markersize=9 if lone else 3,
            markeredgecolor="white" if lone else None,
            markeredgewidth=0.6,
            linewidth=1.4,
            zorder=3 if lone else 2,
        )


def _line_legend(xs: Mapping[ConfigKey, float], colours: Colours) -> list[Line2D]:
    """A colour per method, then a line style per precision."""
    methods = list(dict.fromkeys(k[2] for k in xs))
    handles = [Line2D([], [], color=_colour(colours, m), lw=2, label=m) for m in methods]
    handles += [
        Line2D([], [], color="0.35", ls=_line_style(p), lw=1.4, label=p)
        for p in _precisions(k[4] for k in xs)
    ]
    return handles


def _pareto_plot(
    records: Sequence[ResultRecord],
    task: str,
    points: Sequence[Point],
    xlabel: str,
    path: Path,
    title: str,
    colours: Colours | None,
    subject: str,
) -> Path:
    if not points:
        raise DataError(f"no {task} configuration has a matching speed measurement")
    _one_model((p.key for p in points), "a speed plot")
    best = headline(records, task)
    colours = colours or method_colours(p.key[2] for p in points)
    fig, ax = plt.subplots(figsize=(8.4, 5.0), layout="constrained")
    _scatter_points(ax, points, colours)
    _draw_front(ax, points)
    _log_speed_axis(ax, [p.speed for p in points])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(quality_label(best))
    ax.grid(True, alpha=0.3)
    if subject == ENCODING:
        _mark_layers(ax, points)
    heading = _title(title, f"{_task_label(task)} against {subject}")
    return _finish_figure(fig, _pareto_legend(points, colours), heading, path)


def _finish_figure(fig: Figure, handles: list[Line2D], heading: str, path: Path) -> Path:
    """The legend of methods and precisions on the right, the heading on top, then saved."""
    fig.legend(handles=handles, loc="outside right center", fontsize=8, title="method / precision")
    fig.suptitle(heading)
    return save_figure(fig, path)


def _scatter_points(ax: plt.Axes, points: Sequence[Point], colours: Colours) -> None:
    """A colour per method and a marker per precision."""
    for method, precision in dict.fromkeys((p.key[2], p.key[4]) for p in points):
        group = [p for p in points if (p.key[2], p.key[4]) == (method, precision)]
        ax.scatter(
            [p.speed for p in group],
            [p.quality for p in group],
            color=colours.get(method, "black"),
            marker=_marker(precision),
            s=26,
            alpha=0.75,
            linewidths=0,
        )


def _draw_front(ax: plt.Axes, points: Sequence[Point]) -> None:
    """The Pareto front as a step line through ringed points, labelled when it is short."""
    several_layers = len({p.key[1] for p in points}) > 1
    # Ascending speed with "pre" steps: past a point's speed only slower-but-better ones drop out.
    front = pareto_front(points)[::-1]
    ax.step(
        [p.speed for p in front],
        [p.quality for p in front],
        where="pre",
        color="black",
        linewidth=1.1,
        linestyle="-",
        alpha=0.8,
    )
    ax.scatter(
        [p.speed for p in front],
        [p.quality for p in front],
        s=70,
        facecolors="none",
        edgecolors="black",
        linewidths=1.1,
    )
    if len(front) <= MAX_LABELLED_FRONTIER:
        for p in front:
            ax.annotate(
                describe(p.key, with_layer=several_layers),
                (p.speed, p.quality),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=7,
            )


def _pareto_legend(points: Sequence[Point], colours: Colours) -> list[Line2D]:
    """A colour per method, a marker per precision, and the front's ring."""
    methods = list(dict.fromkeys(p.key[2] for p in points))
    handles = [
        Line2D([], [], color=_colour(colours, m), marker="o", ls="", label=m) for m in methods
    ]
    handles += [
        Line2D([], [], color="0.35", marker=_marker(p), ls="", label=p)
        for p in _precisions(p.key[4] for p in points)
    ]
    handles.append(
        Line2D([], [], color="black", marker="o", mfc="none", ms=8, label="Pareto front")
    )
    return handles


def describe(key: ConfigKey, *, with_layer: bool = False) -> str:
    """A short label for a configuration, such as ``pca 64 int8`` or ``L3 pca 64 int8``."""
    _, layer, method, dim, precision = key
    text = f"{method} {dim} {precision}"
    return f"L{layer} {text}" if with_layer and layer is not None else text


def _mark_layers(ax: plt.Axes, points: Sequence[Point]) -> None:
    """Name each layer above its column of points: all of a layer's configurations share x."""
    transform = ax.get_xaxis_transform()
    for layer, speed in dict.fromkeys((p.key[1], p.speed) for p in points):
        ax.text(speed, 1.01, f"L{layer}", transform=transform, ha="center", va="bottom", fontsize=7)


def _annotate_cells(ax: plt.Axes, grid: np.ndarray, middle: float) -> None:
    for (i, j), value in np.ndenumerate(grid):
        if not np.isnan(value):
            colour = "white" if value < middle else "black"
            ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=7, color=colour)


def _log2_axis(ax: plt.Axes) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=8))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _log_speed_axis(ax: plt.Axes, speeds: Sequence[float]) -> None:
    """A log axis labelled 500, 2k, 1.5M; within one decade the in-between ticks get labels too."""
    ax.set_xscale("log")
    compact = FuncFormatter(lambda v, _: _compact(v))
    ax.xaxis.set_major_formatter(compact)
    narrow = max(speeds) < 10 * min(speeds)
    ax.xaxis.set_minor_formatter(compact if narrow else NullFormatter())
    ax.tick_params(axis="x", which="minor", labelsize=7)


def _compact(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` as PNG atomically (temp file, then rename) and close it."""
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    plt.close(fig)
    return path
