"""SciFact through LanceDB: the rescored-binary configuration of ``tune`` (PCA-128, ITQ-rotated
binary codes, 16 bytes a document; the top k·F = 1,000 candidates rescored with int8 of the
encoder's full 384-d output) scored once in memory, as ``demitasse eval --model M --beir``
scores it, and once indexed into a LanceDB table and searched through ``LanceStore`` (LanceDB's
own Hamming search for the first stage). Both rows come from one run and one fitted model.

The model is fitted on the SciFact corpus vectors only (no queries, no judgements), as
``benchmarks/tune.py`` fits it. Recorded besides nDCG@10: the table's size on disk (with and
without the texts), the time to index, and per-query search latency (one query per call,
best of ``--repeats`` passes) of the LanceDB search and of the in-memory index.

    OMP_NUM_THREADS=1 python benchmarks/vectordb.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from _common import HERE, RESULTS_MD, log, template
from demitasse import CompressedModel
from demitasse.data import resolve_data_dir
from demitasse.data.beir import BeirDataset, load_beir
from demitasse.evaluation import (
    ResultRecord,
    RetrievalTask,
    evaluate_model,
    evaluate_run,
    machine_description,
    write_records,
)
from demitasse.latency import measure_search_latency
from demitasse.model import encoder_vectors
from demitasse.report import markdown_table
from demitasse.store import LanceStore
from lab.templates import fill_section

NAME = "vectordb"
FIT_DATA = "scifact-corpus"
#: The issue's tolerance between the two nDCG@10 figures (points ×100).
TOLERANCE = 0.3
K = 100  # the retrieval task's search depth (nDCG@10, recall@100 and co.)


def fitted_model(name: str, corpus: BeirDataset, factor: float) -> CompressedModel:
    model = CompressedModel(
        name,
        compressor="pca",
        dim=128,
        precision="binary",
        quantizer_params={"rotation": "itq"},
        rescore_factor=factor,
        rescore_precision="int8",
    )
    return model.fit(vectors=encoder_vectors(model, corpus.corpus_texts), data_label=FIT_DATA)


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def best_percentiles(call: Callable[[int], object], n: int, repeats: int) -> tuple[float, float]:
    """p50 / p99 ms of ``call(i)`` for i < n, one call at a time, best of ``repeats`` passes
    after a warm-up pass (other work on the machine only ever slows a pass)."""
    best = np.full(2, math.inf)
    for attempt in range(repeats + 1):
        times = np.empty(n)
        for i in range(n):
            start = time.perf_counter()
            call(i)
            times[i] = time.perf_counter() - start
        if attempt:
            best = np.minimum(best, np.percentile(times, [50, 99]))
    return 1000 * float(best[0]), 1000 * float(best[1])


def in_memory(model: CompressedModel, scifact: BeirDataset, repeats: int) -> dict[str, float]:
    """nDCG@10 as ``demitasse eval`` scores the model, and the in-memory index's latency."""
    records = evaluate_model(model, [RetrievalTask(scifact)])
    ndcg = next(r.score for r in records if r.metric == "ndcg@10" and r.dataset == scifact.name)
    index = model.search_index(scifact.corpus_texts)
    first_stage, rescore_queries = model.search_queries(scifact.query_texts)
    latency = measure_search_latency(
        index, first_stage, K, rescore_multiplier=model.recipe.rescore_factor,
        rescore_queries=rescore_queries, repeats=repeats,
    )  # fmt: skip
    return {"ndcg@10": ndcg, "latency_p50_ms": latency.p50_ms, "latency_p99_ms": latency.p99_ms}


