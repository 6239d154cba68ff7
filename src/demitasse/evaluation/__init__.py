"""The evaluation harness: tasks score vectors and emit result records."""

from demitasse.evaluation.grid import CompressorSpec, evaluate_grid, parse_compressor_specs
from demitasse.evaluation.records import (
    ResultRecord,
    machine_description,
    read_records,
    write_records,
)
from demitasse.evaluation.sts import spearman_x100
from demitasse.evaluation.tasks import EmbeddedTexts, Score, STSTask, Task, with_average

__all__ = [
    "CompressorSpec",
    "EmbeddedTexts",
    "ResultRecord",
    "STSTask",
    "Score",
    "Task",
    "evaluate_grid",
    "machine_description",
    "parse_compressor_specs",
    "read_records",
    "spearman_x100",
    "with_average",
    "write_records",
]
