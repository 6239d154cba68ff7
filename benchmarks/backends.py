"""Encoder backends: torch float32 against ONNX Runtime float32 and int8, speed and STS quality.

For each model (all-MiniLM-L6-v2 and all-mpnet-base-v2) and each layer cut (the full depth and
half of it), three encoders are loaded, one per backend (``torch``, ``onnx``, ``onnx-int8``):

- speed: sentences/s of ``encoder.encode(texts, layer=L, batch_size=64)`` on a fixed sample of
  STS-B train sentences (no embedding cache), best of 5 rounds, every (backend, cut) timed
  round-robin so that a burst of other work on the machine spreads over all of them; torch and
  ONNX Runtime both use ``--threads`` threads. The timed part holds
  ``/tmp/demitasse-bench.lock`` so that no other timing run overlaps it;
- quality: Spearman × 100 on STS12–16, STS-B test and SICK-R and their average, with the
  backend's own vectors at each cut (the embedding cache keys each backend apart).
  ``--limit N`` scores the first N pairs of each set (the full sets cost about half an hour per
  backend and model on two busy cores), the same pairs for every backend.

Each model's comparison is one run; a run of some ``--models`` keeps the other models' records
(with the command that made them in ``extra.command``) in results/backends.json.

    python benchmarks/backends.py --data-dir ../shared/data --models all-MiniLM-L6-v2 --limit 300
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import torch

from _common import HERE, RESULTS_MD, log, template
from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import stsb_fit_sentences
from demitasse.encoders import TransformerEncoder
from demitasse.encoders.backends import INT8_OPTIONS, instruction_sets
from demitasse.encoders.base import BACKENDS
from demitasse.encoders.transformer import load_transformer
from demitasse.evaluation import ResultRecord, build_tasks, evaluate_grid, machine_description
from demitasse.evaluation.efficiency import thread_counts, time_interleaved
from demitasse.evaluation.records import read_records, write_records
from demitasse.report import markdown_table
from lab.templates import fill_section

NAME = "backends"
RESULTS = HERE / "results" / f"{NAME}.json"
LOCK = Path("/tmp/demitasse-bench.lock")
MODELS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")


@contextlib.contextmanager
def bench_lock(wait: float) -> Iterator[bool]:
    """Hold the machine's benchmark lock (as ``flock /tmp/demitasse-bench.lock`` does) if it
    comes within ``wait`` seconds; yields whether it is held (the records say so)."""
    with LOCK.open("a") as handle:
        log(f"waiting up to {wait:.0f} s for {LOCK}")
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    log(f"{LOCK} still held by another run: timing without it")
                    held = False
                    break
                time.sleep(5)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(handle, fcntl.LOCK_UN)


def load_all(model: str) -> dict[str, TransformerEncoder]:
    """One encoder per backend; the ONNX graphs are exported (or found) on first use."""
    return {b: load_transformer(model, cache=False, backend=b, device="cpu") for b in BACKENDS}


def measure_speed(
    model: str, cuts: list[int], texts: list[str], args: argparse.Namespace
) -> list[ResultRecord]:
    encoders = load_all(model)
    runs, keys = [], []
    for backend, encoder in encoders.items():
        for layer in cuts:
            encoder.encode(texts[:64], layer=layer, batch_size=64)  # exports, then warms up
            runs.append(partial(encoder.encode, texts, layer=layer, batch_size=args.batch_size))
            keys.append((backend, layer))
    with bench_lock(args.lock_wait) as held:
        load_before = round(os.getloadavg()[0], 2)
        timings = time_interleaved(runs, repeats=args.repeats)
        load_after = round(os.getloadavg()[0], 2)
    extra = {"n_texts": len(texts), "batch_size": args.batch_size, "repeats": args.repeats,
             "bench_lock_held": held,
             **thread_counts(), "ort_intra_op_threads": torch.get_num_threads(),
             "load_1m_before": load_before, "load_1m_after": load_after}  # fmt: skip
    dim = next(iter(encoders.values())).dim
    return [
        ResultRecord(
            model=model,
            layer=layer,
            method="none",
            dim=dim,
            precision="float32",
            task="efficiency",
            dataset="encode",
            metric="sentences_per_s",
            score=len(texts) / timing.best,
            extra={**extra, "backend": backend, "best_s": timing.best, "median_s": timing.median},
        )
        for (backend, layer), timing in zip(keys, timings, strict=True)
    ]


def measure_quality(
    model: str, cuts: list[int], limit: int | None, args: argparse.Namespace
) -> list[ResultRecord]:
    tasks = build_tasks(["sts"], args.data_dir, sts_datasets="all", limit=limit)
    records = []
    for backend in BACKENDS:
        log(
            f"{model} {backend}: STS at layers {cuts}" + (f", {limit} pairs a set" if limit else "")
        )
        encoder = load_transformer(model, backend=backend, device="cpu")
        encoder.show_progress = True
        found = evaluate_grid(encoder, tasks, specs=parse_compressor_specs("none"),
                              dims=[encoder.dim], layers=cuts)  # fmt: skip
        for record in found:
            record.extra = {**(record.extra or {}), "backend": backend, "pairs_per_set": limit}
        records += found
        del encoder
    return records


def timing_extras(records: list[ResultRecord]) -> dict[str, dict[str, Any]]:
    """Each model's facts of its timed rounds (every speed record of a model shares them)."""
    return {r.model: r.extra for r in records if r.metric == "sentences_per_s"}


