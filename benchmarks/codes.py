"""Codes at every byte budget: retrieval quality against the total bytes a document costs.

demitasse's codes (residual ``rq<B>`` and product ``pq<B>`` codes searched asymmetrically, int8,
the PCA + ITQ sign bits of earlier releases) next to what vector databases give by themselves,
on the same vectors in the same run: faiss 1.15 PQ, OPQ, RaBitQ (1, 2, 4 bits; float and 8-bit
query), SQ4 and SQ8, and sentence-transformers' int8 and binary codes (with and without its
rescoring, which reads the same codes, so it stores nothing more). Every configuration keeps
one code per document and nothing else: ``bytes_per_vector`` is all a document costs
(``extra.index_bytes`` + ``extra.store_bytes``, the latter 0 here).

Every code is fitted on the corpus's own vectors (no queries, no judgements), then searched
once with the test queries: nDCG@10 against the judgements and the label-free overlap@10 (the
share of float32's top 10 the code finds). With ``--speed``, the p50 / p99 latency of one
query on one thread over synthetic corpora of ``--speed-docs`` documents, next to faiss PQ
and RaBitQ.

    python benchmarks/codes.py --data-dir ../shared/data [--models all-MiniLM-L6-v2]
        [--budgets 4,8,16,32,64,128,256,384] [--beir DIR] [--speed]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _common import HERE, RESULTS_MD, log
from demitasse.compress import BinaryQuantizer, Int8Quantizer, make_compressor, make_quantizer
from demitasse.data import resolve_data_dir
from demitasse.data.beir import BeirDataset, load_beir
from demitasse.evaluation import ResultRecord, machine_description, read_records, write_records
from demitasse.evaluation.ranking_metrics import evaluate_run
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.search import AsymmetricScan, QuantizedIndex
from lab.results_file import update_section

NAME = "codes"
K = 10
#: sentence-transformers' default oversampling when it rescores (semantic_search_faiss).
ST_RESCORE_MULTIPLIER = 4


@dataclass
class Searched:
    """One configuration's top-k rows per query, what it costs, and how long it took to fit."""

    method: str
    rows: np.ndarray
    index_bytes: int
    peer: bool
    fit_seconds: float
    extra: dict[str, Any]


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def top_rows(scores: np.ndarray, k: int = K) -> np.ndarray:
    """Best-first rows of each query's scores (ties by row)."""
    part = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.lexsort((part, -np.take_along_axis(scores, part, axis=1)), axis=1)
    return np.take_along_axis(part, order, axis=1)


def timed(fit: Callable[[], np.ndarray]) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    rows = fit()
    return rows, time.perf_counter() - started


# ---- demitasse's codes ---------------------------------------------------------------------------


def demitasse_codes(docs: np.ndarray, queries: np.ndarray, budget: int) -> list[Searched]:
    """Residual and product codes of exactly ``budget`` bytes, searched asymmetrically; at
    the smallest budgets also without the norm byte (one more codeword instead)."""
    variants: list[tuple[str, dict[str, Any]]] = []
    for family in ("rq", "pq"):
        if budget < 2 or (family == "pq" and budget - 1 > docs.shape[1]):
            continue
        if family == "rq" and budget > 128:
            continue  # 255 full-width codebooks: product codes reach float32 sooner
        variants.append((f"{family}{budget}", {}))
        if budget <= 8:
            variants.append((f"{family}{budget}", {"norm": "none"}))
    found = []
    for name, params in variants:
        started = time.perf_counter()
        quantizer = make_quantizer(name, **params).fit(docs)
        codes = quantizer.quantize(docs)
        fit_seconds = time.perf_counter() - started
        _, rows = AsymmetricScan(quantizer, codes, "cosine").search(queries, K)
        label = name + "".join(f":{key}={value}" for key, value in params.items())
        found.append(Searched(label, rows, codes.shape[1], False, fit_seconds, dict(params)))
    return found


def demitasse_int8(docs: np.ndarray, queries: np.ndarray) -> Searched:
    """int8 codes (sentence-transformers' convention, ranges from the corpus), scored as the
    values they stand for: the float query against the bucket centres."""
    quantizer = Int8Quantizer()
    codes, seconds = timed(lambda: quantizer.fit(docs).quantize(docs))
    _, rows = QuantizedIndex(codes, quantizer).search(queries, K)
    return Searched("int8", rows, docs.shape[1], False, seconds, {"search": "asymmetric"})