def through_lancedb(
    model: CompressedModel, scifact: BeirDataset, db: Path, repeats: int
) -> dict[str, float]:
    """Index the corpus into LanceDB, search the test queries, score the run as the
    evaluation does; sizes on disk with and without the texts; latency per query."""
    ids, texts, queries = scifact.corpus_ids, scifact.corpus_texts, scifact.query_texts
    store = LanceStore(db, "scifact")
    started = time.perf_counter()
    store.add(model, ids, texts)
    index_seconds = time.perf_counter() - started
    LanceStore(db, "scifact_no_text").add(model, ids, texts, store_text=False)
    hits = store.search(model, queries, K)
    found = zip(scifact.query_ids, hits, strict=True)
    run = {query_id: [hit.id for hit in ranked] for query_id, ranked in found}
    values = evaluate_run(run, scifact.qrels, ["ndcg@10"])
    p50, p99 = best_percentiles(lambda i: store.search(model, queries[i : i + 1], K),
                                len(queries), repeats)  # fmt: skip
    return {
        "ndcg@10": values["ndcg@10"],
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
        "index_seconds": index_seconds,
        "disk_bytes": disk_bytes(db / "scifact.lance"),
        "disk_bytes_no_text": disk_bytes(db / "scifact_no_text.lance"),
    }


def records_of(model: CompressedModel, figures: dict, where: str, extra: dict) -> list:
    return [
        ResultRecord(
            model=model.recipe.name,
            layer=None,
            method="pca",
            dim=128,
            precision="binary",
            task="retrieval",
            dataset="SciFact",
            metric=metric,
            score=float(value),
            bytes_per_vector=16,
            fit_data=FIT_DATA,
            extra={"search": where, **extra},
        )
        for metric, value in figures.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--factor", type=float, default=10.0, help="rescoring factor F")
    parser.add_argument("--repeats", type=int, default=3, help="latency passes (best kept)")
    args = parser.parse_args()
    started = time.perf_counter()
    scifact = load_beir(resolve_data_dir(args.data_dir) / "beir" / "scifact")
    log(f"{scifact!r}: fitting the model on the corpus vectors")
    model = fitted_model(args.model, scifact, args.factor)
    log("in memory (demitasse eval)")
    memory = in_memory(model, scifact, args.repeats)
    with tempfile.TemporaryDirectory(prefix="demitasse-vectordb-") as tmp:
        log("through LanceDB")
        lance = through_lancedb(model, scifact, Path(tmp) / "db", args.repeats)
    load = os.getloadavg()[0]
    extra = {"k": K, "rescore": args.factor, "rescore_precision": "int8",
             "rescore_source": "encoder", "rotation": "itq", "omp_num_threads":
             os.environ.get("OMP_NUM_THREADS"), "load_1min": round(load, 2),
             "latency_repeats": args.repeats}  # fmt: skip
    records = records_of(model, memory, "in memory (demitasse eval)", extra)
    records += records_of(model, lance, "LanceDB (LanceStore)", extra)
    write_records(HERE / "results" / f"{NAME}.json", records)
    difference = lance["ndcg@10"] - memory["ndcg@10"]
    rows = [
        ["in memory (`demitasse eval`)", f"{memory['ndcg@10']:.2f}",
         f"{memory['latency_p50_ms']:.2f}", f"{memory['latency_p99_ms']:.2f}", "", ""],
        ["LanceDB (`demitasse index` / `search`)", f"{lance['ndcg@10']:.2f}",
         f"{lance['latency_p50_ms']:.2f}", f"{lance['latency_p99_ms']:.2f}",
         f"{lance['disk_bytes'] / 1e6:.2f} MB", f"{lance['disk_bytes_no_text'] / 1e6:.2f} MB"],
    ]  # fmt: skip
    headers = ["search", "nDCG@10", "p50 ms", "p99 ms", "table on disk", "without texts"]
    body = fill_section(
        RESULTS_MD, NAME, template(NAME),
        machine=machine_description(), wall_seconds=f"{time.perf_counter() - started:.0f}",
        load=f"{load:.2f}", documents=len(scifact.corpus_ids), queries=len(scifact.query_ids),
        factor=f"{args.factor:g}", candidates=math.ceil(K * args.factor), k=K,
        repeats=args.repeats, index_seconds=f"{lance['index_seconds']:.1f}",
        difference=f"{difference:+.2f}", tolerance=TOLERANCE,
        met="yes" if abs(difference) <= TOLERANCE else "no",
        table=markdown_table(headers, rows),
    )  # fmt: skip
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