def load_note(records: list[ResultRecord]) -> str:
    return "; ".join(f"{model} {extra.get('load_1m_before')} → {extra.get('load_1m_after')}"
                     for model, extra in timing_extras(records).items())  # fmt: skip


def lock_note(records: list[ResultRecord]) -> str:
    return "; ".join(f"{model}: {'held' if extra.get('bench_lock_held') else 'not held'}"
                     for model, extra in timing_extras(records).items())  # fmt: skip


def rows_of(records: list[ResultRecord]) -> list[list[object]]:
    """One row per model, cut and backend: speed, its ratio to torch, STS average and loss."""
    speed = {(r.model, r.layer, r.extra["backend"]): r.score for r in records
             if r.metric == "sentences_per_s"}  # fmt: skip
    sts = {(r.model, r.layer, r.extra["backend"]): r for r in records
           if r.task == "sts" and r.dataset == "avg"}  # fmt: skip
    rows = []
    for model, layer, backend in speed:
        rate, base = speed[(model, layer, backend)], speed[(model, layer, "torch")]
        quality, reference = sts.get((model, layer, backend)), sts.get((model, layer, "torch"))
        limit = quality.extra.get("pairs_per_set") if quality else None
        rows.append([
            model, layer, backend, f"{rate:.0f}", f"{rate / base:.2f}×",
            quality.score if quality else None,
            quality.score - reference.score if quality and reference else None,
            f"first {limit} pairs of each" if limit else "all pairs",
        ])  # fmt: skip
    return rows


def plot(records: list[ResultRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MODELS), figsize=(10, 4))
    for ax, model in zip(axes, MODELS, strict=True):
        for backend, marker in zip(BACKENDS, "osD", strict=True):
            mine = [r for r in records if r.model == model and r.extra.get("backend") == backend]
            points = []
            for r in (r for r in mine if r.metric == "sentences_per_s"):
                avg = [q.score for q in mine if q.dataset == "avg" and q.layer == r.layer]
                if avg:
                    points.append((r.score, avg[0], r.layer))
            ax.scatter([p[0] for p in points], [p[1] for p in points], marker=marker, label=backend)
            for x, y, layer in points:
                ax.annotate(f"L{layer}", (x, y), fontsize=8)
        ax.set(title=model, xlabel="sentences/s (2 threads)", ylabel="STS average (Spearman×100)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int, default=2, help="torch and ONNX Runtime threads")
    parser.add_argument("--texts", type=int, default=512, help="sentences timed per round")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--lock-wait",
        type=float,
        default=3600.0,
        help="seconds to wait for the benchmark lock before timing without it",
    )
    parser.add_argument("--limit", type=int, default=None,
                        help="score the first N pairs of each STS set")  # fmt: skip
    args = parser.parse_args()
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    texts = list(dict.fromkeys(stsb_fit_sentences(args.data_dir)))[: args.texts]
    command = " ".join(["python benchmarks/backends.py", *sys.argv[1:]])
    records = read_records(RESULTS) if RESULTS.is_file() else []
    for model in args.models.split(","):
        layers = load_transformer(model, cache=False, device="cpu").num_layers
        cuts = [layers // 2, layers]
        log(f"{model}: timing {len(BACKENDS)} backends at layers {cuts}")
        # Quality first: it needs no lock, and the lock may be held by a long run meanwhile.
        found = measure_quality(model, cuts, args.limit, args)
        found = measure_speed(model, cuts, texts, args) + found
        for record in found:
            record.extra["command"] = command
        records = [r for r in records if r.model != model] + found
        write_records(RESULTS, records)  # each model's comparison as soon as it is complete
    plot(records, HERE / "results" / f"{NAME}.png")
    headers = ["model", "layer", "backend", "sentences/s", "÷ torch", "STS avg",
               "Δ STS vs torch", "STS pairs"]  # fmt: skip
    body = fill_section(
        RESULTS_MD, NAME, template(NAME),
        machine=machine_description(), wall_seconds=f"{time.perf_counter() - started:.0f}",
        isa=", ".join(instruction_sets()) or "unknown", threads=args.threads,
        texts=len(texts), repeats=args.repeats, batch=args.batch_size,
        int8=", ".join(f"{k}={v}" for k, v in INT8_OPTIONS.items()),
        table=markdown_table(headers, rows_of(records)),
        lock=lock_note(records), loads=load_note(records),
        commands="; ".join(f"`{c}`" for c in dict.fromkeys(r.extra["command"] for r in records)),
    )  # fmt: skip
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