def itq_bits(docs: np.ndarray, queries: np.ndarray, budget: int) -> list[Searched]:
    """PCA to ``8·budget`` dims, ITQ-rotated sign bits: Hamming, and the float query against
    the ±1 bits (the path before codebook codes)."""
    bits = 8 * budget
    if bits > docs.shape[1]:
        return []
    started = time.perf_counter()
    pca = make_compressor("pca", dim=bits).fit(docs)
    small = pca.transform(docs)
    quantizer = BinaryQuantizer(rotation="itq").fit(small)
    codes = quantizer.quantize(small)
    seconds = time.perf_counter() - started
    q_small = pca.transform(queries)
    hamming = top_rows(-_hamming(quantizer.quantize(q_small), codes))
    signs = np.unpackbits(codes, axis=1)[:, :bits].astype(np.float32) * 2 - 1
    rotated = (q_small - quantizer.mean_) @ quantizer.rotation_
    asymmetric = top_rows(rotated @ signs.T)
    return [
        Searched(f"pca{bits}-itq", hamming, budget, False, seconds, {"search": "hamming"}),
        Searched(f"pca{bits}-itq-float-query", asymmetric, budget, False, seconds, {}),
    ]


def _hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    popcount = np.array([bin(i).count("1") for i in range(256)], dtype=np.int32)
    return np.stack([popcount[np.bitwise_xor(row, b)].sum(axis=1) for row in a])


# ---- peers ---------------------------------------------------------------------------------------


def faiss_factory(docs: np.ndarray, queries: np.ndarray, name: str, factory: str) -> Searched:
    """One faiss index from its factory string over the same vectors (inner product of unit
    vectors = cosine)."""
    import faiss

    started = time.perf_counter()
    index = faiss.index_factory(docs.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    seconds = time.perf_counter() - started
    _, rows = index.search(queries, K)
    return Searched(name, rows, index.sa_code_size(), True, seconds, {})


def faiss_budget_peers(
    docs: np.ndarray, queries: np.ndarray, budget: int
) -> list[tuple[str, Callable[[], list[Searched]]]]:
    """faiss PQ and OPQ of ``budget`` bytes, as steps."""
    if docs.shape[1] % budget or budget >= docs.shape[1]:
        return []
    return [
        (name, lambda name=name, factory=factory: [faiss_factory(docs, queries, name, factory)])
        for name, factory in (
            (f"faiss-pq{budget}", f"PQ{budget}"),
            (f"faiss-opq{budget}", f"OPQ{budget},PQ{budget}"),
        )
    ]


def faiss_rabitq(docs: np.ndarray, queries: np.ndarray) -> list[Searched]:
    """faiss RaBitQ with 1, 2 and 4 bits, float and 8-bit queries."""
    import faiss

    d = docs.shape[1]
    found = []
    for bits in (1, 2, 4):
        started = time.perf_counter()
        index = faiss.IndexRaBitQ(d, faiss.METRIC_INNER_PRODUCT, bits)
        index.train(docs)
        index.add(docs)
        seconds = time.perf_counter() - started
        for query_bits in (0, 8):
            params = faiss.RaBitQSearchParameters()
            params.qb = query_bits
            _, rows = index.search(queries, K, params=params)
            query = "float" if query_bits == 0 else f"{query_bits}-bit"
            found.append(
                Searched(
                    f"faiss-rabitq{bits}-{query}-query",
                    rows,
                    index.code_size,
                    True,
                    seconds,
                    {"bits": bits, "query_bits": query_bits},
                )
            )
    return found


def sentence_transformers_peers(docs: np.ndarray, queries: np.ndarray) -> list[Searched]:
    """sentence-transformers' quantize_embeddings codes (ranges from the corpus) and its
    rescoring: the float query against the candidates' own codes (×4 oversampling)."""
    from sentence_transformers.quantization import quantize_embeddings

    found = []
    started = time.perf_counter()
    ranges = np.stack([docs.min(axis=0), docs.max(axis=0)])
    int8 = quantize_embeddings(docs, "int8", ranges=ranges).astype(np.float32)
    seconds = time.perf_counter() - started
    q_int8 = quantize_embeddings(queries, "int8", ranges=ranges).astype(np.float32)
    found.append(Searched("st-int8", top_rows(q_int8 @ int8.T), docs.shape[1], True, seconds, {}))
    found.append(_st_rescored("st-int8-rescore", q_int8 @ int8.T, queries @ int8.T, docs.shape[1]))
    bits = quantize_embeddings(docs, "ubinary")
    q_bits = quantize_embeddings(queries, "ubinary")
    hamming = _hamming(q_bits, bits)
    signs = np.unpackbits(bits, axis=1)[:, : docs.shape[1]].astype(np.float32) * 2 - 1
    found.append(Searched("st-binary", top_rows(-hamming), bits.shape[1], True, 0.0, {}))
    found.append(_st_rescored("st-binary-rescore", -hamming, queries @ signs.T, bits.shape[1]))
    return found


def _st_rescored(name: str, first: np.ndarray, rescored: np.ndarray, size: int) -> Searched:
    candidates = top_rows(first, K * ST_RESCORE_MULTIPLIER)
    order = top_rows(np.take_along_axis(rescored, candidates, axis=1))
    rows = np.take_along_axis(candidates, order, axis=1)
    return Searched(name, rows, size, True, 0.0, {"rescore": ST_RESCORE_MULTIPLIER})


# ---- one model -----------------------------------------------------------------------------------


class Checkpoint:
    """Each finished step's configurations, appended to a JSON Lines file in demitasse's cache
    (``codes-<model>-<dataset>.jsonl``), so that a run that stops resumes where it stopped.
    With ``CODES_FINISH_NOW`` set, steps not yet finished are skipped (a partial page)."""

    def __init__(self, model: str, dataset: str) -> None:
        from demitasse.encoders.resolve import cache_root

        self.path = cache_root() / "benchmarks" / f"codes-{model}-{dataset}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: dict[str, list[Searched]] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                entry = json.loads(line)
                self.done[entry["step"]] = [
                    Searched(**{**item, "rows": np.asarray(item["rows"])})
                    for item in entry["found"]
                ]
        self.skipped: list[str] = []

    def run(self, step: str, compute: Callable[[], list[Searched]]) -> list[Searched]:
        if step in self.done:
            return self.done[step]
        if os.environ.get("CODES_FINISH_NOW"):
            self.skipped.append(step)
            return []
        found = compute()
        items = [{**item.__dict__, "rows": item.rows.tolist()} for item in found]
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, "found": items}) + "\n")
        return found


