"""Espresso (ESE) against RAW and Matryoshka (MRL) fine-tuning under one budget, plus ablations.

Every model starts from the same backbone and sees the same data, batches and steps (SNLI
triples with contradictions as hard negatives, STS-B train and SICK train scored pairs; AnglE
loss); checkpoints are chosen on STS-B dev. Each is scored on the 7 STS test sets at every
layer × {full, 256, 128, 64, 32, 16, 8} dimensions (truncation). ≺Avg is the mean over layers
1..n−1 at full width, as in the paper's Table 1. The ablations of the paper's Table 2
(compression strategy, layer weighting) run on a shortened schedule, with an ESE run on that
same schedule as their reference. The runs (ESE variants, ablations) and base losses:
grids/espresso.toml.

    python benchmarks/espresso.py --data-dir ../shared/data

Runs are kept under --runs-dir and resume when interrupted; a finished run is not retrained.
With --dev-only the finished runs are scored on STS-B dev alone and the acceptance checks
printed, so a new candidate (another rate, say) is compared with earlier ones before any test
set sees it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from _common import HERE, RESULTS_MD, grid, log, template
from demitasse.data import ScoredPairs, load_sts_suite, load_stsb
from demitasse.encoders.resolve import cache_root
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import plot_layer_heatmap
from demitasse.training import SentenceModel, TrainingConfig, TrainingSet, fine_tune
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
from lab.layers import (
    LayerAverages,
    inner_layer_mean,
    layer_averages,
    score_every_layer,
)
from lab.results_file import update_section
from lab.templates import join_blocks

NAME = "espresso"


@dataclass(frozen=True)
class Run:
    """A training method of ``make_objective`` and its options."""

    method: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NamedRun(Run):
    name: str = ""


@dataclass(frozen=True)
class Variant:
    """An ESE objective: its options (on top of the reference code's with ``reference_code``)
    and how the RESULTS section describes it."""

    description: str
    options: dict[str, Any] = field(default_factory=dict)
    reference_code: bool = False

    def all_options(self) -> dict[str, Any]:
        return {**REFERENCE_CODE, **self.options} if self.reference_code else dict(self.options)


@dataclass(frozen=True)
class Ablations:
    reference: str
    runs: dict[str, Run]

    def __post_init__(self) -> None:
        if self.reference not in self.runs:
            raise ValueError(f"the reference {self.reference!r} is none of the ablation runs")


@dataclass(frozen=True)
class Grid:
    dims: list[int]
    losses: dict[str, str]
    baselines: dict[str, Run]
    posthoc: NamedRun
    ese: dict[str, Variant]
    ablations: Ablations


GRID = grid(NAME, Grid)
PROSE = template(NAME)
MAIN_NAMES = ("raw", "mrl", "ese")
ACCEPTANCE_DIMS = (128, 64, 32)  # ESE against MRL at these widths of the last layer
#: (learning rate, ESE run) -> its acceptance checks as (name, value, floor).
DevChecks = dict[tuple[float, str], list[tuple[str, float, float]]]
#: A finished run: the model evaluated, best STS-B dev seen, steps, seconds.
Outcome = tuple[Path, float | None, int, float]


def add_training_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--data", default=",".join(DEFAULT_TRAINING_DATA))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--loss", choices=tuple(GRID.losses), default="angle",
                        help="base loss of every run (RAW, MRL and ESE alike)")  # fmt: skip
    parser.add_argument(
        "--ese",
        default="paper",
        help=f"ESE variants (comma-separated, from {', '.join(GRID.ese)}); with more than "
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
    parser.add_argument("--seed", type=int, default=0,
                        help="data order and initialisation of every run")  # fmt: skip
    parser.add_argument("--sts-sets", default=None,
                        help="test sets (comma-separated; default: the 7 STS sets)")  # fmt: skip
    parser.add_argument("--eval-steps", type=int, default=100)
    parser.add_argument(
        "--head-lr",
        type=float,
        default=OWN_PARAMETERS_LEARNING_RATE,
        help="learning rate of the objective's own parameters (runs with exit heads or "
        "learnt layer weights only)",
    )
    parser.add_argument("--ablation-steps", type=int, default=150,
                        help="0: the full schedule of the main runs")  # fmt: skip
    parser.add_argument(
        "--patience",
        type=int,
        default=5,
        help="early stopping after this many dev evaluations without a new best (0: off, "
        "which a fixed-budget comparison wants; 5 is what the first recorded run used)",
    )


def add_workflow_options(parser: argparse.ArgumentParser) -> None:
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


def parse_args() -> argparse.Namespace:
    """The options, and what they name: ``lrs``, ``variants``, ``ese_runs`` (run name ->
    variant) and ``main_specs`` (run name -> Run)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_training_options(parser)
    add_workflow_options(parser)
    args = parser.parse_args()
    args.lrs = [float(v) for v in args.lrs.split(",")] if args.lrs else [args.lr]
    args.variants = [v.strip() for v in args.ese.split(",") if v.strip()]
    if not args.variants or any(v not in GRID.ese for v in args.variants):
        parser.error(f"--ese: choose from {', '.join(GRID.ese)}")
    # A single paper variant keeps the run name "ese" (and the run directories of older runs).
    single = args.variants == ["paper"]
    args.ese_runs = {("ese" if single else f"ese-{v}"): v for v in args.variants}
    ese = {name: Run("ese", GRID.ese[v].all_options()) for name, v in args.ese_runs.items()}
    args.main_specs = {**GRID.baselines, **ese}
    if args.only:
        only = set(args.only.split(","))
        if not only <= set(args.main_specs):
            parser.error(f"--only: choose from {', '.join(args.main_specs)}")
        args.main_specs = {n: run for n, run in args.main_specs.items() if n in only}
    if args.only_ablations and len(args.lrs) > 1:
        parser.error("--only-ablations takes one learning rate")
    return args


class Trainer:
    """Trains runs on one data set and dev set, keeping each run's outcome in order."""

    def __init__(self, args: argparse.Namespace, sets: list[TrainingSet], dev: ScoredPairs):
        self.args, self.sets, self.dev = args, sets, dev
        self.runs = Path(args.runs_dir) if args.runs_dir else cache_root() / "runs" / "espresso"
        self.finished: list[tuple[float, str, Outcome]] = []

    def train(
        self, name: str, run: Run, lr: float, steps: int | None, frozen_start: Path | None = None
    ) -> Outcome:
        """Train one run; from ``frozen_start`` only the objective's own parameters train."""
        args = self.args
        model = SentenceModel.load(frozen_start or args.model)
        objective_options, update_options = split_options(run.options)
        objective = make_objective(
            run.method, model.num_layers, model.dim, args.loss, **objective_options
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
        run_dir = self.runs / slug(name)
        if len(args.lrs) > 1:
            run_dir = self.runs / f"lr{lr:g}" / slug(name)
        result = fine_tune(model, objective, self.sets, run_dir, config, dev=self.dev,
                           description=name)  # fmt: skip
        chosen = result.last_dir if args.select == "last" else result.model_dir
        log(f"{name}: STS-B dev {result.best_score:.2f} after {result.steps} steps")
        outcome = (chosen, result.best_score, result.steps, result.seconds)
        self.finished.append((lr, name, outcome))
        return outcome


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-").replace("--", "-")


def train_main_runs(trainer: Trainer, args: argparse.Namespace) -> dict[float, dict[str, Outcome]]:
    """RAW, MRL and the ESE runs at every candidate rate (and the post-hoc heads on RAW)."""
    main_runs: dict[float, dict[str, Outcome]] = {}
    if args.train_only not in (None, "main") or args.only_ablations:
        return main_runs
    posthoc = GRID.posthoc
    for lr in args.lrs:
        runs_at = {
            name: trainer.train(name, run, lr, None) for name, run in args.main_specs.items()
        }
        if args.posthoc_heads and "raw" in runs_at:
            runs_at[posthoc.name] = trainer.train(
                posthoc.name, posthoc, lr, None, frozen_start=runs_at["raw"][0]
            )
        main_runs[lr] = runs_at
    return main_runs


def acceptance(
    avg: LayerAverages, original: str, ese: str, raw: str, mrl: str
) -> list[tuple[str, float, float]]:
    """The issue's checks as (name, value, floor); a check passes when value >= floor."""
    n = max(layer for m, layer, _ in avg if m == ese)
    full = max(dim for m, _, dim in avg if m == ese)
    return [
        ("ESE ≺Avg − RAW ≺Avg", inner_layer_mean(avg, ese) - inner_layer_mean(avg, raw), 10.0),
        ("ESE last − RAW last (full)", avg[ese, n, full] - avg[raw, n, full], -0.5),
        ("ESE last − original", avg[ese, n, full] - avg[original, n, full], -1.0),
        *[(f"ESE − MRL, last layer, {d} dims", avg[ese, n, d] - avg[mrl, n, d], 0.0)
          for d in ACCEPTANCE_DIMS],
    ]  # fmt: skip


def dev_comparison(
    args: argparse.Namespace,
    main_runs: dict[float, dict[str, Outcome]],
    base_name: str,
    dev: ScoredPairs,
) -> tuple[list[ResultRecord], DevChecks]:
    """With more than one candidate (or --dev-only): every main run scored on STS-B dev, and
    each (rate, ESE run)'s acceptance checks there."""
    if len(args.lrs) == 1 and len(args.ese_runs) == 1 and not args.dev_only:
        return [], {}
    suite = {"STSBenchmark-dev": dev}
    records = score_every_layer(args.model, base_name, suite, GRID.dims)
    for run_lr, runs_at in main_runs.items():
        for name, (model_dir, *_rest) in runs_at.items():
            label = f"{base_name}+{name}@lr{run_lr:g}"
            records += score_every_layer(model_dir, label, suite, GRID.dims)
    avg = layer_averages(records)
    checks: DevChecks = {}
    for candidate in args.lrs:
        raw, mrl = (f"{base_name}+{k}@lr{candidate:g}" for k in ("raw", "mrl"))
        for name in args.ese_runs:
            ese = f"{base_name}+{name}@lr{candidate:g}"
            checks[candidate, name] = acceptance(avg, base_name, ese, raw, mrl)
    return records, checks


def choose_run(dev_checks: DevChecks) -> tuple[float, str]:
    """The (learning rate, ESE run) whose STS-B dev figures pass the most acceptance checks,
    ties broken by the ≺Avg gain (the first check)."""
    return max(
        dev_checks,
        key=lambda key: (sum(v >= f for _, v, f in dev_checks[key]), dev_checks[key][0][1]),
    )


def chosen_runs(
    trainer: Trainer, main_runs: dict[float, dict[str, Outcome]], lr: float, ese_name: str
) -> dict[str, Outcome]:
    """The runs the test sets score: the chosen rate's RAW and MRL (and post-hoc heads), its
    chosen ESE run as "ese", and the ablations unless left out."""
    args = trainer.args
    kept = (*GRID.baselines, GRID.posthoc.name)
    trained = {k: v for k, v in main_runs.get(lr, {}).items() if k in kept}
    if ese_name in main_runs.get(lr, {}):
        trained["ese"] = main_runs[lr][ese_name]
    if args.no_ablations or args.train_only not in (None, "ablations"):
        return trained
    variant = GRID.ese[args.ese_runs[ese_name]].all_options()
    for name, run in GRID.ablations.runs.items():
        if name == GRID.ablations.reference and not args.ablation_steps and "ese" in trained:
            trained[name] = trained["ese"]  # the same schedule: reuse, do not retrain
        else:
            ablated = Run(run.method, {**variant, **run.options})
            trained[name] = trainer.train(name, ablated, lr, args.ablation_steps)
    return trained


def score_on_test(
    args: argparse.Namespace, base_name: str, trained: dict[str, Outcome]
) -> list[ResultRecord]:
    """The backbone and every trained run on the test sets, every layer × width."""
    names = args.sts_sets.split(",") if args.sts_sets else None
    suite = load_sts_suite(args.data_dir, names) if names else load_sts_suite(args.data_dir)
    records = score_every_layer(args.model, base_name, suite, GRID.dims)
    for name, (model_dir, *_rest) in trained.items():
        records += score_every_layer(model_dir, f"{base_name}+{name}", suite, GRID.dims)
    return records


def main() -> int:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    sets = load_training_sets(args.data.split(","), args.data_dir)
    dev = load_stsb("dev", args.data_dir)
    log("training sets: " + ", ".join(f"{s.name} {len(s)}" for s in sets))
    trainer = Trainer(args, sets, dev)
    main_runs = train_main_runs(trainer, args)
    if args.train_only == "main" or args.only:
        return 0
    base_name = load_encoder(args.model, cache=False).name
    dev_records, dev_checks = dev_comparison(args, main_runs, base_name, dev)
    if args.dev_only:
        print(dev_checks_table(dev_checks))
        return 0
    first = (args.lrs[0], next(iter(args.ese_runs)))
    lr, ese_name = choose_run(dev_checks) if dev_checks else first
    trained = chosen_runs(trainer, main_runs, lr, ese_name)
    if args.train_only:
        return 0
    records = score_on_test(args, base_name, trained)
    elapsed = time.perf_counter() - started
    write_records(HERE / "results" / f"{args.results_name}.json", records + dev_records)
    run = {"lr": lr, "ese_name": ese_name, "elapsed": elapsed, "base_name": base_name}
    body = section(args, run, sets, trained, records, dev_checks, trainer.finished)
    update_section(RESULTS_MD, args.results_name, body)
    print(body)
    return 0


def section(
    args: argparse.Namespace,
    run: dict[str, Any],
    sets: list[TrainingSet],
    trained: dict[str, Outcome],
    records: list[ResultRecord],
    dev_checks: DevChecks,
    finished: list[tuple[float, str, Outcome]],
) -> str:
    """The RESULTS.md section: the run, the dev choice, the test tables, the training runs
    and the ablations (each where the run has it)."""
    lr = f"{run['lr']:g}"
    avg = layer_averages(records)
    # Written as its lines joined by line breaks, the section ends with one.
    blocks = [
        head(args, run, sets),
        dev_part(args, lr, run["ese_name"], dev_checks),
        test_tables(args, run["base_name"], trained, records, avg),
        PROSE.fill("training_runs", table=training_table(finished)),
        ablation_part(args, lr, run["base_name"], trained, avg),
    ]
    return join_blocks(*blocks) + "\n"


def dev_part(args: argparse.Namespace, lr: str, ese_name: str, dev_checks: DevChecks) -> str:
    """How the rate and ESE run were chosen on STS-B dev, where there was a choice."""
    if not dev_checks:
        return ""
    return PROSE.fill(
        "dev_choice",
        rates=", ".join(f"{v:g}" for v in args.lrs),
        variants=", ".join(args.variants),
        lr=lr,
        ese_name=ese_name,
        dev_table=dev_checks_table(dev_checks),
    )


def head(args: argparse.Namespace, run: dict[str, Any], sets: list[TrainingSet]) -> str:
    """The section's heading, command, machine and training setup."""
    variant = args.ese_runs[run["ese_name"]]
    selection = PROSE.fill(f"select_{args.select}", eval_steps=args.eval_steps)
    return PROSE.fill(
        results_name=args.results_name, arguments=" ".join(sys.argv[1:]),
        machine=machine_description(), threads=torch.get_num_threads(),
        wall_seconds=f"{run['elapsed']:.0f}", load_average=f"{os.getloadavg()[0]:.1f}",
        backbone=run["base_name"], data=args.data,
        set_sizes=", ".join(f"{s.name} {len(s)}" for s in sets), loss=GRID.losses[args.loss],
        lr=f"{run['lr']:g}", batch_size=args.batch_size, epochs=args.epochs, seed=args.seed,
        selection=selection, variant_description=GRID.ese[variant].description, variant=variant,
    )  # fmt: skip


def test_tables(
    args: argparse.Namespace,
    base_name: str,
    trained: dict[str, Outcome],
    records: list[ResultRecord],
    avg: LayerAverages,
) -> str:
    """Targets, summary, every layer × width and the heatmaps: only with RAW, MRL and ESE."""
    if not all(k in trained for k in MAIN_NAMES):
        return ""
    models = [base_name] + [f"{base_name}+{k}" for k in (*MAIN_NAMES, GRID.posthoc.name)
                            if k in trained]  # fmt: skip
    labels = {base_name: "original", **{f"{base_name}+{k}": k for k in trained}}
    n = max(layer for _, layer, _ in avg)
    full = max(dim for _, _, dim in avg)
    ese, raw, mrl = (f"{base_name}+{k}" for k in ("ese", "raw", "mrl"))
    checks = acceptance(avg, base_name, ese, raw, mrl)
    summary = [
        [labels[m], round(inner_layer_mean(avg, m), 2), round(avg[m, n, full], 2),
         *(round(avg[m, n, d], 2) for d in ACCEPTANCE_DIMS)]
        for m in models
    ]  # fmt: skip
    every = [
        [labels[m], layer, *(round(avg[m, layer, d], 2) for d in (full, *GRID.dims))]
        for m in models
        for layer in range(1, n + 1)
    ]
    heatmaps = [
        plot_layer_heatmap(
            [r for r in records if r.model == m],
            HERE / "results" / f"{args.results_name}_{labels[m]}.png",
            "sts",
            title=PROSE.fill("heatmap_title", label=labels[m]),
        ).name
        for m in models
    ]
    return PROSE.fill(
        "test_tables",
        targets_table=markdown_table(
            ["check", "value", "target"],
            [[name, round(value, 2), f">= {floor:+g}"] for name, value, floor in checks],
        ),
        summary_table=markdown_table(
            ["model", "≺Avg", "last layer", *(f"last @{d}" for d in ACCEPTANCE_DIMS)], summary
        ),
        grid_table=markdown_table(["model", "layer", str(full), *map(str, GRID.dims)], every),
        heatmaps=", ".join(f"`benchmarks/results/{h}`" for h in heatmaps),
    )


def dev_checks_table(dev_checks: DevChecks) -> str:
    """One row per (learning rate, ESE run): its acceptance checks on STS-B dev."""
    first = next(iter(dev_checks.values()))
    rows = [
        [f"{candidate:g}", name, *(round(v, 2) for _, v, _ in checks)]
        for (candidate, name), checks in dev_checks.items()
    ]
    return markdown_table(["lr", "ESE run", *(name for name, *_ in first)], rows)


def training_table(finished: list[tuple[float, str, Outcome]]) -> str:
    rows = [
        [name, f"{run_lr:g}", steps, round(score, 2) if score is not None else "", f"{secs:.0f}"]
        for run_lr, name, (_, score, steps, secs) in finished
    ]
    return markdown_table(["run", "lr", "steps", "best STS-B dev", "seconds"], rows)


def ablation_part(
    args: argparse.Namespace,
    lr: str,
    base_name: str,
    trained: dict[str, Outcome],
    avg: LayerAverages,
) -> str:
    """The ablations' table, where the run has them."""
    ablated = {name: f"{base_name}+{name}" for name in GRID.ablations.runs if name in trained}
    if not ablated:
        return ""
    n = max(layer for _, layer, _ in avg)
    full = max(dim for _, _, dim in avg)
    rows = [
        [name, round(inner_layer_mean(avg, m), 2), round(avg[m, n, full], 2),
         *(round(avg[m, n, d], 2) for d in (128, 64))]
        for name, m in ablated.items()
    ]  # fmt: skip
    schedule = (
        PROSE.fill("schedule_steps", steps=args.ablation_steps)
        if args.ablation_steps
        else PROSE.fill("schedule_full")
    )
    header = ["variant", "≺Avg", "last layer", "last @128", "last @64"]
    return PROSE.fill("ablations", schedule=schedule, lr=lr, table=markdown_table(header, rows))


if __name__ == "__main__":
    sys.exit(main())
