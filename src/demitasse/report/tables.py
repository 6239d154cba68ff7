"""Plain-text and Markdown tables of STS result records."""

from __future__ import annotations

from collections.abc import Sequence

from demitasse.evaluation.records import ResultRecord


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table whose columns line up in a terminal too."""
    cells = [[str(h) for h in header]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return "" if value is None else str(value)


def sts_table(records: Sequence[ResultRecord]) -> str:
    """One row per layer × method × precision × dim, one column per data set, then the average."""
    sts = [r for r in records if r.task == "sts"]
    datasets = list(dict.fromkeys(r.dataset for r in sts if r.dataset != "avg"))
    if any(r.dataset == "avg" for r in sts):
        datasets.append("avg")
    keys = list(dict.fromkeys((r.model, r.layer, r.method, r.precision, r.dim) for r in sts))
    score = {(r.model, r.layer, r.method, r.precision, r.dim, r.dataset): r.score for r in sts}
    size = {(r.model, r.layer, r.method, r.precision, r.dim): r.bytes_per_vector for r in sts}
    header = ["model", "layer", "method", "precision", "dim", "bytes", *datasets]
    rows = [[*key, size[key], *(score.get((*key, d)) for d in datasets)] for key in keys]
    return markdown_table(header, rows)