def encode(model: str, dataset: BeirDataset) -> tuple[np.ndarray, np.ndarray, float]:
    encoder = load_encoder(model)
    started = time.perf_counter()
    docs = unit(encoder.encode(dataset.corpus_texts))
    queries = unit(encoder.encode(dataset.query_texts))
    return docs, queries, time.perf_counter() - started


def score_model(
    model: str, dataset: BeirDataset, budgets: Sequence[int]
) -> tuple[list[ResultRecord], list[str]]:
    docs, queries, encode_seconds = encode(model, dataset)
    log(f"{model}: {len(docs)} documents, {len(queries)} queries in {encode_seconds:.0f} s")
    exact = top_rows(queries @ docs.T)
    searched = [Searched("float32", exact, 4 * docs.shape[1], False, 0.0, {})]
    checkpoint = Checkpoint(model, dataset.name)
    # Budget by budget, demitasse's codes and the peers', so that a run cut short has every
    # comparison of the budgets it finished (and a re-run resumes from the checkpoint).
    for budget in budgets:
        for step, run in [
            (f"demitasse-{budget}", lambda b=budget: demitasse_codes(docs, queries, b)),
            (f"itq-{budget}", lambda b=budget: itq_bits(docs, queries, b)),
            *faiss_budget_peers(docs, queries, budget),
        ]:
            searched.extend(checkpoint.run(step, run))
        log(f"{model}: {budget} bytes done")
    for step, run in [
        ("int8", lambda: [demitasse_int8(docs, queries)]),
        ("faiss-sq4", lambda: [faiss_factory(docs, queries, "faiss-sq4", "SQ4")]),
        ("faiss-sq8", lambda: [faiss_factory(docs, queries, "faiss-sq8", "SQ8")]),
        ("faiss-rabitq", lambda: faiss_rabitq(docs, queries)),
        ("sentence-transformers", lambda: sentence_transformers_peers(docs, queries)),
    ]:
        searched.extend(checkpoint.run(step, run))
    ids = np.asarray(dataset.corpus_ids, dtype=object)
    records = []
    for item in searched:
        run = {q: ids[r].tolist() for q, r in zip(dataset.query_ids, item.rows, strict=True)}
        ndcg = evaluate_run(run, dataset.qrels, ["ndcg@10"])["ndcg@10"]
        overlap = 100.0 * np.mean(
            [len(set(a) & set(b)) / K for a, b in zip(item.rows, exact, strict=True)]
        )
        extra = {
            "peer": item.peer,
            "index_bytes": item.index_bytes,
            "store_bytes": 0,
            "fit_seconds": round(item.fit_seconds, 2),
            "fit_data": "corpus vectors",
            "threads": torch.get_num_threads(),
            **item.extra,
        }
        for metric, value in (("ndcg@10", ndcg), ("overlap@10", overlap)):
            records.append(
                ResultRecord(
                    model=model,
                    layer=None,
                    method=item.method,
                    dim=docs.shape[1],
                    precision=item.method,
                    task="retrieval",
                    dataset=dataset.name,
                    metric=metric,
                    score=round(float(value), 2),
                    bytes_per_vector=item.index_bytes,
                    fit_data="corpus",
                    extra=extra,
                )
            )
    return records, checkpoint.skipped


