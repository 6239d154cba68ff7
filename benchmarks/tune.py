"""Acceptance figures of `demitasse tune` (issue #28): rescored and rotated binary codes, query
latency, the 7-set STS average, and how well the label-free estimate ranks configurations.

all-MiniLM-L6-v2 on BEIR SciFact test. Every text (corpus, test queries, train queries, the 7
STS sets) is embedded once (the embedding cache keeps it); each configuration is a
:class:`CompressedModel` fitted on the SciFact **corpus** vectors only (PCA, ITQ / random
rotation, int8 ranges of the codes and of the rescoring store: no queries, no qrels) and
scored with ``evaluate_model``, i.e. exactly as the model searches. A rescoring model keeps the
encoder's full 384-d output as int8 and rescores the top k·F candidates of its codes with the
query's full output; on STS it scores a pair by that rescoring similarity (the first sentence
as the query, the second as the kept document). The label-free estimate
(``neighbourhood_agreement``: top-10 overlap and top-100 rank correlation with the full
model's own neighbourhoods) takes its queries from the SciFact **train** queries, never the
test ones, and is correlated (Spearman) with nDCG@10 and with the STS average over the sweep.
Latency: one query per call, faiss and BLAS on one thread (run with OMP_NUM_THREADS=1).

    OMP_NUM_THREADS=1 python benchmarks/tune.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import spearmanr

from demitasse import CompressedModel
from demitasse.data import resolve_data_dir, stsb_fit_sentences
from demitasse.data.beir import BeirDataset, load_beir
from demitasse.evaluation import (
    ResultRecord,
    RetrievalTask,
    Task,
    build_tasks,
    evaluate_model,
    machine_description,
    neighbourhood_agreement,
    write_records,
)
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import save_figure
from lab.results_file import update_section

HERE = Path(__file__).resolve().parent
NAME = "tune"
FIT_DATA = "scifact-corpus"
FACTORS = (1, 2, 4, 10)
SWEEP_DIMS = (32, 64, 96, 128, 192, 256)
#: The issue's figures for all-MiniLM-L6-v2 on SciFact test (nDCG@10 ×100).
FULL_NDCG, TARGET_16_BYTES, TARGET_8_BYTES = 64.51, 63.86, 63.22
ESTIMATES = ("overlap@10", "rank_correlation@100")
COLUMNS = [f"{side} {estimate}" for side in ("search", "pairs") for estimate in ESTIMATES]
SEARCH_SET, PAIRS_SET = "SciFact/train-queries", "STS-B/train-sentences"
METRIC_NAMES = {"ndcg@10": "nDCG@10 (SciFact test)", "sts": "STS average (7 sets)"}
#: Corpus sentences drawn as queries by the pair estimate (fixed seed).
PAIR_QUERIES = 1000
#: What a label-free record keeps of its configuration's retrieval extra.
DESCRIBING = ("configuration", "rotation", "omp_num_threads", "rescore", "rescore_precision",
              "rescore_source", "index_bytes", "store_bytes")  # fmt: skip


class Variant(NamedTuple):
    """One configuration: compressor (``none``: the full 384 dims), width, precision, the
    binary rotation, the rescoring factor (None: no rescoring), and whether to time it."""

    method: str
    dim: int
    precision: str
    rotation: str = "none"
    factor: float | None = None
    timed: bool = False

    @property
    def label(self) -> str:
        parts = [self.method if self.method == "none" else f"{self.method}-{self.dim}"]
        parts.append(self.precision)
        if self.rotation != "none":
            parts.append(self.rotation)
        if self.factor is not None:
            parts.append(f"F={self.factor:g}")
        return " ".join(parts)


def acceptance_variants() -> list[Variant]:
    """The issue's first two Acceptance bullets, each timed next to float32 exact search."""
    variants = [
        Variant("none", 384, "float32", timed=True),
        Variant("none", 384, "binary", timed=True),
        Variant("truncate", 128, "binary", timed=True),
    ]
    for dim in (128, 64):
        for rotation in ("itq", "random"):
            for factor in (None, *FACTORS):
                variants.append(Variant("pca", dim, "binary", rotation, factor, timed=True))
    for method, dim in (("none", 384), ("pca", 128), ("pca", 64)):
        for factor in (None, 4):
            variants.append(Variant(method, dim, "int8", factor=factor, timed=True))
    return variants


