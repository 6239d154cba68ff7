"""SentEval classification accuracy of compressed all-MiniLM-L6-v2 embeddings.

MR, CR, SST-2, TREC and MRPC with a logistic-regression probe (SentEval protocol, see
``demitasse.evaluation.classification``) on the last layer: the full 384 dimensions, and
truncation and PCA to 128 / 64 / 32 dimensions, float32. PCA is fitted on STS-B train
sentences only, never on the classification sets.

    python benchmarks/classification.py --data-dir ../shared/data
    python benchmarks/classification.py --data-dir ../shared/data --limit 300   # smoke run
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import HERE, RESULTS_MD, posthoc_facts, run_posthoc_grid, template
from demitasse.data.senteval_classification import ClassificationSet, LabeledSplits
from demitasse.evaluation import (
    write_records,
)
from demitasse.evaluation.classification import ClassificationTask
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task
from demitasse.report import markdown_table
from demitasse.report.plots import plot_quality_vs_dim
from demitasse.report.tables import task_table
from lab.results_file import update_section
from lab.templates import join_blocks

NAME = "classification"


class TimedTask(Task):
    """Delegates to a task and keeps the wall time of each ``evaluate`` call."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.name = task.name  # type: ignore[misc]
        self.seconds: list[float] = []

    def texts(self) -> list[str]:
        return self.task.texts()

    def evaluate(self, embedded: EmbeddedTexts) -> list[Score]:
        started = time.perf_counter()
        scores = self.task.evaluate(embedded)
        self.seconds.append(time.perf_counter() - started)
        return scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--dims", default="128,64,32")
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="keep at most N examples per split (smoke run; writes results only with --output)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="results folder (default: benchmarks/results)"
    )
    args = parser.parse_args()
    output = args.output or (None if args.limit else HERE / "results")

    classification = ClassificationTask(args.data_dir, limit=args.limit)
    task = TimedTask(classification)
    encoder, records, elapsed = run_posthoc_grid(
        [task],
        model=args.model,
        data_dir=args.data_dir,
        compressors="none,truncate,pca",
        dims=[int(d) for d in args.dims.split(",")],
        precisions=["float32"],
    )
    probe_seconds = sorted(task.seconds)

    command = "python benchmarks/classification.py --data-dir ../shared/data"
    if args.limit:
        command += f" --limit {args.limit}"
    table = task_table(records, NAME).markdown()
    sizes = {s.name: s for s in classification.sets}
    prose = template(NAME)
    body = prose.fill(
        command=command,
        **posthoc_facts(encoder, elapsed),
        probe_median=f"{probe_seconds[len(probe_seconds) // 2]:.1f}",
        probe_max=f"{probe_seconds[-1]:.1f}",
        sizes_table=markdown_table(
            ["set", "examples"], [[name, _size(dataset)] for name, dataset in sizes.items()]
        ),
        table=table,
    )
    if output is not None:
        write_records(output / f"{NAME}.json", records)
        plot = plot_quality_vs_dim(
            records,
            output / f"{NAME}.png",
            NAME,
            title=f"{encoder.name}: SentEval classification",
        )
        shown = plot.relative_to(HERE.parent) if plot.is_relative_to(HERE.parent) else plot
        body = join_blocks(body, prose.fill("plot", plot=shown))
        if args.output is None:
            update_section(RESULTS_MD, NAME, body)
    print(body)
    return 0


def _size(dataset: ClassificationSet) -> str:
    if not isinstance(dataset, LabeledSplits):
        return str(len(dataset))
    splits = [dataset.train, dataset.dev, dataset.test]
    return " / ".join(str(len(split)) for split in splits if split is not None)


if __name__ == "__main__":
    sys.exit(main())
