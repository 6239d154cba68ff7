"""The evaluation harness: tasks score vectors and emit result records."""

from demitasse.evaluation.grid import CompressorSpec, evaluate_sts_grid, parse_compressor_specs
from demitasse.evaluation.records import (
    ResultRecord,
    machine_description,
    read_records,
    write_records,
)
from demitasse.evaluation.sts import spearman_x100

__all__ = [
    "CompressorSpec",
    "ResultRecord",
    "evaluate_sts_grid",
    "machine_description",
    "parse_compressor_specs",
    "read_records",
    "spearman_x100",
    "write_records",
]