def sweep_variants() -> list[Variant]:
    """More configurations for the estimate's correlation: dims × truncate/PCA × precisions."""
    return [
        Variant(method, dim, precision)
        for method in ("truncate", "pca")
        for dim in SWEEP_DIMS
        for precision in ("float32", "int8", "binary")
    ]


class CachedEncoder:
    """The encoder's vectors of every benchmark text, computed once: each configuration's
    model embeds through it, so nothing is encoded twice."""

    def __init__(self, name: str, num_layers: int, texts: Sequence[str], vectors: np.ndarray):
        self.name, self.num_layers, self.dim = name, num_layers, int(vectors.shape[1])
        self._row = {text: i for i, text in enumerate(texts)}
        self._vectors = vectors

    def encode(self, texts: Sequence[str], layer: int | None = None, batch_size: int = 64):
        return self._vectors[[self._row[t] for t in texts]]

    def encode_layers(self, texts: Sequence[str], layers=None, batch_size: int = 64):
        return {self.num_layers: self.encode(texts)}


def fitted_model(encoder: CachedEncoder, variant: Variant, corpus: np.ndarray) -> CompressedModel:
    """``variant`` as a model fitted on the corpus vectors (no queries, no judgements)."""
    model = CompressedModel(
        encoder,
        compressor=None if variant.method == "none" else variant.method,
        dim=None if variant.method == "none" else variant.dim,
        precision=variant.precision,
        quantizer_params={"rotation": variant.rotation} if variant.rotation != "none" else None,
        rescore_factor=variant.factor,
    )
    return model.fit(vectors=corpus, data_label=FIT_DATA)


def label_free(
    model: CompressedModel, corpus: np.ndarray, queries: np.ndarray | None, *, pairs: bool
) -> dict[str, float]:
    """The estimate's two figures ×100. For search (``pairs=False``): ``queries`` searched as
    the model searches. For pair similarity: the corpus sentences as queries, every document
    ranked by the similarity the model scores pairs with (a rescoring model: its rescoring
    similarity, so all documents are rescored)."""
    first_stage, rescore_queries = model.search_queries(corpus if queries is None else queries)
    factor = model.recipe.rescore_factor
    if pairs and model.rescoring is not None:
        factor = float(len(corpus))
    agreement = neighbourhood_agreement(
        corpus, model.search_index(corpus), first_stage, reference_queries=queries,
        rescore_multiplier=factor, rescore_queries=rescore_queries, sample=PAIR_QUERIES,
    )  # fmt: skip
    return {"overlap@10": 100 * agreement.overlap,
            "rank_correlation@100": 100 * agreement.rank_correlation}  # fmt: skip


