"""Learned width compressors (Matryoshka-Adaptor, SMEC and its ablations) vs PCA and truncation.

all-MiniLM-L6-v2, 7-set STS average (test splits) at 256…8 dims, in two settings reported
separately: *unsupervised* (compressors and PCA fitted on unlabeled sentences only) and
*supervised* (the same sentences plus STS-B train and SICK train less every STS test or dev
pair, whose scores drive a CoSENT term); SciFact test nDCG@10 at 128/64/32 for both. A third
setting, *retrieval*, is the Search-Adaptor one: every compressor fitted on the SciFact corpus
and train queries, the learned ones with the rank loss on the train qrels; it is judged on
SciFact test only. Also transform throughput next to PCA's. Loss weights were chosen on STS-B
dev, SICK trial and 160 held-out SciFact train queries; test figures come from this single run.
The learned compressors, SMEC's mode per setting and the targets: grids/learned_compressors.toml.

    python benchmarks/learned_compressors.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _common import HERE, RESULTS_MD, grid, log, log_progress, template
from demitasse.compress import Compressor, load_compressor, make_compressor
from demitasse.data import resolve_data_dir
from demitasse.encoders import Encoder
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.evaluation.efficiency import measure_transform_throughput
from demitasse.loading import load_encoder
from demitasse.report import markdown_table, plot_quality_vs_dim
from lab import (
    Embedded,
    FitJob,
    FitOutcome,
    FitSetting,
    Judged,
    evaluation_texts,
    fit_and_judge,
    held_out_sts_training,
    held_out_unlabeled,
    judge,
    retrieval_setting,
    run_in_workers,
    seed_jobs,
    sts_and_scifact,
    summarise_seeds,
    supervised_setting,
    unsupervised_setting,
)
from lab.results_file import update_section
from lab.templates import join_blocks

SETTINGS = ("unsupervised", "supervised", "retrieval")
BASELINES = ("truncate", "pca")
THROUGHPUT_DIMS = (32, 8)  # beside the widest


@dataclass(frozen=True)
class Method:
    """A learned compressor: its registry name and options."""

    compressor: str
    options: dict[str, Any]


@dataclass(frozen=True)
class Unsupervised:
    smec_mode: dict[str, Any]
    related_weight: float  # sentence / perturbed-copy pairs, every learned compressor
    target_gain: dict[int, float]  # SMEC over max(PCA, truncation), per width


@dataclass(frozen=True)
class Supervised:
    smec_mode: dict[str, Any]
    target: dict[int, float]  # SMEC's STS average, per width


@dataclass(frozen=True)
class Retrieval:
    smec_mode: dict[str, Any]
    target_gap: float  # SMEC's nDCG@10 at 64 dims within this of the full model's


@dataclass(frozen=True)
class Settings:
    """SMEC's mode per setting, the setting's loss weight where the grid sets it, targets."""

    unsupervised: Unsupervised
    supervised: Supervised
    retrieval: Retrieval


@dataclass(frozen=True)
class Grid:
    retrieval_dims: list[int]
    methods: dict[str, Method]
    settings: Settings


GRID = grid("learned_compressors", Grid)
PROSE = template("learned_compressors")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--dims", default="256,128,64,32,16,8")
    parser.add_argument("--n-unlabeled", type=int, default=10000)
    parser.add_argument(
        "--n-unlabeled-supervised",
        type=int,
        default=2000,
        help="unlabeled sentences mixed into the supervised setting (chosen on dev)",
    )
    parser.add_argument("--max-epochs", type=int, default=8, help="per SMEC stage / adaptor")
    parser.add_argument("--retrieval-epochs", type=int, default=20, help="retrieval setting")
    # Chosen on STS-B dev + SICK trial for SMEC with the clean pairs (2k unlabeled sentences):
    # weights 0 / 0.2 / 0.5 / 5 gave a mean of 68.1 / 69.1 / 73.7 / 72.2 at 8 dims.
    parser.add_argument("--cosent-weight", type=float, default=0.5)
    parser.add_argument("--rank-weight", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0, help="unlabeled sample and perturbations")
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds of the learned compressors: each is fitted once per seed "
        "and its rows are the mean (default: one fit at the library's default seed)",
    )
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--methods", default=",".join(GRID.methods), help="learned ones to fit")
    parser.add_argument("--no-retrieval", action="store_true")
    parser.add_argument("--workers", type=int, default=2, help="fits run in parallel")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per fit (with --workers 1, the cores one fit gets, for fit times)",
    )
    parser.add_argument("--results-name", default="learned_compressors")
    args = parser.parse_args()
    args.seed_list = [None]
    if args.seeds is not None:
        try:
            args.seed_list = [int(seed) for seed in args.seeds.split(",")]
        except ValueError:
            parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    args.settings = args.settings.split(",")
    args.methods = args.methods.split(",")
    if unknown := set(args.settings) - set(SETTINGS):
        parser.error(f"unknown setting {sorted(unknown)[0]!r}; known: {', '.join(SETTINGS)}")
    if unknown := set(args.methods) - set(GRID.methods):
        parser.error(f"unknown method {sorted(unknown)[0]!r}; known: {', '.join(GRID.methods)}")
    args.dims = [int(d) for d in args.dims.split(",")]
    return args


def fit_settings(
    args: argparse.Namespace, encoder: Encoder, data_dir: Path, judged: Judged, evaluated: list[str]
) -> tuple[dict[str, FitSetting], dict[str, Any]]:
    """The chosen settings' fit data, and the facts about it the RESULTS section gives."""
    stsb, sick = held_out_sts_training(data_dir)
    unlabeled = held_out_unlabeled(data_dir, args.n_unlabeled, args.seed, evaluated)
    log(f"encoding {len(unlabeled)} unlabeled sentences (cached after the first run)")
    unlabeled_vectors = encoder.encode(unlabeled)
    n_mixed = min(args.n_unlabeled_supervised, len(unlabeled))
    related_weight = GRID.settings.unsupervised.related_weight
    settings: dict[str, FitSetting] = {}
    if "unsupervised" in args.settings:
        settings["unsupervised"] = unsupervised_setting(
            encoder, unlabeled, unlabeled_vectors, seed=args.seed, related_weight=related_weight,
            epochs=args.max_epochs, judged=judged,
        )  # fmt: skip
    if "supervised" in args.settings:
        settings["supervised"] = supervised_setting(
            encoder, unlabeled_vectors[:n_mixed], stsb, sick, cosent_weight=args.cosent_weight,
            epochs=args.max_epochs, judged=judged,
        )  # fmt: skip
    if not args.no_retrieval and "retrieval" in args.settings:
        settings["retrieval"] = retrieval_setting(
            encoder, data_dir, rank_weight=args.rank_weight, epochs=args.retrieval_epochs,
            judged=judged[1:],
        )  # fmt: skip
    facts = {"n_unlabeled": len(unlabeled), "n_mixed": n_mixed, "n_stsb": len(stsb),
             "n_sick": len(sick), "related_weight": f"{related_weight:g}"}  # fmt: skip
    return settings, facts


