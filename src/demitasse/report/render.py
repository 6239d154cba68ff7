"""The full report of a set of result records: one Markdown file and one self-contained HTML page.

Both are rendered from the same list of blocks (headings, text, tables, figures), so they hold
the same content; the HTML page embeds its figures as data URIs and needs nothing else.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demitasse.errors import DataError
from demitasse.evaluation.records import ResultRecord
from demitasse.io import atomic_directory
from demitasse.report.plots import (
    Colours,
    Point,
    encode_points,
    method_colours,
    pareto_front,
    plot_layer_heatmap,
    plot_quality_vs_bytes,
    plot_quality_vs_dim,
    plot_quality_vs_encode_speed,
    plot_quality_vs_search_speed,
    quality_label,
    search_speeds,
    speed_points,
    vector_sizes,
)
from demitasse.report.tables import (
    EFFICIENCY,
    Headline,
    Table,
    config_key,
    efficiency_tables,
    format_cell,
    format_measure,
    headline,
    quality_tasks,
    task_metrics,
    task_table,
)

#: The marker kind of a report folder: what a later report may replace.
REPORT_KIND = "report"
TASK_TITLES = {
    "sts": "Semantic textual similarity",
    "classification": "Classification",
    "retrieval": "Retrieval",
    "clustering": "Clustering",
    "translation": "Translation (bitext mining)",
}


@dataclass(frozen=True)
class ReportPaths:
    """Where :func:`render_report` wrote the report."""

    markdown: Path
    html: Path
    figures: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class TableBlock:
    table: Table


@dataclass(frozen=True)
class FigureBlock:
    path: Path
    caption: str


Block = Heading | Text | TableBlock | FigureBlock


def render_report(
    records: Sequence[ResultRecord], out_dir: str | Path, title: str = "demitasse report"
) -> ReportPaths:
    """Write ``report.md``, ``report.html`` and ``figures/*.png`` under ``out_dir``."""
    records = list(records)
    if not records:
        raise DataError("no result records to report")
    out_dir = Path(out_dir)
    # The report is one set: its figures, Markdown and HTML replace the old ones together.
    with atomic_directory(out_dir, kind=REPORT_KIND) as tmp:
        blocks = build_blocks(records, tmp / "figures", title)
        (tmp / "report.md").write_text(to_markdown(blocks, tmp), encoding="utf-8")
        (tmp / "report.html").write_text(to_html(blocks, title), encoding="utf-8")
        figures = tuple(
            out_dir / b.path.relative_to(tmp) for b in blocks if isinstance(b, FigureBlock)
        )
    return ReportPaths(out_dir / "report.md", out_dir / "report.html", figures)


def build_blocks(records: Sequence[ResultRecord], figures_dir: Path, title: str) -> list[Block]:
    """The report's content, drawing its figures into ``figures_dir`` on the way."""
    models = list(dict.fromkeys(r.model for r in records))
    several_models = len(models) > 1
    colours = method_colours(r.method for r in records)
    blocks: list[Block] = [Heading(1, title), *_summary(records, models)]
    for task in quality_tasks(records):
        blocks.append(Heading(2, TASK_TITLES.get(task, task)))
        for model in models:
            own = [r for r in records if r.model == model]
            if any(r.task == task for r in own):
                stem = _slug(f"{model}-{task}" if several_models else task)
                heading = model if several_models else ""
                blocks += _task_figures(own, task, figures_dir, stem, colours, heading)
        for metric in task_metrics(records, task):
            blocks.append(Heading(3, f"{metric} per data set"))
            blocks.append(TableBlock(task_table(records, task, metric, show_model=several_models)))
    tables = efficiency_tables(records, show_model=several_models)
    if tables:
        blocks.append(Heading(2, "Efficiency"))
        for dataset, table in tables.items():
            blocks += [Heading(3, dataset), TableBlock(table)]
    return blocks


def _summary(records: Sequence[ResultRecord], models: Sequence[str]) -> list[Block]:
    tasks = [*quality_tasks(records)]
    if any(r.task == EFFICIENCY for r in records):
        tasks.append(EFFICIENCY)
    machines = sorted({r.machine for r in records if r.machine})
    fit_data = sorted({r.fit_data for r in records if r.fit_data})
    lines = [
        f"{len(records)} result records. Model{'s' if len(models) > 1 else ''}: "
        f"{', '.join(models)}. Tasks: {', '.join(tasks)}."
    ]
    if tasks != [EFFICIENCY]:
        lines.append(
            "In the figures colour marks the compressor, line style (or marker) the precision. "
            "Quality scores are ×100 where the papers print them so."
        )
    if fit_data:
        lines.append(f"Compressors and quantisers fitted on: {', '.join(fit_data)}.")
    if machines:
        lines.append(f"Measured on: {'; '.join(machines)}.")
    return [Text(line) for line in lines]


def _task_figures(
    records: Sequence[ResultRecord],
    task: str,
    figures_dir: Path,
    stem: str,
    colours: Colours,
    model_heading: str,
) -> list[Block]:
    """Every figure the records of one model support for ``task``, with its captions."""
    best = headline(records, task)
    if not best.scores:
        return []
    blocks: list[Block] = [Heading(3, model_heading)] if model_heading else []
    blocks += _quality_figures(records, best, figures_dir, stem, colours, model_heading)
    blocks += _speed_figures(records, best, figures_dir, stem, colours, model_heading)
    return blocks


def _quality_figures(
    records: Sequence[ResultRecord],
    best: Headline,
    figures_dir: Path,
    stem: str,
    colours: Colours,
    title: str,
) -> list[Block]:
    """Quality against dimensions, against bytes per vector, and by layer where there are
    several."""
    task, what = best.task, quality_label(best)
    blocks: list[Block] = []
    blocks.append(
        FigureBlock(
            plot_quality_vs_dim(
                records,
                figures_dir / f"{stem}-vs-dim.png",
                task,
                title=title,
                colours=colours,
            ),
            f"{what} against dimensions, a panel per layer.",
        )
    )
    if vector_sizes(records, best):  # not any record's: the headline configurations
        path = plot_quality_vs_bytes(
            records,
            figures_dir / f"{stem}-vs-bytes.png",
            task,
            title=title,
            colours=colours,
        )
        blocks.append(FigureBlock(path, f"{what} against bytes per stored vector."))
    if len({k[1] for k in best.scores if k[1] is not None}) > 1:
        path = plot_layer_heatmap(
            records, figures_dir / f"{stem}-layer-heatmap.png", task, title=title
        )
        blocks.append(FigureBlock(path, f"{what} by layer and dimension."))
    return blocks


def _speed_figures(
    records: Sequence[ResultRecord],
    best: Headline,
    figures_dir: Path,
    stem: str,
    colours: Colours,
    title: str,
) -> list[Block]:
    """Quality against each search benchmark's speed and against encoding speed, where the
    records measure them, each with its Pareto front's table."""
    task, what = best.task, quality_label(best)
    blocks: list[Block] = []
    for dataset, speeds in search_speeds(records).items():
        points = speed_points(records, task, speeds)
        if points:
            path = plot_quality_vs_search_speed(
                records,
                figures_dir / f"{stem}-vs-{_slug(dataset)}-speed.png",
                task,
                dataset=dataset,
                title=title,
                colours=colours,
            )
            caption = f"{what} against {dataset} queries per second; the Pareto front is ringed."
            blocks += [FigureBlock(path, caption), *_front_table(records, points, "queries/s")]
    points = encode_points(records, task)
    if len({p.key[1] for p in points}) > 1:
        path = plot_quality_vs_encode_speed(
            records,
            figures_dir / f"{stem}-vs-encode-speed.png",
            task,
            title=title,
            colours=colours,
        )
        caption = f"{what} against the encoding speed of each layer cut; Pareto front ringed."
        blocks += [FigureBlock(path, caption), *_front_table(records, points, "sentences/s")]
    return blocks


def _front_table(
    records: Sequence[ResultRecord], points: Sequence[Point], unit: str
) -> list[Block]:
    size = {config_key(r): r.bytes_per_vector for r in records}
    rows = tuple(
        (
            p.key[1],
            p.key[2],
            p.key[4],
            p.key[3],
            size.get(p.key),
            p.quality,
            format_measure(p.speed),
        )
        for p in pareto_front(points)
    )
    header = ("layer", "method", "precision", "dim", "bytes", "quality", unit)
    return [
        Text(f"Configurations on the Pareto front, fastest first ({unit}):"),
        TableBlock(Table(header, rows)),
    ]


def to_markdown(blocks: Sequence[Block], base_dir: Path) -> str:
    """Markdown with figures referenced by paths relative to ``base_dir``."""
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Text):
            parts.append(block.text)
        elif isinstance(block, TableBlock):
            parts.append(block.table.markdown())
        else:
            relative = block.path.relative_to(base_dir).as_posix()
            parts.append(f"![{block.caption}]({relative})\n\n*{block.caption}*")
    return "\n\n".join(parts) + "\n"


def to_html(blocks: Sequence[Block], title: str) -> str:
    """One self-contained page: inline CSS, figures as base64 PNG data URIs, no scripts."""
    sections = {
        i: block
        for i, block in enumerate(blocks)
        if isinstance(block, Heading) and block.level == 2
    }
    anchors = {i: _slug(heading.text).lower() for i, heading in sections.items()}
    contents = _contents([(anchors[i], heading.text) for i, heading in sections.items()])
    body = []
    for i, block in enumerate(blocks):
        if isinstance(block, Heading):
            anchor = f' id="{anchors[i]}"' if i in anchors else ""
            body.append(f"<h{block.level}{anchor}>{html.escape(block.text)}</h{block.level}>")
            if block.level == 1 and len(anchors) > 1:
                body.append(contents)
        elif isinstance(block, Text):
            body.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, TableBlock):
            body.append(_html_table(block.table))
        else:
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            caption = html.escape(block.caption)
            body.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
                f"<figcaption>{caption}</figcaption></figure>"
            )
    return HTML_PAGE.format(title=html.escape(title), style=STYLE, body="\n".join(body))


def _contents(sections: Sequence[tuple[str, str]]) -> str:
    items = "".join(f'<li><a href="#{a}">{html.escape(text)}</a></li>' for a, text in sections)
    return f'<nav><ul class="contents">{items}</ul></nav>'


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    rows = []
    for row in table.rows:
        cells = "".join(
            f'<td class="{"num" if _is_number(v) else "text"}">{html.escape(format_cell(v))}</td>'
            for v in row
        )
        rows.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _is_number(value: object) -> bool:
    if isinstance(value, str):
        return NUMBER.fullmatch(value) is not None
    return isinstance(value, int | float)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-") or "figure"


NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?")
HTML_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<main>
{body}
</main>
</body>
</html>
"""

STYLE = """
:root { color-scheme: light; }
body { margin: 0; background: #f6f7f9; color: #1d2430;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 32px 64px; background: #fff;
  box-shadow: 0 0 0 1px #e3e6eb; }
h1 { font-size: 28px; margin: 8px 0 12px; }
h2 { font-size: 22px; margin: 40px 0 8px; padding-top: 12px; border-top: 2px solid #e3e6eb; }
h3 { font-size: 17px; margin: 24px 0 8px; color: #3a4556; }
p { margin: 6px 0; color: #3a4556; }
nav ul.contents { display: flex; flex-wrap: wrap; gap: 6px 18px; padding: 0; list-style: none; }
nav a { color: #2457c5; text-decoration: none; }
nav a:hover { text-decoration: underline; }
figure { margin: 16px 0 24px; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #e3e6eb; }
figcaption { font-size: 13px; color: #5b6678; margin-top: 4px; }
.table-wrap { width: fit-content; max-width: 100%; max-height: 640px; overflow: auto;
  margin: 8px 0 16px; border: 1px solid #e3e6eb; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eef0f3; white-space: nowrap; }
th { position: sticky; top: 0; background: #eef1f6; text-align: center; }
td.num { text-align: right; }
td.text { text-align: left; color: #3a4556; }
tbody tr:nth-child(even) { background: #fafbfc; }
tbody tr:hover { background: #eef4ff; }
"""
