"""Tables and plots rendered from result records."""

from demitasse.report.plots import plot_sts_vs_dim
from demitasse.report.tables import markdown_table, sts_table

__all__ = ["markdown_table", "plot_sts_vs_dim", "sts_table"]
