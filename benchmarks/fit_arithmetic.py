"""Fit arithmetic of the learned compressors: the floating-point work of each recipe's fit and
the least time these cores need for it.

Issue #31 asks for SMEC's unsupervised quality (`learned_compressors_100k`) from a fit of at
most 10 minutes on 2 cores. Each named recipe of grids/learned_compressors.toml is fitted here
on that benchmark's unsupervised setting (the same held-out unlabeled sentences and perturbed
copies, sample seed 0, compressor seed 0) under torch's FLOP counter, which counts the matrix
products, forward and backward. Element-wise work (activations, norms, top-k) is not counted, so
the count is a lower bound on the arithmetic. The same threads' float32 matrix-product rate,
the best over shapes these fits multiply, turns the count into a floor: the fit's time if every
product ran at that rate and nothing else took any. Each fit is then judged on the 7 STS test
sets, as learned_compressors.py judges it.

    python benchmarks/fit_arithmetic.py --data-dir ../shared/data --methods adaptor-fast,smec
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from _common import HERE, RESULTS_MD, log, log_progress, template
from demitasse.data import resolve_data_dir
from demitasse.encoders.resolve import cache_root
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.evaluation.efficiency import best_of
from demitasse.io import atomic_write_json, read_json
from demitasse.loading import load_encoder
from demitasse.report.tables import markdown_table
from lab import (
    Embedded,
    FitJob,
    FitSetting,
    evaluation_texts,
    held_out_unlabeled,
    judge,
    sts_and_scifact,
    unsupervised_setting,
)
from lab.templates import fill_section
from learned_compressors import GRID, make_fit

NAME = "fit_arithmetic"
STS_DIMS = [32, 16, 8]
WIDEST = 256
#: Products these fits multiply (rows × inner × outputs): a SMEC stage's hidden layer on a
#: batch and its refreshed neighbours, its output layer, the memory search, and one large
#: product for the machine's best case.
SHAPES = [(2304, 768, 512), (2304, 512, 256), (256, 384, 5000), (100_000, 384, 384)]


def matmul_rates(repeats: int = 10) -> dict[str, float]:
    """float32 GFLOP/s of ``torch.mm`` per shape (best of ``repeats``) on the set threads."""
    rates = {}
    for rows, inner, outputs in SHAPES:
        a, b = torch.randn(rows, inner), torch.randn(inner, outputs)
        best = best_of(lambda a=a, b=b: torch.mm(a, b), repeats=repeats)
        rates[f"{rows}x{inner}x{outputs}"] = 2 * rows * inner * outputs / best / 1e9
    return rates


class StepLog(logging.Handler):
    """Optimiser steps of each training run, read from the shared loop's validation lines
    (``step N: validation …``): a run's count restarts when the next stage starts."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.runs: list[int] = []
        self._last = 0

    def emit(self, record: logging.LogRecord) -> None:
        if not record.getMessage().startswith("step "):
            return
        args = record.args if isinstance(record.args, tuple) else (0,)
        step = int(str(args[0]))
        if step <= self._last or not self.runs:
            self.runs.append(0)
        self.runs[-1], self._last = step, step