def score_variant(
    encoder: CachedEncoder,
    variant: Variant,
    tasks: dict[str, list[Task]],
    vectors: dict[str, np.ndarray],
) -> list[ResultRecord]:
    """Retrieval (and latency when timed), STS and the label-free estimates of one variant."""
    corpus = vectors["corpus"]
    model = fitted_model(encoder, variant, corpus)
    extra = {"configuration": variant.label, "rotation": variant.rotation,
             "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}  # fmt: skip
    records = evaluate_model(model, tasks["timed" if variant.timed else "plain"], extra=extra)
    base = next(r for r in records if r.task == "retrieval")
    described = {k: v for k, v in base.extra.items() if k in DESCRIBING}
    estimates = {
        SEARCH_SET: label_free(model, corpus, vectors["train_queries"], pairs=False),
        PAIRS_SET: label_free(model, vectors["sentences"], None, pairs=True),
    }
    for dataset, figures in estimates.items():
        records += [ResultRecord(
            model=base.model, layer=base.layer, method=base.method, dim=base.dim,
            precision=base.precision, task="label_free", dataset=dataset, metric=metric,
            score=value, bytes_per_vector=base.bytes_per_vector, fit_data=FIT_DATA,
            extra=described,
        ) for metric, value in figures.items()]  # fmt: skip
    return records


def by_configuration(records: Sequence[ResultRecord]) -> dict[str, dict[str, Any]]:
    """Per configuration: its bytes and every figure the tables need."""
    table: dict[str, dict[str, Any]] = {}
    for r in records:
        row = table.setdefault(r.extra["configuration"], {})
        if r.task == "retrieval" and r.dataset == "SciFact":
            row[r.metric] = r.score
            row["index"] = r.extra["index_bytes"]
            row["rescore"] = r.extra["store_bytes"]
        elif r.task == "sts" and r.dataset == "avg":
            row["sts"] = r.score
        elif r.task == "label_free":
            row[f"{'search' if r.dataset == SEARCH_SET else 'pairs'} {r.metric}"] = r.score
    return table


def correlations(table: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """Spearman's rho of each estimate with nDCG@10 and the STS average over the sweep: the
    search estimate for retrieval, the pair estimate for STS, and the crossings for contrast."""
    rows = []
    pairings = [("search", "ndcg@10"), ("pairs", "sts"), ("search", "sts"), ("pairs", "ndcg@10")]
    for side, metric in pairings:
        for estimate in ESTIMATES:
            rho = spearmanr(
                [r[f"{side} {estimate}"] for r in table.values()],
                [r[metric] for r in table.values()],
            )
            rows.append([f"{side} {estimate}", METRIC_NAMES[metric], len(table),
                         round(float(rho.statistic), 3)])  # fmt: skip
    return rows


def acceptance_checks(table: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """The issue's targets, each with the figure reached."""

    def ndcg(label: str) -> float:
        return table[label]["ndcg@10"]

    best16 = max(ndcg(f"pca-128 binary itq F={f}") for f in FACTORS)
    best8 = max(ndcg(f"pca-64 binary itq F={f}") for f in FACTORS)
    gap = ndcg("pca-128 binary itq") - ndcg("truncate-128 binary")
    checks = [
        ("16 bytes (PCA-128 ITQ bits), rescored: nDCG@10 ≥ 63.86", best16, TARGET_16_BYTES),
        ("8 bytes (PCA-64 ITQ bits), rescored: nDCG@10 ≥ 63.22", best8, TARGET_8_BYTES),
        ("rotated 128 bits − truncated 128 bits, no rescoring: ≥ 8 points", gap, 8.0),
    ]
    return [
        [check, round(value, 2), "yes" if value >= target else "no"]
        for check, value, target in checks
    ]


def acceptance_table(records: Sequence[ResultRecord], labels: Sequence[str]) -> str:
    table = by_configuration(records)
    latency = {
        (r.extra["configuration"], r.metric): r.score
        for r in records if r.dataset == "SciFact" and r.metric.startswith("latency")
    }  # fmt: skip
    rows = [
        [label, table[label]["index"], table[label]["rescore"], table[label]["ndcg@10"],
         100 * table[label]["ndcg@10"] / table["none float32"]["ndcg@10"], table[label]["sts"],
         latency[(label, "latency_p50_ms")], latency[(label, "latency_p99_ms")]]
        for label in labels
    ]  # fmt: skip
    header = ["configuration", "index B", "rescore B", "nDCG@10", "% of float32",
              "STS avg", "p50 ms", "p99 ms"]  # fmt: skip
    return markdown_table(header, rows)


def sweep_table(table: dict[str, dict[str, Any]]) -> str:
    ordered = sorted(table.items(), key=lambda item: -item[1]["ndcg@10"])
    rows = [
        [label, *(row[key] for key in ("index", "rescore", "ndcg@10", "sts", *COLUMNS))]
        for label, row in ordered
    ]
    return markdown_table(
        ["configuration", "index B", "rescore B", "nDCG@10", "STS avg", *COLUMNS], rows
    )


def plot(records: Sequence[ResultRecord], path: Path, title: str) -> Path:
    """nDCG@10 against index bytes per vector (rescored points filled), and the estimate
    against nDCG@10 and the STS average."""
    table = by_configuration(records)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    for row in table.values():
        rescored = row["rescore"] > 0
        axes[0].scatter(row["index"], row["ndcg@10"], marker="o" if rescored else "x",
                        color="tab:blue" if rescored else "tab:gray", s=22)  # fmt: skip
        axes[1].scatter(row["search rank_correlation@100"], row["ndcg@10"], color="tab:blue", s=14)
        axes[2].scatter(row["pairs rank_correlation@100"], row["sts"], color="tab:green", s=14)
    axes[0].set_xscale("log", base=2)
    axes[0].axhline(TARGET_16_BYTES, color="tab:red", lw=0.8, ls="--", label="99 % of 64.51")
    axes[0].set(xlabel="index bytes per vector (o: rescored, x: not)", ylabel="nDCG@10 ×100")
    axes[1].set(xlabel="search estimate: rank correlation@100 ×100", ylabel="nDCG@10 ×100")
    axes[2].set(xlabel="pair estimate: rank correlation@100 ×100", ylabel="STS average ×100")
    axes[0].legend(fontsize=8)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def embed_everything(
    model: str, scifact: BeirDataset, train: BeirDataset, tasks: list[Task], sentences: list[str]
) -> tuple[CachedEncoder, dict[str, np.ndarray]]:
    """One encoding pass over every text (the embedding cache makes reruns instant)."""
    encoder = load_encoder(model)
    needed = [*scifact.query_texts, *train.query_texts, *sentences]
    texts = list(dict.fromkeys([*needed, *(t for task in tasks for t in task.texts())]))
    cached = CachedEncoder(encoder.name, encoder.num_layers, texts, encoder.encode(texts))
    sides = {"corpus": scifact.corpus_texts, "train_queries": train.query_texts,
             "sentences": sentences}  # fmt: skip
    return cached, {side: cached.encode(items) for side, items in sides.items()}


def section(records: list[ResultRecord], labels: list[str], elapsed: float, png: Path) -> str:
    table = by_configuration(records)
    return "\n".join([
        "## Choosing a configuration: rescoring, rotations, latency, label-free estimate (`tune`)",
        "",
        "Command: `OMP_NUM_THREADS=1 python benchmarks/tune.py --data-dir ../shared/data`  ",
        f"Machine: {machine_description()}; wall time {elapsed:.0f} s (embedding cache warm).  ",
        "all-MiniLM-L6-v2, SciFact test (300 queries, 5,183 documents; search depth k = 100, "
        "so F rescores the top 100·F). Every part fitted on the SciFact corpus vectors only. "
        "Rescoring: int8 of the encoder's full 384-d output (384 B a document, kept aside). "
        "STS: the 7-set average, PCA/int8/rotations fitted on the SciFact corpus too; a "
        "rescoring model scores pairs by its rescoring similarity. Latency: one query per "
        "call (query codes included), best of 3 passes, faiss and BLAS on 1 thread. "
        "Label-free estimates (no labels, no test inputs), against the full model's own "
        "neighbourhoods: *search* takes the 809 SciFact **train** queries over the corpus, "
        "searched as the configuration searches; *pairs* takes the 1,644 STS-B train sentences "
        "that are in no STS test or dev split as corpus and queries (1,000 drawn), ranked by "
        "the similarity the configuration scores pairs with (rescoring models: their rescoring "
        "similarity, as on STS). Each is correlated with the metric of its own kind; the "
        "crossed pairings are shown for contrast.",
        "", "Acceptance:", "",
        markdown_table(["check", "reached", "met"], acceptance_checks(table)),
        "", markdown_table(["estimate", "vs", "configurations", "Spearman"], correlations(table)),
        "", acceptance_table(records, labels),
        "", "Every configuration (sorted by nDCG@10):", "", sweep_table(table),
        "", f"Plot: `benchmarks/results/{png.name}`.",
    ])  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--repeats", type=int, default=3, help="latency passes (best is kept)")
    args = parser.parse_args()

    started = time.perf_counter()
    folder = resolve_data_dir(args.data_dir) / "beir" / "scifact"
    scifact, train = load_beir(folder, "test"), load_beir(folder, "train")
    sts = build_tasks(["sts"], args.data_dir)
    tasks: dict[str, list[Task]] = {
        "timed": [RetrievalTask(scifact, latency=True, latency_repeats=args.repeats), *sts],
        "plain": [RetrievalTask(scifact), *sts],
    }
    sentences = stsb_fit_sentences(args.data_dir)
    encoder, vectors = embed_everything(args.model, scifact, train, [*tasks["plain"]], sentences)
    variants = list({v.label: v for v in [*sweep_variants(), *acceptance_variants()]}.values())
    records: list[ResultRecord] = []
    for i, variant in enumerate(variants, 1):
        print(f"[{i}/{len(variants)}] {variant.label}", file=sys.stderr, flush=True)
        records += score_variant(encoder, variant, tasks, vectors)
    write_records(HERE / "results" / f"{NAME}.json", records)
    png = plot(records, HERE / "results" / f"{NAME}.png", f"{encoder.name} on SciFact test")
    labels = [v.label for v in acceptance_variants()]
    body = section(records, labels, time.perf_counter() - started, png)
    update_section(HERE / "RESULTS.md", NAME, body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