# ---- speed ---------------------------------------------------------------------------------------


def latency(search: Callable[[np.ndarray], Any], queries: np.ndarray) -> tuple[float, float]:
    search(queries[:1])  # warm-up: the first call may compile the scan
    times = []
    for query in queries:
        started = time.perf_counter()
        search(query[None, :])
        times.append(1000 * (time.perf_counter() - started))
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def speed_records(sizes: Sequence[int], budgets: Sequence[int]) -> list[ResultRecord]:
    """One query at a time on one thread over synthetic unit vectors (codes learned on a
    sample, the rest coded with them), demitasse's scan next to faiss's flat PQ and RaBitQ."""
    import faiss

    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    d = 384
    spectrum = np.linspace(1.0, 0.1, d).astype(np.float32)
    queries = unit(rng.standard_normal((60, d)).astype(np.float32) * spectrum)
    records = []
    for n in sizes:
        docs = np.empty((n, d), np.float32)
        for start in range(0, n, 100_000):
            stop = min(n, start + 100_000)
            docs[start:stop] = unit(rng.standard_normal((stop - start, d)) * spectrum)
        sample = docs[:20_000]
        for budget in budgets:
            quantizer = make_quantizer(f"rq{budget}", iterations=5, refine_iterations=0, beam=1)
            quantizer.fit(sample)
            # Latency does not depend on which codewords a document names: random ones,
            # with the norm byte from real rows, spare coding a million documents.
            codes = rng.integers(0, 256, (n, budget), dtype=np.uint8)
            codes[:, -1] = quantizer.quantize(sample[: min(n, 20_000)])[:, -1][
                np.arange(n) % min(n, 20_000)
            ]
            scan = AsymmetricScan(quantizer, codes, "cosine")
            ours = latency(lambda q, scan=scan: scan.search(q, K), queries)
            pq = faiss.IndexPQ(d, budget, 8, faiss.METRIC_INNER_PRODUCT)
            pq.train(sample)
            pq.add_sa_codes(codes)
            peer = latency(lambda q, pq=pq: pq.search(q, K), queries)
            for method, (p50, p99), peer_flag in (
                (f"rq{budget}", ours, False),
                (f"faiss-pq{budget}", peer, True),
            ):
                records.extend(_latency_records(method, n, budget, p50, p99, peer_flag))
            log(f"speed: {n} documents, {budget} bytes: ours {ours[0]:.1f} ms, PQ {peer[0]:.1f}")
        rabitq = faiss.IndexRaBitQ(d, faiss.METRIC_INNER_PRODUCT, 1)
        rabitq.train(sample)
        rabitq.add(docs)
        params = faiss.RaBitQSearchParameters()
        params.qb = 0
        p50, p99 = latency(lambda q, i=rabitq, p=params: i.search(q, K, params=p), queries)
        records.extend(_latency_records("faiss-rabitq1-float-query", n, 56, p50, p99, True))
    return records


def _latency_records(
    method: str, n: int, size: int, p50: float, p99: float, peer: bool
) -> list[ResultRecord]:
    extra = {"peer": peer, "documents": n, "threads": 1, "index_bytes": size, "store_bytes": 0}
    return [
        ResultRecord(
            model="synthetic-384",
            layer=None,
            method=method,
            dim=384,
            precision=method,
            task="search-latency",
            dataset=f"synthetic-{n}",
            metric=metric,
            score=round(value, 3),
            bytes_per_vector=size,
            extra=extra,
        )
        for metric, value in (("latency_p50_ms", p50), ("latency_p99_ms", p99))
    ]


# ---- the page ------------------------------------------------------------------------------------


