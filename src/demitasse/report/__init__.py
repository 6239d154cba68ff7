"""Tables, plots and the Markdown + HTML report, rendered from result records."""

from demitasse.report.plots import plot_quality_vs_dim, plot_sts_vs_dim
from demitasse.report.render import ReportPaths, render_report
from demitasse.report.tables import markdown_table, sts_table, task_table

__all__ = [
    "ReportPaths",
    "markdown_table",
    "plot_quality_vs_dim",
    "plot_sts_vs_dim",
    "render_report",
    "sts_table",
    "task_table",
]
