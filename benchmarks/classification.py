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

from _common import run_posthoc_grid
from demitasse.data.senteval_classification import ClassificationSet, LabeledSplits
from demitasse.evaluation import (
    machine_description,
    write_records,
)
from demitasse.evaluation.classification import ClassificationTask
from demitasse.evaluation.tasks import EmbeddedTexts, Score, Task
from demitasse.report import markdown_table
from demitasse.report.plots import plot_quality_vs_dim
from demitasse.report.results_file import update_section
from demitasse.report.tables import task_table

HERE = Path(__file__).resolve().parent
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
    body = "\n".join(
        [
            "## SentEval classification under compression (`classification`)",
            "",
            f"Command: `{command}`  ",
            f"Machine: {machine_description()}; wall time {elapsed:.0f} s "
            f"(embedding cache warm); probe time per configuration "
            f"{probe_seconds[len(probe_seconds) // 2]:.1f} s median, "
            f"{probe_seconds[-1]:.1f} s max.  ",
            f"Model {encoder.name}, last layer, {encoder.pooling} pooling; PCA fitted on the "
            "STS-B train sentences that are in no STS test or dev split (never on the "
            "classification sets); float32.",
            "",
            "Protocol (SentEval's, `demitasse.evaluation.classification`): logistic regression "
            "(lbfgs) on features standardised on the training rows, L2 strength C from "
            "2^-12 … 2^0 (×4 steps; SentEval's 2^-2 … 2^4 is for unstandardised unit vectors); "
            "MR and CR stratified 10-fold cross-validation, C chosen by an inner 5-fold "
            "cross-validation of each training fold; SST-2 C chosen on dev, accuracy on test; "
            "TREC and MRPC C chosen by 5-fold cross-validation on train, refitted on all of "
            "train, accuracy on test. MRPC features [u, v, |u − v|, u ⊙ v]. Accuracy ×100.",
            "",
            markdown_table(
                ["set", "examples"],
                [[name, _size(dataset)] for name, dataset in sizes.items()],
            ),
            "",
            table,
        ]
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
        body += f"\n\nPlot: `{shown}`."
        if args.output is None:
            update_section(HERE / "RESULTS.md", NAME, body)
    print(body)
    return 0


def _size(dataset: ClassificationSet) -> str:
    if not isinstance(dataset, LabeledSplits):
        return str(len(dataset))
    splits = [dataset.train, dataset.dev, dataset.test]
    return " / ".join(str(len(split)) for split in splits if split is not None)


if __name__ == "__main__":
    sys.exit(main())