def best_per_budget(records: Sequence[ResultRecord], budgets: Sequence[int]) -> str:
    """For each budget: demitasse's best code and the best peer at no more bytes."""
    rows = []
    for model in dict.fromkeys(r.model for r in records):
        ndcg = [r for r in records if r.model == model and r.metric == "ndcg@10"]
        full = next(r.score for r in ndcg if r.method == "float32")
        run_budgets = ndcg[0].extra.get("run", {}).get("budgets", budgets)
        for budget in [b for b in budgets if b in run_budgets]:
            ours = [r for r in ndcg if not r.extra["peer"] and r.bytes_per_vector <= budget]
            peers = [r for r in ndcg if r.extra["peer"] and r.bytes_per_vector <= budget]
            best = max(ours, key=lambda r: r.score, default=None)
            peer = max(peers, key=lambda r: r.score, default=None)
            rows.append(
                [
                    model,
                    budget,
                    None if best is None else f"{best.method} ({best.bytes_per_vector} B)",
                    None if best is None else best.score,
                    None if best is None else f"{100 * best.score / full:.1f} %",
                    None if peer is None else f"{peer.method} ({peer.bytes_per_vector} B)",
                    None if peer is None else peer.score,
                ]
            )
    return markdown_table(
        ["model", "≤ bytes", "demitasse", "nDCG@10", "of float32", "best peer", "nDCG@10"], rows
    )


def all_rows(records: Sequence[ResultRecord]) -> str:
    keys = list(dict.fromkeys((r.model, r.method) for r in records if r.task == "retrieval"))
    score = {(r.model, r.method, r.metric): r for r in records}
    rows = []
    for model, method in sorted(
        keys, key=lambda k: (k[0], score[(*k, "ndcg@10")].bytes_per_vector)
    ):
        ndcg = score[(model, method, "ndcg@10")]
        rows.append(
            [
                model,
                method,
                "peer" if ndcg.extra["peer"] else "demitasse",
                ndcg.bytes_per_vector,
                ndcg.score,
                score[(model, method, "overlap@10")].score,
                ndcg.extra["fit_seconds"],
            ]
        )
    return markdown_table(
        ["model", "code", "by", "total bytes", "nDCG@10", "overlap@10", "fit s"], rows
    )


def speed_table(records: Sequence[ResultRecord]) -> str:
    keys = list(dict.fromkeys((r.dataset, r.method) for r in records if r.task == "search-latency"))
    score = {(r.dataset, r.method, r.metric): r.score for r in records}
    rows = [
        [
            dataset,
            method,
            score[(dataset, method, "latency_p50_ms")],
            score[(dataset, method, "latency_p99_ms")],
        ]
        for dataset, method in keys
    ]
    return markdown_table(["corpus", "code", "p50 ms", "p99 ms"], rows)


def speed_page(
    records: Sequence[ResultRecord], command: str, machine: str, wall: float, note: str = ""
) -> str:
    page = "\n".join(
        [
            "# Codes: search latency",
            "",
            f"Command: `{command}`",
            "",
            f"Machine: {machine}; wall time {wall:.0f} s; one thread each; 1-minute load average "
            f"at the end {os.getloadavg()[0]:.1f}.",
            "",
            "One query at a time, top 10, brute force over every code (no partitioning), on",
            "synthetic 384-d unit vectors. demitasse's `rq<B>` (B − 1 codeword bytes and the norm",
            "byte; `AsymmetricScan`'s compiled scan, the `fast` extra) next to faiss's flat PQ",
            "with B codeword bytes (`IndexPQ`, ADC) and 1-bit RaBitQ with a float query",
            "(`IndexRaBitQ`, qb = 0), in one run, each after one untimed query.",
            *([note] if note else []),
            "",
            speed_table(records),
            "",
            f"Records: `benchmarks/results/{NAME}_speed.json`.",
            "",
        ]
    )
    update_section(RESULTS_MD, f"{NAME}_speed", page)
    return page


