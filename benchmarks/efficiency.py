"""Measured efficiency of all-MiniLM-L6-v2: encoding per layer cut, compression, exact search.

* encode throughput (sentences/s) for every layer cut on a fixed sample of STS sentences
  (STS-B test, topped up from the other STS test sets when --n-texts exceeds it), with an
  encoder that never reads the embedding cache;
* transform throughput (vectors/s) of truncation / PCA / random projection and of the learned
  compressors (Matryoshka-Adaptor, SMEC, MCR² head; fitted for one epoch, since their cost
  does not depend on their weights) at 256/128/64/32, fitted and timed on the STS-B train
  sentences' embeddings;
* exact faiss search over the SciFact corpus with its test queries: per-query latency p50/p99,
  batch queries/s and index size for 384/128/32 dims × float32/int8/binary (truncation).

Every figure is the best of --repeats runs after a warm-up run. The compressors, widths and
precisions: grids/efficiency.toml.

    python benchmarks/efficiency.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from _common import HERE, RESULTS_MD, grid, log, template
from demitasse.cli.specs import parse_compressor_specs
from demitasse.compress import Compressor, make_compressor
from demitasse.data import load_sts_suite, load_stsb, resolve_data_dir
from demitasse.data.beir import load_beir
from demitasse.evaluation import (
    ResultRecord,
    evaluate_grid,
    read_records,
    write_records,
)
from demitasse.evaluation.efficiency import (
    EfficiencyTask,
    efficiency_context,
    measure_encode_throughput,
    measure_transform_throughput,
)
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import save_figure
from lab.results_file import update_section
from lab.templates import join_blocks

PARTS = ("encode", "transform", "search")


@dataclass(frozen=True)
class Grid:
    transform_dims: list[int]
    search_dims: list[int]
    precisions: tuple[str, ...]
    baselines: dict[str, dict[str, Any]]
    learned_for_timing: dict[str, dict[str, Any]]


GRID = grid("efficiency", Grid)
PROSE = template("efficiency")
PRECISIONS = GRID.precisions


def sample_sentences(n: int, data_dir: str | None, seed: int = 0) -> list[str]:
    """``n`` unique STS sentences: STS-B test first, then the other STS test sets, shuffled."""
    suite = load_sts_suite(data_dir)
    stsb = suite.pop("STS-B").texts()
    rest = [t for t in dict.fromkeys(t for p in suite.values() for t in p.texts()) if t]
    rest = sorted(set(rest) - set(stsb))
    rng = np.random.default_rng(seed)
    pool = [stsb[i] for i in rng.permutation(len(stsb))]
    pool += [rest[i] for i in rng.permutation(len(rest))]
    if n > len(pool):
        sys.exit(f"--n-texts {n} exceeds the {len(pool)} unique STS test sentences")
    return pool[:n]


def encode_part(args: argparse.Namespace) -> list:
    texts = sample_sentences(args.n_texts, args.data_dir)
    encoder = load_encoder(args.model, cache=False, show_progress=False)
    return measure_encode_throughput(
        encoder,
        texts,
        repeats=args.repeats,
        batch_size=args.batch_size,
    )


def transform_part(args: argparse.Namespace, fit_texts: list[str]) -> list:
    encoder = load_encoder(args.model)  # cached: these vectors are inputs, not timed
    vectors = encoder.encode(fit_texts)
    largest = max(args.transform_dims)

    def timed(compressor: Compressor, label: str, dims: list[int]) -> list:
        return measure_transform_throughput(
            compressor,
            vectors,
            dims,
            label=label,
            model=encoder.name,
            layer=encoder.num_layers,
            repeats=args.repeats,
        )

    records = []
    for label, params in GRID.baselines.items():
        compressor = make_compressor(label, dim=largest, **params)
        records += timed(compressor.fit(vectors, fit_data="stsb-train"), label, args.transform_dims)
        log(f"transform {label}: done")
    fit_data = "stsb-train (1 epoch, for timing)"
    for label, params in GRID.learned_for_timing.items():  # a head per width where not Matryoshka
        if make_compressor(label).matryoshka:
            compressor = make_compressor(label, dim=largest, **params)
            records += timed(compressor.fit(vectors, fit_data=fit_data), label, args.transform_dims)
        else:
            for dim in args.transform_dims:
                compressor = make_compressor(label, dim=dim, **params)
                records += timed(compressor.fit(vectors, fit_data=fit_data), label, [dim])
        log(f"transform {label}: done")
    return records


def search_part(args: argparse.Namespace, fit_texts: list[str]) -> list:
    scifact = load_beir(resolve_data_dir(args.data_dir) / "beir" / "scifact", split="test")
    task = EfficiencyTask(
        scifact.corpus_texts,
        scifact.query_texts,
        k=10,
        repeats=args.repeats,
        name=scifact.name,
        threads=args.faiss_threads or None,
    )
    return evaluate_grid(
        load_encoder(args.model),
        [task],
        specs=parse_compressor_specs("truncate"),
        dims=args.search_dims,
        precisions=PRECISIONS,
        fit_texts=fit_texts,
        fit_data="stsb-train",
    )


def part_of(record: ResultRecord) -> str:
    return record.dataset if record.dataset in ("encode", "transform") else "search"


def plot(records: list, path: Path, title: str) -> Path:
    """Encode sentences/s per layer, transform vectors/s per dim, search latency per config."""
    panels = [part for part in PARTS if any(part_of(r) == part for r in records)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, part in zip(axes[0], panels, strict=True):
        if part == "encode":
            rows = sorted((r.layer, r.score) for r in records if r.dataset == "encode")
            ax.bar([str(layer) for layer, _ in rows], [score for _, score in rows])
            ax.set_xlabel("layer cut (blocks run)")
            ax.set_ylabel("sentences / s")
            ax.set_title("encoding")
        elif part == "transform":
            methods = list(dict.fromkeys(r.method for r in records if r.dataset == "transform"))
            for method in methods:
                rows = sorted(
                    (r.dim, r.score)
                    for r in records
                    if r.dataset == "transform" and r.method == method
                )
                ax.plot(*zip(*rows, strict=True), marker="o", label=method)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("output dimensions")
            ax.set_ylabel("vectors / s")
            ax.set_title("compression (transform)")
            ax.legend(fontsize=8)
        else:
            lat = {
                (r.dim, r.precision, r.metric): r.score
                for r in records
                if r.metric.startswith("latency")
            }
            dims = sorted({d for d, _, _ in lat}, reverse=True)
            width = 0.8 / len(PRECISIONS)
            for i, precision in enumerate(PRECISIONS):
                xs = np.arange(len(dims)) + i * width
                p50 = [lat.get((d, precision, "latency_p50_ms"), np.nan) for d in dims]
                p99 = [lat.get((d, precision, "latency_p99_ms"), np.nan) for d in dims]
                ax.bar(xs, p50, width, label=f"{precision} p50")
                ax.scatter(xs, p99, marker="_", s=120, color="black")
            ax.set_xticks(np.arange(len(dims)) + width * (len(PRECISIONS) - 1) / 2)
            ax.set_xticklabels([str(d) for d in dims])
            ax.set_xlabel("dimensions (— = p99)")
            ax.set_yscale("log")
            ax.set_ylabel("ms per query (exact search, one at a time)")
            ax.set_title("search latency")
            ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def encode_table(records: list) -> str:
    rows = sorted((r for r in records if r.dataset == "encode"), key=lambda r: r.layer)
    full = rows[-1].score
    return markdown_table(
        ["layer cut", "sentences/s", "× full model", "best s", "median s"],
        [
            [
                r.layer,
                round(r.score),
                round(r.score / full, 2),
                round(r.extra["best_s"], 3),
                round(r.extra["median_s"], 3),
            ]
            for r in rows
        ],
    )


def transform_table(records: list) -> str:
    rows = [r for r in records if r.dataset == "transform"]
    return markdown_table(
        ["method", "dim", "vectors/s", "best ms", "median ms"],
        [
            [
                r.method,
                r.dim,
                f"{r.score:,.0f}",
                round(1000 * r.extra["best_s"], 2),
                round(1000 * r.extra["median_s"], 2),
            ]
            for r in rows
        ],
    )


def search_table(records: list) -> str:
    search = [r for r in records if r.metric == "index_bytes"]
    score = {(r.dim, r.precision, r.metric): r.score for r in records}
    rows = []
    for r in sorted(search, key=lambda r: (-r.dim, PRECISIONS.index(r.precision))):
        key = (r.dim, r.precision)
        rows.append(
            [
                r.dim,
                r.precision,
                r.bytes_per_vector,
                f"{score[(*key, 'index_bytes')]:,.0f}",
                f"{score[(*key, 'latency_p50_ms')]:.3f}",
                f"{score[(*key, 'latency_p99_ms')]:.3f}",
                f"{score[(*key, 'queries_per_s')]:,.0f}",
            ]
        )
    return markdown_table(
        ["dim", "precision", "bytes/vector", "index bytes", "p50 ms", "p99 ms", "queries/s"], rows
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--n-texts", type=int, default=2000, help="STS sentences to encode")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--faiss-threads",
        type=int,
        default=1,
        help="faiss threads while measuring search (0: faiss's default); one is robust on a "
        "shared machine, and a 5k-document flat search gains nothing from more",
    )
    parser.add_argument("--parts", default=",".join(PARTS), help="which of encode,transform,search")
    args = parser.parse_args()
    args.transform_dims = GRID.transform_dims
    args.search_dims = GRID.search_dims
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not args.parts or set(args.parts) - set(PARTS):
        parser.error(f"--parts must name some of {', '.join(PARTS)}")
    return args


def main() -> int:
    args = parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    started = time.perf_counter()
    context = efficiency_context()
    fit_texts = load_stsb("train", args.data_dir).texts()
    results = HERE / "results" / "efficiency.json"
    # Parts not run keep their records from the previous run, so one part can be redone.
    kept = (
        [r for r in read_records(results) if part_of(r) not in args.parts]
        if results.is_file()
        else []
    )
    measured = []
    if "encode" in args.parts:
        measured += encode_part(args)
    if "transform" in args.parts:
        measured += transform_part(args, fit_texts)
    if "search" in args.parts:
        measured += search_part(args, fit_texts)
    elapsed = time.perf_counter() - started
    records = sorted([*kept, *measured], key=lambda r: PARTS.index(part_of(r)))
    write_records(results, records)
    figure = plot(
        records, HERE / "results" / "efficiency.png", f"{args.model}: measured efficiency"
    )
    body = describe(records, context, kept=bool(kept), parts=args.parts, elapsed=elapsed)
    body = join_blocks(body, PROSE.fill("plot", plot=figure.name))
    update_section(RESULTS_MD, "efficiency", body)
    print(body)
    return 0


def describe(
    records: list[ResultRecord],
    context: dict[str, Any],
    *,
    kept: bool,
    parts: list[str],
    elapsed: float,
) -> str:
    """The section but its plot line: the run, then a subsection per part present."""
    present = {part_of(r) for r in records}
    blas = ", ".join(
        f"{p['internal_api']} {p['version'] or ''} ({p['num_threads']} threads)".replace("  ", " ")
        for p in context.get("thread_pools") or []
        if p["user_api"] == "blas"
    )
    # A line of the opening paragraph, which ends without a Markdown line break.
    kept_line = "\n" + PROSE.fill("kept", parts=", ".join(sorted(present - set(parts))))
    head = PROSE.fill(
        command=" ".join(["python", "benchmarks/efficiency.py", *sys.argv[1:]]),
        machine=context["machine"], torch=context["torch"],
        torch_threads=context["torch_threads"], faiss=context["faiss"], numpy=context["numpy"],
        blas=blas or "unknown", load=f"{context['load_average'][0]:.1f}",
        wall_seconds=f"{elapsed:.0f}", kept=kept_line if kept else "",
    )  # fmt: skip
    blocks = [head]
    if "encode" in present:
        first = next(r.extra for r in records if r.dataset == "encode")
        blocks.append(PROSE.fill("encode", n_texts=f"{first['n_texts']:,}",
                                 batch_size=first["batch_size"],
                                 torch_threads=first["torch_threads"],
                                 table=encode_table(records)))  # fmt: skip
    if "transform" in present:
        n = next(r.extra["n_vectors"] for r in records if r.dataset == "transform")
        blocks.append(PROSE.fill("transform", n_vectors=f"{n:,}", table=transform_table(records)))
    if "search" in present:
        search = next(r for r in records if r.metric == "index_bytes")
        blocks.append(PROSE.fill("search", dataset=search.dataset,
                                 n_corpus=f"{search.extra['n_corpus']:,}",
                                 n_queries=search.extra["n_queries"], k=search.extra["k"],
                                 faiss_threads=search.extra["faiss_threads"],
                                 table=search_table(records)))  # fmt: skip
    return join_blocks(*blocks)


if __name__ == "__main__":
    sys.exit(main())
