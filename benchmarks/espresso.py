"""Espresso (ESE) against RAW and Matryoshka (MRL) fine-tuning under one budget, plus ablations.

Every model starts from the same backbone and sees the same data, batches and steps (SNLI
triples with contradictions as hard negatives, STS-B train and SICK train scored pairs; AnglE
loss); checkpoints are chosen on STS-B dev. Each is scored on the 7 STS test sets at every
layer × {full, 256, 128, 64, 32, 16, 8} dimensions (truncation). ≺Avg is the mean over layers
1..n−1 at full width, as in the paper's Table 1. The ablations of the paper's Table 2
(compression strategy, layer weighting) run on a shortened schedule, with an ESE run on that
same schedule as their reference.

    python benchmarks/espresso.py --data-dir ../shared/data

Runs are kept under --runs-dir and resume when interrupted; a finished run is not retrained.
With --dev-only the finished runs are scored on STS-B dev alone and the acceptance checks
printed, so a new candidate (another rate, say) is compared with earlier ones before any test
set sees it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import ScoredPairs, load_sts_suite, load_stsb
from demitasse.encoders.resolve import cache_root
from demitasse.evaluation import (
    ResultRecord,
    STSTask,
    evaluate_grid,
    machine_description,
    write_records,
)
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import plot_layer_heatmap
from demitasse.report.results_file import update_section
from demitasse.training import SentenceModel, TrainingConfig, fine_tune
from demitasse.training.espresso import (
    OWN_PARAMETERS_LEARNING_RATE,
    REFERENCE_CODE,
    own_learning_rate,
)
from demitasse.training.recipes import (
    DEFAULT_TRAINING_DATA,
    load_training_sets,
    make_objective,
    split_options,
)

HERE = Path(__file__).resolve().parent
DIMS = (256, 128, 64, 32, 16, 8)
# name -> (method, Espresso options); the main runs, then the Table 2 ablations.
BASELINES: dict[str, tuple[str, dict[str, Any]]] = {
    "raw": ("raw", {}),
    "mrl": ("mrl", {}),
}
NESTED_DIMS = (128, 64, 32)  # k and its next two halvings
NESTED_TO_8 = (128, 64, 32, 16, 8)  # k and every halving down to MRL's smallest
# ESE variants (--ese): the paper's objective, and the reference AnglE code's.
ESE_VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {},
    "code": dict(REFERENCE_CODE),
    "code-summed": {**REFERENCE_CODE, "inner_reduction": "sum"},
    "nested": {"matryoshka_dims": NESTED_DIMS},
    "nested-0.75": {"matryoshka_dims": NESTED_DIMS, "express_weight": 0.75},
    "nested-0.5": {"matryoshka_dims": NESTED_DIMS, "express_weight": 0.5},
    "nested8-0.75": {"matryoshka_dims": NESTED_TO_8, "express_weight": 0.75},
    "nested8-0.5": {"matryoshka_dims": NESTED_TO_8, "express_weight": 0.5},
    "paper-priority": {"gradient_priority": True},
    "nested-priority": {"matryoshka_dims": NESTED_DIMS, "gradient_priority": True},
    "paper-decoupled": {"decoupled_updates": True},
    "nested-decoupled": {"matryoshka_dims": NESTED_DIMS, "decoupled_updates": True},
    "nested-decoupled-0.5": {
        "matryoshka_dims": NESTED_DIMS,
        "decoupled_updates": True,
        "inner_rate": 0.5,
    },
    "nested-decoupled-0.25": {
        "matryoshka_dims": NESTED_DIMS,
        "decoupled_updates": True,
        "inner_rate": 0.25,
    },
    "nested-decoupled-uniform-0.35": {
        "matryoshka_dims": NESTED_DIMS,
        "decoupled_updates": True,
        "inner_rate": 0.35,
        "layer_weighting": "none",
    },
    "nested-heads-decoupled-0.25": {
        "matryoshka_dims": NESTED_DIMS,
        "decoupled_updates": True,
        "inner_rate": 0.25,
        "exit_heads": True,
    },
    "nested-heads-decoupled-0": {
        "matryoshka_dims": NESTED_DIMS,
        "decoupled_updates": True,
        "inner_rate": 0.0,
        "exit_heads": True,
    },
    "nested8-heads-decoupled-0.25": {
        "matryoshka_dims": NESTED_TO_8,
        "decoupled_updates": True,
        "inner_rate": 0.25,
        "exit_heads": True,
    },
    "nested8-heads-decoupled-0.1": {
        "matryoshka_dims": NESTED_TO_8,
        "decoupled_updates": True,
        "inner_rate": 0.1,
        "exit_heads": True,
    },
    "nested8-heads-decoupled-0.25-inner-compress": {
        "matryoshka_dims": NESTED_TO_8,
        "decoupled_updates": True,
        "inner_rate": 0.25,
        "exit_heads": True,
        "compress_last": False,
    },
    "nested8-heads-decoupled-0": {
        "matryoshka_dims": NESTED_TO_8,
        "decoupled_updates": True,
        "inner_rate": 0.0,
        "exit_heads": True,
    },
}
ESE_DESCRIPTIONS = {
    "paper": "the paper's objective (Eq. 2 and Eqs. 3–6)",
    "code": "the reference AnglE code's objective (hidden states 0..n−2, A_k·diag(s), inner "
    "layers averaged, the loss also on the first k dims)",
    "code-summed": "the reference AnglE code's objective with the inner layers' terms summed "
    "as in Eq. 2 instead of averaged",
    "nested": "the paper's objective plus the base loss on the last layer's first 128, 64 and "
    "32 dims (k and two halvings; an extension beyond the paper)",
    "nested-0.75": "as `nested`, with alpha = 0.75 (the inner layers' express terms weigh "
    "three quarters)",
    "nested-0.5": "as `nested`, with alpha = 0.5 (the inner layers' express terms weigh half)",
    "nested8-0.75": "as `nested-0.75`, with the prefixes 128, 64, 32, 16 and 8",
    "nested8-0.5": "as `nested-0.5`, with the prefixes 128, 64, 32, 16 and 8",
    "paper-priority": "the paper's objective with gradient priority for the last layer (the "
    "inner layers' gradient loses its component against the last layer's where they conflict, "
    "per parameter tensor; an extension beyond the paper)",
    "nested-priority": "as `nested`, with gradient priority for the last layer",
    "paper-decoupled": "the paper's objective with decoupled updates (the last layer's terms "
    "and the inner layers' terms each get their own AdamW moments; an extension beyond the "
    "paper)",
    "nested-decoupled": "as `nested`, with decoupled updates",
    "nested-decoupled-0.5": "as `nested-decoupled`, the inner layers' update at half the rate",
    "nested-decoupled-0.25": "as `nested-decoupled`, the inner layers' update at a quarter of "
    "the rate",
    "nested-decoupled-uniform-0.35": "as `nested-decoupled`, the inner layers' update at 0.35 "
    "of the rate and every inner layer weighted 1",
    "nested-heads-decoupled-0.25": "as `nested-decoupled-0.25`, with a linear exit head per "
    "inner layer (fitted at the head rate; an extension beyond the paper)",
    "nested-heads-decoupled-0": "as `nested-heads-decoupled-0.25`, the inner layers' terms "
    "training only the exit heads (the encoder moves for the last layer's terms alone)",
    "nested8-heads-decoupled-0.25": "as `nested-heads-decoupled-0.25`, with the prefixes 128, "
    "64, 32, 16 and 8",
    "nested8-heads-decoupled-0.1": "as `nested8-heads-decoupled-0.25`, the inner layers' update "
    "at a tenth of the rate",
    "nested8-heads-decoupled-0.25-inner-compress": "as `nested8-heads-decoupled-0.25`, with "
    "learn-to-compress on the inner layers only (the last layer's prefixes trained by the "
    "prefix losses alone)",
    "nested8-heads-decoupled-0": "as `nested-heads-decoupled-0`, with the prefixes 128, 64, 32, "
    "16 and 8",
}
# --loss: the base loss every run wraps.
LOSS_DESCRIPTIONS = {
    "angle": "AnglE loss (CoSENT + in-batch negatives + magnitude-weighted angle, weights 1, "
    "scale 20)",
    "cosent": "CoSENT loss (scale 20; an NLI triple's entailment grades 1, its contradiction 0)",
    "ibn": "in-batch negatives loss (InfoNCE, scale 20, contradictions as hard negatives; "
    "scored pairs add nothing to it)",
}
# Exit heads fitted on RAW's frozen encoder with the heads variants' objective.
POSTHOC = "raw+heads"
POSTHOC_OPTIONS: dict[str, Any] = {"exit_heads": True}
REFERENCE = "ese (reference)"  # the paper's defaults on the ablations' schedule
ABLATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "ese (reference)": ("ese", {}),
    "compression: PCA on embeddings": ("ese", {"compression": "embeddings"}),
    "compression: none": ("ese", {"compression": "none"}),
    "layer weighting: none": ("ese", {"layer_weighting": "none"}),
    "layer weighting: dynamic": ("ese", {"layer_weighting": "dynamic"}),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-").replace("--", "-")


def sts_grid(
    model_dir: str | Path, label: str, suite: dict[str, ScoredPairs]
) -> list[ResultRecord]:
    """Every layer × dim on ``suite``; records carry ``label`` as the model."""
    encoder = load_encoder(model_dir)
    records = evaluate_grid(
        encoder,
        [STSTask(suite)],
        specs=parse_compressor_specs("none,truncate"),
        dims=[encoder.dim, *DIMS],
        layers=list(range(1, encoder.num_layers + 1)),
    )
    return [dataclasses.replace(r, model=label) for r in records]


def averages(records: list[ResultRecord]) -> dict[tuple[str, int, int], float]:
    """(model, layer, dim) -> STS average over the suite (the one set's score for a suite of
    one, which has no average record)."""
    single = {(r.model, int(r.layer or 0), r.dim): r.score for r in records if r.task == "sts"}
    averaged = {
        (r.model, int(r.layer or 0), r.dim): r.score
        for r in records
        if r.task == "sts" and r.dataset == "avg"
    }
    return averaged or single


def inner_avg(avg: dict[tuple[str, int, int], float], model: str) -> float:
    """≺Avg: mean over layers 1..n−1 at full width."""
    n = max(layer for m, layer, _ in avg if m == model)
    full = max(dim for m, _, dim in avg if m == model)
    return float(np.mean([avg[model, layer, full] for layer in range(1, n)]))


def acceptance(
    avg: dict[tuple[str, int, int], float], original: str, ese: str, raw: str, mrl: str
) -> list[tuple[str, float, float]]:
    """The issue's checks as (name, value, floor); a check passes when value >= floor."""
    n = max(layer for m, layer, _ in avg if m == ese)
    full = max(dim for m, _, dim in avg if m == ese)
    return [
        ("ESE ≺Avg − RAW ≺Avg", inner_avg(avg, ese) - inner_avg(avg, raw), 10.0),
        ("ESE last − RAW last (full)", avg[ese, n, full] - avg[raw, n, full], -0.5),
        ("ESE last − original", avg[ese, n, full] - avg[original, n, full], -1.0),
        *[(f"ESE − MRL, last layer, {d} dims", avg[ese, n, d] - avg[mrl, n, d], 0.0)
          for d in (128, 64, 32)],
    ]  # fmt: skip


