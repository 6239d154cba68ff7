"""STS table for post-hoc compression baselines on all-MiniLM-L6-v2.

Truncation, PCA, PCA+ABTT, whitened PCA and Gaussian random projection × dims 384..8 ×
float32/int8/binary on STS12-16, STS-B and SICK-R (test splits). Compressors and int8 ranges
are fitted on the STS-B train sentences that are in no STS test or dev split. The uncompressed
row reproduces the published figures of the model.

    python benchmarks/sts_compression.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import sys

from _common import HERE, RESULTS_MD, posthoc_facts, run_posthoc_grid, template
from demitasse.data import load_sts_suite
from demitasse.evaluation import (
    STSTask,
    write_records,
)
from demitasse.report import markdown_table, plot_sts_vs_dim, sts_table
from lab.templates import fill_section

PUBLISHED = {  # all-MiniLM-L6-v2, mean pooling, cosine, Spearman ×100 (MTEB / SentEval "all")
    "STS12": 72.37, "STS13": 80.60, "STS14": 75.59, "STS15": 85.39, "STS16": 78.99,
    "STS-B": 82.03, "SICK-R": 77.15, "avg": 78.87,
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--dims", default="384,256,128,64,32,16,8")
    args = parser.parse_args()

    encoder, records, elapsed = run_posthoc_grid(
        [STSTask(load_sts_suite(args.data_dir))],
        model=args.model,
        data_dir=args.data_dir,
        compressors="none,truncate,pca,pca-abtt,pca-whiten,random",
        dims=[int(d) for d in args.dims.split(",")],
        precisions=["float32", "int8", "binary"],
    )
    write_records(HERE / "results" / "sts_compression.json", records)
    plot = plot_sts_vs_dim(
        [r for r in records if r.precision != "binary" or r.method == "pca"],
        HERE / "results" / "sts_compression.png",
        title=f"{encoder.name}: post-hoc compression on 7 STS sets",
    )

    reproduction = [r for r in records if r.method == "none" and r.precision == "float32"]
    check_rows = [
        [
            r.dataset,
            round(r.score, 2),
            PUBLISHED[r.dataset],
            round(r.score - PUBLISHED[r.dataset], 2),
        ]
        for r in reproduction
    ]
    body = fill_section(
        RESULTS_MD,
        "sts_compression",
        template("sts_compression"),
        **posthoc_facts(encoder, elapsed),
        reproduction_table=markdown_table(
            ["dataset", "ours", "published", "difference"], check_rows
        ),
        table=sts_table(records),
        plot=plot.name,
    )
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
