"""BEIR SciFact retrieval under post-hoc compression of all-MiniLM-L6-v2.

Uncompressed (384 dims) and truncation / PCA at 256, 128, 64, 32 dims × float32/int8/binary,
exact faiss search (cosine; binary: Hamming), nDCG@10, Recall@100 and MRR@10 ×100 on the test
split. Compressors and int8 ranges are fitted on the STS-B train sentences that are in no STS
test or dev split. The uncompressed row reproduces the published nDCG@10 of the model.

    python benchmarks/retrieval.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from _common import HERE, RESULTS_MD, posthoc_facts, run_posthoc_grid, template
from demitasse.data import resolve_data_dir
from demitasse.data.beir import load_beir
from demitasse.evaluation import (
    ResultRecord,
    write_records,
)
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.report import markdown_table
from demitasse.report.plots import save_figure
from lab.templates import fill_section

METRICS = ("ndcg@10", "recall@100", "mrr@10")
PUBLISHED_NDCG10 = 64.51  # all-MiniLM-L6-v2 on SciFact test (MTEB), cosine, exact search


def retrieval_table(records: Sequence[ResultRecord]) -> str:
    """One row per method × precision × dim, one column per metric."""
    keys = list(dict.fromkeys((r.method, r.precision, r.dim) for r in records))
    score = {(r.method, r.precision, r.dim, r.metric): r.score for r in records}
    size = {(r.method, r.precision, r.dim): r.bytes_per_vector for r in records}
    rows = [[*key, size[key], *(score.get((*key, m)) for m in METRICS)] for key in keys]
    return markdown_table(["method", "precision", "dim", "bytes", *METRICS], rows)


def plot_retrieval(records: Sequence[ResultRecord], path: Path, title: str) -> Path:
    """Each metric against dimension: one line per compressor × precision."""
    fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 4.2), squeeze=False)
    methods = list(dict.fromkeys(r.method for r in records))
    colours = plt.get_cmap("tab10").colors
    for ax, metric in zip(axes[0], METRICS, strict=True):
        chosen = [r for r in records if r.metric == metric]
        for method, precision in dict.fromkeys((r.method, r.precision) for r in chosen):
            points = sorted(
                (r.dim, r.score) for r in chosen if r.method == method and r.precision == precision
            )
            xs, ys = zip(*points, strict=True)
            ax.plot(
                xs,
                ys,
                {"float32": "-", "int8": "--", "binary": ":"}.get(precision, "-"),
                color=colours[methods.index(method) % len(colours)],
                marker="o" if method != "none" else "*",
                markersize=4 if method != "none" else 9,
                label=f"{method} ({precision})",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("dimensions")
        ax.set_ylabel(f"{metric} ×100")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--dims", default="256,128,64,32")
    args = parser.parse_args()

    scifact = load_beir(resolve_data_dir(args.data_dir) / "beir" / "scifact", split="test")
    encoder, records, elapsed = run_posthoc_grid(
        [RetrievalTask(scifact)],
        model=args.model,
        data_dir=args.data_dir,
        compressors="none,truncate,pca",
        dims=[int(d) for d in args.dims.split(",")],
        precisions=["float32", "int8", "binary"],
    )
    write_records(HERE / "results" / "retrieval.json", records)
    plot = plot_retrieval(
        records,
        HERE / "results" / "retrieval.png",
        title=f"{encoder.name}: post-hoc compression on BEIR SciFact (test)",
    )
    ours = next(
        r.score
        for r in records
        if r.method == "none" and r.precision == "float32" and r.metric == "ndcg@10"
    )
    check = [
        "nDCG@10, uncompressed float32",
        f"{ours:.3f}",
        f"{PUBLISHED_NDCG10:.2f}",
        f"{ours - PUBLISHED_NDCG10:+.3f}",
    ]
    body = fill_section(
        RESULTS_MD,
        "retrieval",
        template("retrieval"),
        **posthoc_facts(encoder, elapsed),
        n_queries=len(scifact.query_ids),
        n_documents=len(scifact.corpus_ids),
        check_table=markdown_table(["check", "ours", "published", "difference"], [check]),
        table=retrieval_table(records),
        plot=plot.name,
    )
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