def smec_mode(setting: str) -> dict[str, Any]:
    mode: dict[str, Any] = getattr(GRID.settings, setting).smec_mode
    return mode


def make_fit(job: FitJob, setting: FitSetting, widest: int) -> Compressor:
    """The compressor of ``job``: a baseline at the widest dim, or a learned one with the
    setting's loss weights and epochs (and SMEC's mode in that setting)."""
    if job.method not in GRID.methods:
        return make_compressor(job.method, dim=widest)
    method = GRID.methods[job.method]
    mode = smec_mode(job.setting) if method.compressor == "smec" else {}
    seeded = {} if job.seed is None else {"seed": job.seed}
    # A method's own options (a fast recipe's epochs, say) win over the setting's.
    options = {"max_epochs": setting.epochs, **setting.params, **mode, **method.options}
    return make_compressor(method.compressor, **options, **seeded)


def fit_all(
    args: argparse.Namespace, settings: dict[str, FitSetting], embedded: Embedded, saved: Path
) -> list[FitOutcome]:
    """Every fit, in parallel worker processes (one torch thread each), slowest first; the
    unsupervised fits of the first seed are saved for the throughput measurement."""

    def fit(job: FitJob) -> FitOutcome:
        compressor = make_fit(job, settings[job.setting], max(args.dims))
        learned = job.method in GRID.methods
        outcome = fit_and_judge(job, compressor, settings[job.setting], embedded, learned=learned)
        first_seed = job.seed in (None, args.seed_list[0])
        if job.setting == "unsupervised" and job.method != "truncate" and first_seed:
            compressor.save(saved / job.method)
        return outcome

    jobs = seed_jobs(settings, BASELINES, args.methods, args.seed_list)
    jobs.sort(key=lambda job: (job.setting != "unsupervised", not job.method.startswith("smec")))
    return list(run_in_workers(fit, jobs, workers=args.workers, threads=args.threads))