class Fits:
    """Each finished fit's FLOPs, seconds, steps and STS records, kept in a JSON file (written
    atomically after every fit), so that an interrupted run resumes after its last fit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        saved = read_json(path) if path.is_file() else {}
        self.fits = {
            method: (
                fit["flops"],
                fit["seconds"],
                fit["steps"],
                [ResultRecord.from_dict(r) for r in fit["quality"]],
            )
            for method, fit in saved.items()
        }

    def add(
        self, method: str, flops: float, seconds: float, steps: list[int], quality: list[Any]
    ) -> None:
        self.fits[method] = (flops, seconds, steps, quality)
        saved = {
            name: {"flops": f, "seconds": s, "steps": n, "quality": [r.to_dict() for r in q]}
            for name, (f, s, n, q) in self.fits.items()
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, saved)


def counted_fit(method: str, setting: FitSetting, seed: int) -> tuple[Any, float, float, list[int]]:
    """The fitted compressor, its matrix-product FLOPs, wall seconds and steps per run."""
    compressor = make_fit(FitJob("unsupervised", method, seed), setting, WIDEST)
    steps = StepLog()
    loop_logger = logging.getLogger("demitasse.loop")
    loop_logger.addHandler(steps)
    loop_logger.setLevel(logging.INFO)
    try:
        with FlopCounterMode(display=False) as counter:
            started = time.perf_counter()
            compressor.fit(setting.vectors, fit_data=setting.fit_data, **setting.supervision)
            seconds = time.perf_counter() - started
    finally:
        loop_logger.removeHandler(steps)
    return compressor, float(counter.get_total_flops()), seconds, steps.runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--methods", default="adaptor-fast,smec-1epoch,smec")
    parser.add_argument("--n-unlabeled", type=int, default=100_000)
    parser.add_argument("--max-epochs", type=int, default=12, help="per SMEC stage / adaptor")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    log_progress()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    rates = matmul_rates()
    log(f"float32 matrix products, GFLOP/s: {rates}")
    data_dir = resolve_data_dir(args.data_dir)
    encoder = load_encoder(args.model)
    # SciFact too, so that the held-out sample is learned_compressors.py's.
    judged = sts_and_scifact(data_dir, STS_DIMS, GRID.retrieval_dims)
    texts = evaluation_texts(task for task, _ in judged)
    embedded = Embedded(encoder.name, texts, encoder.encode(texts))
    unlabeled = held_out_unlabeled(data_dir, args.n_unlabeled, args.seed, texts)
    setting = unsupervised_setting(
        encoder, unlabeled, encoder.encode(unlabeled), seed=args.seed, epochs=args.max_epochs,
        related_weight=GRID.settings.unsupervised.related_weight, judged=judged[:1],
    )  # fmt: skip
    work = f"{NAME}-{encoder.name}-{args.n_unlabeled}-{args.max_epochs}-seed{args.seed}.json"
    done = Fits(cache_root() / "benchmarks" / work)
    base = {"setting": "unsupervised", "seed": args.seed, "threads": args.threads}
    for method in args.methods.split(","):
        if method in done.fits:
            log(f"{method}: fitted in an earlier run, kept")
            continue
        log(f"fitting {method} under the FLOP counter")
        fitted, flops, seconds, steps = counted_fit(method, setting, args.seed)
        quality = judge(fitted, embedded, judged[:1], method=method, fit_data=setting.fit_data,
                        extra=base)  # fmt: skip
        done.add(method, flops, seconds, steps, quality)
    # Measured again after the fits, and the best of both kept: the floor must not be low.
    rates = {shape: max(rate, rates[shape]) for shape, rate in matmul_rates().items()}
    peak = max(rates.values())
    records, rows = [], []
    for method in args.methods.split(","):
        flops, seconds, steps, quality = done.fits[method]
        extra = {**base, "steps_per_run": steps, "peak_gflops": round(peak, 1)}
        sts = {r.dim: r.score for r in quality if r.dataset == "avg"}
        floor = flops / (peak * 1e9)
        arithmetic = {"tflop": flops / 1e12, "fit_seconds": seconds, "floor_seconds": floor,
                      "optimiser_steps": float(sum(steps))}  # fmt: skip
        records += quality
        for metric, value in arithmetic.items():
            records.append(ResultRecord(
                model=encoder.name, layer=None, method=method, dim=WIDEST, precision="float32",
                task="fit", dataset=setting.fit_data, metric=metric, score=value, extra=extra,
            ))  # fmt: skip
        rows.append([method, f"{flops / 1e12:.1f}", sum(steps), f"{seconds:.0f}", f"{floor:.0f}",
                     *(f"{sts[d]:.2f}" for d in STS_DIMS)])  # fmt: skip
    write_records(HERE / "results" / f"{NAME}.json", records)
    headers = ["recipe", "TFLOP", "optimiser steps", "fit s (counted)", "floor s",
               *(f"STS {d}" for d in STS_DIMS)]  # fmt: skip
    body = fill_section(
        RESULTS_MD, NAME, template(NAME),
        command="python benchmarks/fit_arithmetic.py " + " ".join(sys.argv[1:]),
        machine=machine_description(), threads=args.threads,
        wall_seconds=f"{time.perf_counter() - started:.0f}", n_fit=len(setting.vectors),
        load=f"{os.getloadavg()[0]:.1f}",
        rates=", ".join(f"{shape} {rate:.0f}" for shape, rate in rates.items()),
        peak=f"{peak:.0f}", table=markdown_table(headers, rows),
    )  # fmt: skip
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