def plot(records: Sequence[ResultRecord], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from demitasse.report.plots import save_figure

    models = list(dict.fromkeys(r.model for r in records if r.task == "retrieval"))
    fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 5), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        chosen = [r for r in records if r.model == model and r.metric == "ndcg@10"]
        families: dict[str, list[ResultRecord]] = {}
        for r in chosen:
            # One line per kind of code: the budget (and RaBitQ's bit count) varies along it.
            family = re.sub(r"(pq|rq|opq|sq|pca|rabitq)\d+", r"\1", r.method)
            families.setdefault(family, []).append(r)
        for family, points in families.items():
            points.sort(key=lambda r: r.bytes_per_vector)
            peer = points[0].extra["peer"]
            ax.plot(
                [r.bytes_per_vector for r in points],
                [r.score for r in points],
                "--" if peer else "-",
                marker="x" if peer else "o",
                label=f"{family} ({'peer' if peer else 'demitasse'})",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("total bytes per document")
        ax.set_ylabel("nDCG@10 ×100")
        ax.set_title(model)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    fig.suptitle("Quality per byte: demitasse's codes and the peers' (SciFact test)")
    fig.tight_layout()
    return save_figure(fig, path)


def run_lines(records: Sequence[ResultRecord]) -> list[str]:
    """One paragraph per model: the run its rows come from (each model is one comparison,
    all its rows from one run; models may come from different runs)."""
    lines = []
    for model in dict.fromkeys(r.model for r in records):
        facts = next(r.extra["run"] for r in records if r.model == model)
        lines += [
            f"**{model}** — command: `{facts['command']}`; machine: {facts['machine']}; wall "
            f"time {facts['wall_s']:.0f} s; {facts['threads']} thread(s); 1-minute load average "
            f"{facts['load']} (fit seconds are wall time under that load)."
            + (
                " **Partial run**: these steps had not finished and are missing: "
                + ", ".join(facts["not_finished"])
                + "."
                if facts.get("not_finished")
                else ""
            ),
            "",
        ]
    return lines


def write_page(records, budgets) -> str:
    image = plot(records, HERE / "results" / f"{NAME}.png")
    page = "\n".join(
        [
            "# Codes at every byte budget",
            "",
            *run_lines(records),
            "Every code is fitted on the corpus vectors alone and searched once with the test",
            "queries; bytes are all a document costs (no code keeps a second copy). demitasse's",
            "`rq<B>`/`pq<B>` spend one of their B bytes on the decoded vector's length.",
            "",
            "## Best code at each budget",
            "",
            best_per_budget([r for r in records if r.task == "retrieval"], budgets),
            "",
            f"![quality against bytes](results/{image.name})",
            "",
            "## Every configuration",
            "",
            all_rows(records),
            "",
            "Records: `benchmarks/results/codes.json`.",
            "",
        ]
    )
    update_section(RESULTS_MD, NAME, page)
    return page


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--models", default="all-MiniLM-L6-v2")
    parser.add_argument("--budgets", default="4,8,16,32,64,128,256,384")
    parser.add_argument("--beir", default=None, help="a BEIR folder (default: SciFact)")
    parser.add_argument("--split", default="test")
    parser.add_argument(
        "--speed",
        action="store_true",
        help="time search on synthetic data instead (results/codes_speed.json and .md)",
    )
    parser.add_argument("--speed-docs", default="100000,1000000")
    parser.add_argument("--speed-budgets", default="16,32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    budgets = [int(b) for b in args.budgets.split(",")]
    command = "python benchmarks/codes.py " + " ".join(sys.argv[1:])
    started = time.perf_counter()
    if args.speed:
        records = speed_records(
            [int(n) for n in args.speed_docs.split(",")],
            [int(b) for b in args.speed_budgets.split(",")],
        )
        write_records(HERE / "results" / f"{NAME}_speed.json", records)
        page = speed_page(records, command, machine_description(), time.perf_counter() - started)
        print(page)
        return 0
    folder = Path(args.beir) if args.beir else resolve_data_dir(args.data_dir) / "beir" / "scifact"
    dataset = load_beir(folder, split=args.split)
    models = args.models.split(",")
    records_path = HERE / "results" / f"{NAME}.json"
    # Models not in this run keep the rows of the run that measured them.
    records = [
        r
        for r in (read_records(records_path) if records_path.exists() else [])
        if r.model not in models and r.dataset == dataset.name
    ]
    for model in models:
        model_started = time.perf_counter()
        model_records, skipped = score_model(model, dataset, budgets)
        facts = {
            "command": command,
            "machine": machine_description(),
            "wall_s": round(time.perf_counter() - model_started),
            "threads": args.threads,
            "load": f"{os.getloadavg()[0]:.1f} at the end",
            "budgets": budgets,
            "not_finished": skipped,
        }
        for record in model_records:
            record.extra = {**record.extra, "run": facts}
        records.extend(model_records)
    write_records(records_path, records)
    page = write_page(records, sorted({b for r in records for b in r.extra["run"]["budgets"]}))
    print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