def ordered(records: list[ResultRecord], settings: Sequence[str], methods: Sequence[str]) -> None:
    """Sort by setting (the reference rows first), method as shown, seed."""
    shown = ["none", *BASELINES, *methods]
    rank = {"all": -1, **{setting: i for i, setting in enumerate(settings)}}
    records.sort(
        key=lambda r: (rank[r.extra["setting"]], shown.index(r.method), r.extra.get("seed", -1))
    )


def throughput_rows(embedded: Embedded) -> np.ndarray:
    return embedded.vectors[:20000]


def throughput(
    args: argparse.Namespace, saved: Path, embedded: Embedded, fitted: bool
) -> list[ResultRecord]:
    """Transform throughput of the saved unsupervised fits, on an otherwise idle process."""
    rows = throughput_rows(embedded)
    records: list[ResultRecord] = []
    for name in ["pca", *args.methods] if fitted else []:
        records += measure_transform_throughput(
            load_compressor(saved / name), rows, [max(args.dims), *THROUGHPUT_DIMS], label=name,
            model=embedded.model, layer=None, repeats=3,
        )  # fmt: skip
    return records


def main() -> int:
    args = parse_args()
    log_progress()
    started = time.perf_counter()
    # Workers too: settings run side by side on separate cores, unless --threads says more.
    torch.set_num_threads(args.threads)
    data_dir = resolve_data_dir(args.data_dir)
    encoder = load_encoder(args.model)
    judged = sts_and_scifact(
        data_dir, args.dims, None if args.no_retrieval else GRID.retrieval_dims
    )
    texts = evaluation_texts(task for task, _ in judged)
    log(f"encoding {len(texts)} evaluation texts")
    embedded = Embedded(encoder.name, texts, encoder.encode(texts))
    settings, facts = fit_settings(args, encoder, data_dir, judged, texts)
    reference = [(task, [encoder.dim]) for task, _ in judged]
    records = judge(None, embedded, reference, method="none", fit_data=None,
                    extra={"setting": "all"})  # fmt: skip
    saved = Path(tempfile.mkdtemp(prefix="learned_compressors-"))
    outcomes = fit_all(args, settings, embedded, saved)
    records += [record for outcome in outcomes for record in outcome.records]
    ordered(records, list(settings), args.methods)
    # Tables and checks read the mean over seeds; the JSON keeps every seed's rows as well.
    seeds = summarise_seeds(records, outcomes, seeded=args.seeds is not None)
    speed = throughput(args, saved, embedded, "unsupervised" in settings)
    shutil.rmtree(saved, ignore_errors=True)
    elapsed = time.perf_counter() - started
    write_records(
        HERE / "results" / f"{args.results_name}.json", seeds.averaged + seeds.per_seed + speed
    )
    sections = [
        describe_setting(args, setting, seeds.averaged, seeds.fit_seconds, encoder)
        for setting in settings.values()
    ]
    head = PROSE.fill(**run_facts(args, encoder, settings, elapsed), **facts)
    speed_table = throughput_table(speed, [max(args.dims), *THROUGHPUT_DIMS])
    tail = PROSE.fill("throughput", n_throughput=len(throughput_rows(embedded)), table=speed_table)
    body = join_blocks(head, *sections, tail)
    update_section(RESULTS_MD, args.results_name, body)
    print(body)
    return 0