def check_rows(checks: list[tuple[str, float, float]]) -> list[list[Any]]:
    return [[name, round(value, 2), f">= {floor:+g}"] for name, value, floor in checks]


def dev_checks_table(dev_checks: dict[tuple[float, str], list[tuple[str, float, float]]]) -> str:
    """One row per (learning rate, ESE run): its acceptance checks on STS-B dev."""
    first = next(iter(dev_checks.values()))
    rows = [
        [f"{candidate:g}", name, *(round(v, 2) for _, v, _ in checks)]
        for (candidate, name), checks in dev_checks.items()
    ]
    return markdown_table(["lr", "ESE run", *(name for name, *_ in first)], rows)


def choose_run(
    dev_checks: dict[tuple[float, str], list[tuple[str, float, float]]],
) -> tuple[float, str]:
    """The (learning rate, ESE run) whose STS-B dev figures pass the most acceptance checks,
    ties broken by the ≺Avg gain (the first check)."""
    return max(
        dev_checks,
        key=lambda key: (sum(v >= f for _, v, f in dev_checks[key]), dev_checks[key][0][1]),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--data", default=",".join(DEFAULT_TRAINING_DATA))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument(
        "--loss",
        choices=tuple(LOSS_DESCRIPTIONS),
        default="angle",
        help="base loss of every run (RAW, MRL and ESE alike)",
    )
    parser.add_argument(
        "--ese",
        default="paper",
        help=f"ESE variants (comma-separated, from {', '.join(ESE_VARIANTS)}); with more than "
        "one (or more than one rate) the variant and rate are chosen on STS-B dev",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="train only these main runs (comma-separated: raw, mrl, ese-<variant>) and exit, "
        "so that runs can train in parallel processes",
    )
    parser.add_argument(
        "--lrs",
        default=None,
        help="candidate learning rates (comma-separated): RAW, MRL and ESE train at each, the "
        "acceptance checks are computed on STS-B dev, and the rate passing most of them (ties: "
        "larger ≺Avg gain) is the one evaluated on the test sets and used for the ablations",
    )
    parser.add_argument("--max-steps", type=int, default=None, help="cap every main run")
    parser.add_argument(
        "--seed", type=int, default=0, help="data order and initialisation of every run"
    )
    parser.add_argument(
        "--sts-sets", default=None, help="test sets (comma-separated; default: the 7 STS sets)"
    )
    parser.add_argument("--eval-steps", type=int, default=100)
    parser.add_argument(
        "--head-lr",
        type=float,
        default=OWN_PARAMETERS_LEARNING_RATE,
        help="learning rate of the objective's own parameters (runs with exit heads or "
        "learnt layer weights only)",
    )
    parser.add_argument(
        "--ablation-steps", type=int, default=150, help="0: the full schedule of the main runs"
    )
    parser.add_argument(
        "--patience",
        type=int,
        default=5,
        help="early stopping after this many dev evaluations without a new best (0: off, "
        "which a fixed-budget comparison wants; 5 is what the first recorded run used)",
    )
    parser.add_argument(
        "--posthoc-heads",
        action="store_true",
        help="also fit exit heads on RAW's frozen encoder (same data and steps), a reference "
        "for what the heads give without any Espresso training of the encoder",
    )
    parser.add_argument("--no-ablations", action="store_true")
    parser.add_argument(
        "--dev-only",
        action="store_true",
        help="score the main runs on STS-B dev alone, print the acceptance checks and exit: "
        "a candidate judged this way has not seen the test sets when it is compared",
    )
    parser.add_argument(
        "--only-ablations",
        action="store_true",
        help="train and score the ablations alone (with their own ESE reference run)",
    )
    parser.add_argument(
        "--train-only",
        choices=("main", "ablations"),
        default=None,
        help="train that group of runs and exit (run the two groups in parallel processes, "
        "then the script without this option evaluates the finished runs)",
    )
    parser.add_argument(
        "--select",
        choices=("last", "best"),
        default="last",
        help="evaluate the final model of each run (fixed budget) or its best STS-B dev "
        "checkpoint (last layer, full width, the starting model included)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--runs-dir", default=None, help="default: <cache>/runs/espresso")
    parser.add_argument("--results-name", default="espresso")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    started = time.perf_counter()
    runs = Path(args.runs_dir) if args.runs_dir else cache_root() / "runs" / "espresso"
    lrs = [float(v) for v in args.lrs.split(",")] if args.lrs else [args.lr]
    variants = [v.strip() for v in args.ese.split(",") if v.strip()]
    unknown = [v for v in variants if v not in ESE_VARIANTS]
    if unknown or not variants:
        parser.error(f"--ese: choose from {', '.join(ESE_VARIANTS)}")
    # A single paper variant keeps the run name "ese" (and the run directories of older runs).
    ese_runs = {("ese" if variants == ["paper"] else f"ese-{v}"): v for v in variants}
    main_specs = {
        **BASELINES,
        **{name: ("ese", ESE_VARIANTS[v]) for name, v in ese_runs.items()},
    }
    if args.only:
        only = set(args.only.split(","))
        if not only <= set(main_specs):
            parser.error(f"--only: choose from {', '.join(main_specs)}")
        main_specs = {n: spec for n, spec in main_specs.items() if n in only}
    sets = load_training_sets(args.data.split(","), args.data_dir)
    dev = load_stsb("dev", args.data_dir)
    log("training sets: " + ", ".join(f"{s.name} {len(s)}" for s in sets))

    finished: list[tuple[float, str, tuple[Path, float | None, int, float]]] = []

    def train(
        name: str,
        method: str,
        options: dict[str, Any],
        lr: float,
        steps: int | None,
        frozen_start: Path | None = None,
    ):
        """Train one run; from ``frozen_start`` only the objective's own parameters train."""
        model = SentenceModel.load(frozen_start or args.model)
        objective_options, update_options = split_options(options)
        objective = make_objective(
            method, model.num_layers, model.dim, args.loss, **objective_options
        )
        config = TrainingConfig(
            max_epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=lr,
            eval_every=args.eval_steps,
            max_steps=steps or args.max_steps,
            patience=args.patience or None,
            # Only objectives with parameters of their own set it (runs without keep their
            # signatures); --head-lr replaces the default rate of those that have them.
            objective_learning_rate=own_learning_rate(objective) and args.head_lr,
            seed=args.seed,
            train_backbone=frozen_start is None,
            **update_options,
        )
        log(f"--- {name} (lr {lr:g}): {objective.describe()}")
        run_dir = runs / slug(name) if len(lrs) == 1 else runs / f"lr{lr:g}" / slug(name)
        result = fine_tune(model, objective, sets, run_dir, config, dev=dev, description=name)
        chosen = result.last_dir if args.select == "last" else result.model_dir
        log(f"{name}: STS-B dev {result.best_score:.2f} after {result.steps} steps")
        outcome = (chosen, result.best_score, result.steps, result.seconds)
        finished.append((lr, name, outcome))
        return outcome

    main_runs: dict[float, dict[str, tuple[Path, float | None, int, float]]] = {}
    if args.only_ablations and len(lrs) > 1:
        parser.error("--only-ablations takes one learning rate")
    if args.train_only in (None, "main") and not args.only_ablations:
        for lr in lrs:
            runs_at = {n: train(n, m, o, lr, None) for n, (m, o) in main_specs.items()}
            if args.posthoc_heads and "raw" in runs_at:
                runs_at[POSTHOC] = train(
                    POSTHOC, "ese", POSTHOC_OPTIONS, lr, None, frozen_start=runs_at["raw"][0]
                )
            main_runs[lr] = runs_at
    if args.train_only == "main" or args.only:
        return 0

    base_name = load_encoder(args.model, cache=False).name
    dev_records: list[ResultRecord] = []
    dev_checks: dict[tuple[float, str], list[tuple[str, float, float]]] = {}
    if len(lrs) > 1 or len(ese_runs) > 1 or args.dev_only:
        suite = {"STSBenchmark-dev": dev}
        dev_records = sts_grid(args.model, base_name, suite)
        for run_lr, runs_at in main_runs.items():
            for name, (model_dir, *_rest) in runs_at.items():
                dev_records += sts_grid(model_dir, f"{base_name}+{name}@lr{run_lr:g}", suite)
        dev_avg = averages(dev_records)
        for candidate in lrs:
            raw, mrl = (f"{base_name}+{k}@lr{candidate:g}" for k in ("raw", "mrl"))
            for name in ese_runs:
                ese = f"{base_name}+{name}@lr{candidate:g}"
                dev_checks[candidate, name] = acceptance(dev_avg, base_name, ese, raw, mrl)
    if args.dev_only:
        print(dev_checks_table(dev_checks))
        return 0
    lr, ese_name = choose_run(dev_checks) if dev_checks else (lrs[0], next(iter(ese_runs)))
    variant = ese_runs[ese_name]
    trained = {k: v for k, v in main_runs.get(lr, {}).items() if k in (*BASELINES, POSTHOC)}
    if ese_name in main_runs.get(lr, {}):
        trained["ese"] = main_runs[lr][ese_name]
    if not args.no_ablations and args.train_only in (None, "ablations"):
        for name, (method, options) in ABLATIONS.items():
            if name == REFERENCE and not args.ablation_steps and "ese" in trained:
                trained[name] = trained["ese"]  # the same schedule: reuse, do not retrain
            else:
                options = {**ESE_VARIANTS[variant], **options}
                trained[name] = train(name, method, options, lr, args.ablation_steps)
    if args.train_only:
        return 0

    test_suite = (
        load_sts_suite(args.data_dir, args.sts_sets.split(","))
        if args.sts_sets
        else load_sts_suite(args.data_dir)
    )
    records = sts_grid(args.model, base_name, test_suite)
    for name, (model_dir, *_rest) in trained.items():
        records += sts_grid(model_dir, f"{base_name}+{name}", test_suite)
    elapsed = time.perf_counter() - started
    write_records(HERE / "results" / f"{args.results_name}.json", records + dev_records)

    avg = averages(records)
    n = max(layer for _, layer, _ in avg)
    full = max(dim for _, _, dim in avg)
    labels = {base_name: "original", **{f"{base_name}+{k}": k for k in trained}}
    main_names = ("raw", "mrl", "ese")
    main_models = [base_name] + [f"{base_name}+{k}" for k in (*main_names, POSTHOC) if k in trained]
    sections = [
        f"## Espresso (ESE) vs RAW and MRL fine-tuning (`{args.results_name}`)",
        "",
        f"Command: `python benchmarks/espresso.py {' '.join(sys.argv[1:])}`  ",
        f"Machine: {machine_description()}; torch threads {torch.get_num_threads()}; wall time "
        f"{elapsed:.0f} s (finished runs are reused); load average at the end "
        f"{os.getloadavg()[0]:.1f}.  ",
        f"Backbone {base_name}; data {args.data} ("
        + ", ".join(f"{s.name} {len(s)}" for s in sets)
        + f"); {LOSS_DESCRIPTIONS[args.loss]}; AdamW lr {lr:g}, batch {args.batch_size}, "
        f"{args.epochs} epoch(s), "
        f"10 % warm-up, clipping 1.0, linear decay, seed {args.seed}. "
        + (
            "Each run is evaluated at the end of its budget (STS-B dev is logged every "
            f"{args.eval_steps} steps but selects nothing: on the last layer alone it would "
            "keep the untrained model for every ESE run). "
            if args.select == "last"
            else "Each run is evaluated at its best STS-B dev checkpoint (last layer). "
        )
        + "MRL dims 384/256/128/64/32/16/8. ESE defaults: alpha = beta = 1, k = 128, "
        "w_i = 1/(1+ln i), compression by PCA of the dependency matrix; the ESE run reported "
        f"is {ESE_DESCRIPTIONS[variant]} (`--ese {variant}`).",
        "",
    ]
    if dev_checks:
        sections += [
            f"Chosen on STS-B dev among rates {', '.join(f'{v:g}' for v in lrs)} and ESE "
            f"variants {', '.join(variants)}: **lr {lr:g}, {ese_name}** (most acceptance "
            "checks passed on dev, then the larger ≺Avg gain); only that rate's RAW and MRL "
            "and that ESE run were scored on the test sets. The checks on dev:",
            "",
            dev_checks_table(dev_checks),
            "",
        ]
    if all(f"{base_name}+{k}" in main_models for k in main_names):
        ese, raw, mrl = (f"{base_name}+{k}" for k in ("ese", "raw", "mrl"))
        grid_rows = [
            [labels[m], layer, *(round(avg[m, layer, d], 2) for d in (full, *DIMS))]
            for m in main_models
            for layer in range(1, n + 1)
        ]
        summary_rows = [
            [labels[m], round(inner_avg(avg, m), 2), round(avg[m, n, full], 2),
             *(round(avg[m, n, d], 2) for d in (128, 64, 32))]
            for m in main_models
        ]  # fmt: skip
        heatmaps = [
            plot_layer_heatmap(
                [r for r in records if r.model == m],
                HERE / "results" / f"{args.results_name}_{labels[m]}.png",
                "sts",
                title=f"{labels[m]}: 7-set STS average, layer × dims",
            ).name
            for m in main_models
        ]
        sections += [
            "Targets (test sets):",
            "",
            markdown_table(
                ["check", "value", "target"], check_rows(acceptance(avg, base_name, ese, raw, mrl))
            ),
            "",
            "Summary (7-set STS average; ≺Avg = mean over layers 1..n−1 at full width):",
            "",
            markdown_table(
                ["model", "≺Avg", "last layer", "last @128", "last @64", "last @32"],
                summary_rows,
            ),
            "",
            "Every layer × dimension (7-set STS average, truncation):",
            "",
            markdown_table(["model", "layer", str(full), *map(str, DIMS)], grid_rows),
            "",
            "Heatmaps: " + ", ".join(f"`benchmarks/results/{h}`" for h in heatmaps) + ".",
            "",
        ]
    train_rows = [
        [name, f"{run_lr:g}", steps, round(score, 2) if score is not None else "", f"{secs:.0f}"]
        for run_lr, name, (_, score, steps, secs) in finished
    ]
    sections += [
        "Training runs (steps, best STS-B dev seen at an evaluation, seconds on this machine):",
        "",
        markdown_table(["run", "lr", "steps", "best STS-B dev", "seconds"], train_rows),
        "",
    ]
    ablated = [name for name in ABLATIONS if name in trained]
    if ablated:
        schedule = f"{args.ablation_steps} steps" if args.ablation_steps else "the full schedule"
        ablation_rows = [
            [name, round(inner_avg(avg, f"{base_name}+{name}"), 2),
             round(avg[f"{base_name}+{name}", n, full], 2),
             *(round(avg[f"{base_name}+{name}", n, d], 2) for d in (128, 64))]
            for name in ablated
        ]  # fmt: skip
        sections += [
            f"Ablations (paper's Table 2), {schedule} each at lr {lr:g}:",
            "",
            markdown_table(
                ["variant", "≺Avg", "last layer", "last @128", "last @64"], ablation_rows
            ),
            "",
        ]
    body = "\n".join(sections)
    update_section(HERE / "RESULTS.md", args.results_name, body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
