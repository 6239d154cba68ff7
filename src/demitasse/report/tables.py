"""Markdown tables of result records, and which score of a task is its headline.

Nothing here knows data set names: columns come from the records themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from demitasse.compress import precision_sort_key
from demitasse.evaluation.records import ResultRecord

EFFICIENCY = "efficiency"
# The figure each task is judged by; a task not listed here is judged by its first metric.
HEADLINE_METRICS = {
    "sts": "spearman",
    "classification": "accuracy",
    "retrieval": "ndcg@10",
    "clustering": "accuracy",
    "translation": "accuracy",
}

# (model, layer, method, dim, precision): one evaluated configuration.
ConfigKey = tuple[str, int | None, str, int, str]


@dataclass(frozen=True)
class Table:
    """A header and rows of plain values, rendered to Markdown or HTML by the caller."""

    header: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]

    def markdown(self) -> str:
        return markdown_table(self.header, self.rows)


@dataclass(frozen=True)
class Headline:
    """One quality figure per configuration: the task's headline metric on one data set."""

    task: str
    metric: str
    label: str  # "avg", the only data set, or "mean of N data sets"
    scores: dict[ConfigKey, float]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table whose columns line up in a terminal too."""
    cells = [[str(h) for h in header]] + [[format_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines)


def format_cell(value: object) -> str:
    """How a table shows one value: floats with two decimals, ``None`` as blank."""
    if isinstance(value, float):
        return "" if np.isnan(value) else f"{value:.2f}"
    return "" if value is None else str(value)


def format_measure(value: float | None) -> str | None:
    """Speeds and latencies to about three significant digits: 0.0123, 4.56, 7890."""
    if value is None:
        return None
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def config_key(record: ResultRecord) -> ConfigKey:
    return (record.model, record.layer, record.method, record.dim, record.precision)


def quality_tasks(records: Sequence[ResultRecord]) -> list[str]:
    """The tasks with quality scores: the known ones in a fixed order, then any others."""
    present = list(dict.fromkeys(r.task for r in records if r.task != EFFICIENCY))
    known = [t for t in HEADLINE_METRICS if t in present]
    return known + [t for t in present if t not in HEADLINE_METRICS]


def task_metrics(records: Sequence[ResultRecord], task: str) -> list[str]:
    """The metrics a task reported, its headline metric first."""
    metrics = list(dict.fromkeys(r.metric for r in records if r.task == task))
    preferred = HEADLINE_METRICS.get(task)
    if preferred in metrics:
        metrics.remove(preferred)
        metrics.insert(0, preferred)
    return metrics


def headline(records: Sequence[ResultRecord], task: str) -> Headline:
    """The task's headline metric per configuration.

    The ``avg`` row when the task wrote one, else its only data set, else the plain mean over
    the data sets of the configurations that have all of them.
    """
    metrics = task_metrics(records, task)
    metric = metrics[0] if metrics else HEADLINE_METRICS.get(task, "")
    chosen = [r for r in records if r.task == task and r.metric == metric]
    datasets = list(dict.fromkeys(r.dataset for r in chosen))
    if "avg" in datasets or len(datasets) == 1:
        label = "avg" if "avg" in datasets else datasets[0]
        scores = {config_key(r): r.score for r in chosen if r.dataset == label}
        return Headline(task, metric, label, scores)
    per_config: dict[ConfigKey, dict[str, float]] = {}
    for r in chosen:
        per_config.setdefault(config_key(r), {})[r.dataset] = r.score
    scores = {
        key: float(np.mean(list(values.values())))
        for key, values in per_config.items()
        if len(values) == len(datasets)
    }
    return Headline(task, metric, f"mean of {len(datasets)} data sets", scores)


def sort_configs(keys: Sequence[ConfigKey]) -> list[ConfigKey]:
    """Model and method in order of appearance, then layer, precision (float32, int8, binary,
    then sized codes: :func:`~demitasse.compress.precision_sort_key`), dimension (widest
    first)."""
    models = list(dict.fromkeys(k[0] for k in keys))
    methods = list(dict.fromkeys(k[2] for k in keys))

    def order(key: ConfigKey) -> tuple[object, ...]:
        model, layer, method, dim, precision = key
        rank = precision_sort_key(precision)
        return (models.index(model), layer is None, layer or 0, methods.index(method), rank, -dim)

    return sorted(dict.fromkeys(keys), key=order)


def task_table(
    records: Sequence[ResultRecord],
    task: str,
    metric: str | None = None,
    *,
    show_model: bool = True,
    sort: bool = True,
) -> Table:
    """One row per configuration, one column per data set of ``metric``, then the average.

    ``metric`` defaults to the task's headline metric. When the task wrote no ``avg`` row but
    several data sets, a ``mean`` column is added (blank where a data set is missing).
    """
    metric = metric or (task_metrics(records, task) or [""])[0]
    chosen = [r for r in records if r.task == task and r.metric == metric]
    datasets = list(dict.fromkeys(r.dataset for r in chosen if r.dataset != "avg"))
    score = {(*config_key(r), r.dataset): r.score for r in chosen}
    size = {config_key(r): r.bytes_per_vector for r in chosen}
    keys = list(dict.fromkeys(config_key(r) for r in chosen))
    if sort:
        keys = sort_configs(keys)
    average = None
    if any(r.dataset == "avg" for r in chosen):
        average = "avg"
    elif len(datasets) > 1:
        average = "mean"
    header = ["layer", "method", "precision", "dim", "bytes", *datasets]
    if average:
        header.append(average)
    if show_model:
        header.insert(0, "model")
    rows = []
    for key in keys:
        values = [score.get((*key, d)) for d in datasets]
        if average == "avg":
            values.append(score.get((*key, "avg")))
        elif average == "mean":
            present = [v for v in values if v is not None]
            values.append(None if len(present) < len(values) else float(np.mean(present)))
        rows.append(_config_cells(key, size[key], show_model) + tuple(values))
    return Table(tuple(header), tuple(rows))


def efficiency_tables(
    records: Sequence[ResultRecord], *, show_model: bool = True
) -> dict[str, Table]:
    """Per efficiency data set (``encode``, ``transform``, ``search``, …) a table of its metrics."""
    efficiency = [r for r in records if r.task == EFFICIENCY]
    tables = {}
    for dataset in dict.fromkeys(r.dataset for r in efficiency):
        chosen = [r for r in efficiency if r.dataset == dataset]
        metrics = list(dict.fromkeys(r.metric for r in chosen))
        value = {(*config_key(r), r.metric): r.score for r in chosen}
        size = {config_key(r): r.bytes_per_vector for r in chosen}
        keys = sort_configs([config_key(r) for r in chosen])
        header = ["layer", "method", "precision", "dim", "bytes", *metrics]
        rows = [
            _config_cells(key, size[key], show_model) + tuple(value.get((*key, m)) for m in metrics)
            for key in keys
        ]
        tables[dataset] = Table(tuple(["model", *header] if show_model else header), tuple(rows))
    return tables


def _config_cells(key: ConfigKey, size: int | None, show_model: bool) -> tuple[object, ...]:
    model, layer, method, dim, precision = key
    cells = (layer, method, precision, dim, size)
    return (model, *cells) if show_model else cells


def sts_table(records: Sequence[ResultRecord]) -> str:
    """One row per layer × method × precision × dim, one column per data set, then the average."""
    return task_table(records, "sts", sort=False).markdown()