def fitting_note(workers: int, threads: int) -> str:
    """How the fits shared the machine (``run_in_workers`` runs them here when workers <= 1)."""
    if workers > 1:
        return (f"The settings were fitted in parallel ({workers} worker processes, {threads} "
                "torch thread(s) and one fit at a time each); fit times are wall seconds inside "
                "a worker")  # fmt: skip
    return (f"The fits ran one after another in the main process with {threads} torch "
            "thread(s); fit times are wall seconds of each fit")  # fmt: skip


def method_label(name: str) -> str:
    """A learned method's grid name, with the options that set it apart from its compressor's
    defaults beyond the widths (``dim``, ``min_dim``)."""
    options = {k: v for k, v in GRID.methods[name].options.items() if k not in ("dim", "min_dim")}
    if not options:
        return name
    return f"{name} ({', '.join(f'{k} {v}' for k, v in options.items())})"


def run_facts(
    args: argparse.Namespace, encoder: Encoder, settings: dict[str, FitSetting], elapsed: float
) -> dict[str, Any]:
    """The values of the section's opening paragraph that are not about the data."""
    seeds_note = "" if args.seeds is None else PROSE.fill("seeds_note", seeds=args.seeds)
    subset_note = ""
    if list(settings) != list(SETTINGS) or args.methods != list(GRID.methods):
        subset_note = PROSE.fill(
            "subset_note",
            setting_names=", ".join(settings),
            method_names=", ".join(map(method_label, args.methods)),
        )
    return {
        "results_name": args.results_name,
        "arguments": " ".join(sys.argv[1:]),
        "machine": machine_description(),
        "wall_seconds": f"{elapsed:.0f}",
        "load": f"{os.getloadavg()[0]:.1f}",
        "model": encoder.name,
        "pooling": encoder.pooling,  # type: ignore[attr-defined]
        "seed": args.seed,
        "cosent_weight": f"{args.cosent_weight:g}",
        "rank_weight": f"{args.rank_weight:g}",
        "pairwise_weight": f"{GRID.settings.unsupervised.smec_mode['pairwise_weight']:g}",
        "fitting": fitting_note(args.workers, args.threads),
        "seeds_note": seeds_note,
        "subset_note": subset_note,
    }


def describe_setting(
    args: argparse.Namespace,
    setting: FitSetting,
    records: list[ResultRecord],
    fit_seconds: dict[tuple[str, str], float],
    encoder: Encoder,
) -> str:
    """One setting's subsection: its fit data, tables, target check, fit times and plot."""
    model, full_dim = encoder.name, encoder.dim
    rows = [r for r in records if r.extra.get("setting") in (setting.name, "all")]
    on_sts = any(task.name == "sts" for task, _ in setting.judged)
    plot = plot_quality_vs_dim(
        [r for r in rows if r.method != "none"],
        HERE / "results" / f"{args.results_name}_{setting.name}.png",
        "sts" if on_sts else "retrieval",
        title=f"{model}: learned compressors, {setting.name} ({setting.fit_data})",
    )
    mode = smec_mode(setting.name)
    weights = ", ".join(f"{k} {v:g}" for k, v in setting.params.items())
    ndcg = score_table(rows, "retrieval", "SciFact", "ndcg@10")
    blocks = [
        PROSE.fill(
            "setting",
            title=setting.name.capitalize(),
            fit_data=setting.fit_data,
            n_rows=len(setting.vectors),
            epochs=setting.epochs,
            mode=", ".join(f"{k}={v}" for k, v in mode.items()) or "library defaults",
            weights=weights or "no supervised term",
        ),
    ]
    if on_sts:
        table = avg_table(rows, "sts", "avg", "spearman", [full_dim, *args.dims])
        blocks.append(PROSE.fill("sts_average", table=table))
        if len(args.seed_list) > 1:
            table = avg_table(rows, "sts", "avg", "spearman", args.dims, spread=True)
            blocks.append(PROSE.fill("sts_spread", table=table, n_seeds=len(args.seed_list)))
    check = target_check(setting.name, rows, full_dim)
    blocks.append(PROSE.fill("target_check", table=check or "(SMEC not fitted in this run)"))
    if ndcg:
        table = avg_table(rows, "retrieval", "SciFact", "ndcg@10", [full_dim, *GRID.retrieval_dims])
        blocks.append(PROSE.fill("scifact", table=table))
    fits = ", ".join(f"{name} {fit_seconds[setting.name, name]:.0f} s" for name in args.methods)
    blocks.append(PROSE.fill("fit_time", fits=fits, plot=plot.name))
    return join_blocks(*blocks)


def score_table(
    records: Sequence[ResultRecord], task: str, dataset: str, metric: str
) -> dict[tuple[str, int], float]:
    """(method, dim) -> score of one task, data set and metric."""
    return {
        (r.method, r.dim): r.score
        for r in records
        if (r.task, r.dataset, r.metric) == (task, dataset, metric)
    }


def target_check(setting: str, rows: Sequence[ResultRecord], full_dim: int) -> str:
    """The setting's target table, or "" when SMEC was not fitted."""
    targets = GRID.settings
    avg = score_table(rows, "sts", "avg", "spearman")
    if setting == "unsupervised":
        gains = targets.unsupervised.target_gain
        best = {d: max(avg["pca", d], avg["truncate", d]) for d in gains}
        check = [
            [d, round(avg["smec", d], 2), round(best[d], 2), round(avg["smec", d] - best[d], 2),
             f"+{gain}"]
            for d, gain in gains.items() if ("smec", d) in avg
        ]  # fmt: skip
        header = ["dim", "SMEC", "best of PCA/trunc.", "gain", "target gain"]
    elif setting == "supervised":
        goals = targets.supervised.target
        check = [
            [d, round(avg["smec", d], 2), goal] for d, goal in goals.items() if ("smec", d) in avg
        ]
        header = ["dim", "SMEC", "target"]
    else:
        ndcg = score_table(rows, "retrieval", "SciFact", "ndcg@10")
        full, smec = ndcg["none", full_dim], ndcg.get(("smec", 64))
        check = [] if smec is None else [
            [64, round(smec, 2), round(full, 2), round(smec - full, 2),
             f">= -{targets.retrieval.target_gap}"]
        ]  # fmt: skip
        header = ["dim", "SMEC nDCG@10", "full model", "gap", "target gap"]
    return markdown_table(header, check) if check else ""


def avg_table(
    records: Sequence[ResultRecord],
    task: str,
    dataset: str,
    metric: str,
    dims: Sequence[int],
    spread: bool = False,
) -> str:
    """Method × dim table of scores, or with ``spread`` of their standard deviation over seeds
    (methods fitted with one seed or none left out)."""
    chosen = [r for r in records if (r.task, r.dataset, r.metric) == (task, dataset, metric)]
    if spread:
        chosen = [r for r in chosen if len(r.extra.get("seeds", ())) > 1]
    methods = list(dict.fromkeys(r.method for r in chosen))
    score = {(r.method, r.dim): r.extra["score_std"] if spread else r.score for r in chosen}
    rows = [[m, *(round(score[m, d], 2) if (m, d) in score else "" for d in dims)] for m in methods]
    return markdown_table(["method", *map(str, dims)], rows)


def throughput_table(records: Sequence[ResultRecord], widths: Sequence[int]) -> str:
    rate = {(r.method, r.dim): r.score for r in records}
    rows = [[m, *(f"{rate[m, d]:,.0f}" for d in widths)]
            for m in dict.fromkeys(r.method for r in records)]  # fmt: skip
    return markdown_table(["method", *(f"dim {d}" for d in widths)], rows)


if __name__ == "__main__":
    sys.exit(main())
