"""Low-dimensional sentence embeddings by a pooler of any size and two-step training (Wang et al.,
"On the Dimensionality of Sentence Embeddings") against end-to-end training, PCA, Isomap and LLE:
the paper's Tables 1, 3 and 4 and Figure 4 for our backbone.

Step 1 trains encoder + pooler_d end to end for every target and candidate d (SimCSE on
unlabeled sentences, or the SBERT NLI classifier on SNLI) and keeps the encoder whose own output
scores best on STS-B dev; step 2 fine-tunes each target's pooler alone on that encoder. The
pooler learning rate of step 2 is chosen on STS-B dev among --pooler-lrs. PCA, Isomap and LLE are
fitted on the embeddings of --n-fit training sentences by the encoder trained at d = D (the same
backbone, trained the same way); PCA of the untrained backbone is shown too. Scores: the 7 STS
test sets (Spearman) and MR, CR, SST-2, TREC, MRPC (SentEval probe), each model scored once.

    python benchmarks/two_step.py --data-dir ../shared/data
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

from _common import HERE, RESULTS_MD, log, template
from demitasse.compress import load_compressor, make_compressor
from demitasse.data import (
    ScoredPairs,
    load_snli,
    load_sts_suite,
    load_stsb,
    load_unlabeled,
    read_texts,
    resolve_data_dir,
)
from demitasse.encoders import Encoder
from demitasse.encoders.resolve import cache_root
from demitasse.evaluation import (
    ClassificationTask,
    ProbeSettings,
    ResultRecord,
    STSTask,
    Task,
    machine_description,
    write_records,
)
from demitasse.io import atomic_write_text
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import plot_matrix_heatmap
from demitasse.training import TrainingConfig, TrainingSet
from demitasse.training.pooler import POOLER_DIR
from demitasse.training.two_step import (
    TwoStepResult,
    pooled_dev_scores,
    pooler_swap_matrix,
    two_step,
)
from lab import evaluation_texts
from lab.results_file import update_section
from lab.scoring import VectorJob, score_vectors

PROSE = template("two_step")
MANIFOLDS = {"pca": "PCA", "isomap": "Isomap", "lle": "LLE"}  # registry name -> row label
UNTRAINED_PCA = "PCA of the untrained backbone"
METHODS = [*MANIFOLDS.values(), "end-to-end", "two-step"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--objective", choices=("simcse", "nli"), default="simcse")
    parser.add_argument("--n-train", type=int, default=30000, help="unlabeled sentences (SimCSE)")
    parser.add_argument(
        "--train-texts",
        default=None,
        help="SimCSE sentences from this file (one per line) instead of sampling unlabeled/en",
    )
    parser.add_argument(
        "--write-train-texts",
        default=None,
        help="write the SimCSE sample to this file and exit (to ship it to another machine)",
    )
    parser.add_argument("--n-fit", type=int, default=2000, help="sentences PCA/Isomap/LLE fit on")
    parser.add_argument("--targets", default="128,64,32,16,8", help="the paper's tables' dims")
    parser.add_argument("--candidates", default="384,256", help="step-1 dims beside the targets")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--pooler-lrs", default="3e-5,1e-3", help="step 2, chosen on dev")
    parser.add_argument("--eval-steps", type=int, default=100)
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--classification-limit", type=int, default=None, help="smoke runs only")
    parser.add_argument("--probe-folds", type=int, default=10, help="SentEval: 10")
    parser.add_argument("--probe-inner-folds", type=int, default=5, help="SentEval: 5")
    parser.add_argument("--encode-batch-size", type=int, default=64)
    parser.add_argument("--dev-limit", type=int, default=None, help="smoke runs only")
    parser.add_argument("--sts-sets", default=None, help="default: the 7 STS sets")
    parser.add_argument("--runs-dir", default=None, help="default: <cache>/runs/two-step")
    parser.add_argument("--results-name", default="two_step")
    args = parser.parse_args()
    args.target_dims = [int(d) for d in args.targets.split(",") if d]
    args.candidate_dims = [int(d) for d in args.candidates.split(",") if d]
    args.pooler_lr_list = [float(v) for v in args.pooler_lrs.split(",")]
    return args


def evaluation_data(
    args: argparse.Namespace, data_dir: Path
) -> tuple[list[Task], ScoredPairs, list[str]]:
    """The tasks every model is scored on, STS-B dev (cut to --dev-limit) and the texts."""
    names = args.sts_sets.split(",") if args.sts_sets else None
    suite = load_sts_suite(data_dir, names) if names else load_sts_suite(data_dir)
    probe = ProbeSettings(folds=args.probe_folds, inner_folds=args.probe_inner_folds)
    tasks: list[Task] = [
        STSTask(suite),
        ClassificationTask(
            data_dir, limit=args.classification_limit, seed=args.seed, settings=probe
        ),
    ]
    dev = load_stsb("dev", data_dir)
    if args.dev_limit:
        dev = dev.head(args.dev_limit)
    return tasks, dev, evaluation_texts(tasks)


def training_data(
    args: argparse.Namespace, data_dir: Path, eval_texts: list[str], dev: ScoredPairs
) -> tuple[TrainingSet, list[str]]:
    """The training set of --objective, and its sentences (the manifold fits take theirs)."""
    if args.objective == "nli":
        snli = load_snli(data_dir, ("dev", "test"))
        return TrainingSet.from_nli("snli", snli), list(
            dict.fromkeys(snli.premises + snli.hypotheses)
        )
    if args.train_texts:
        texts = read_texts(args.train_texts)[: args.n_train]
    else:
        # The dev sentences left out are those dev is scored on (all of it but in smoke runs).
        texts = load_unlabeled(
            data_dir, args.n_train, args.seed, set(eval_texts) | set(dev.texts())
        )
    return TrainingSet.unlabeled(f"unlabeled-en-{len(texts) // 1000}k", texts), texts


def train(
    args: argparse.Namespace, training: TrainingSet, dev: ScoredPairs
) -> tuple[dict[float, TwoStepResult], dict[float, dict[int, float]], float]:
    """Both steps at every step-2 pooler rate (step 1 trains once: its runs are reused),
    each rate's step-2 STS-B dev per target, and the rate chosen on it."""
    runs = Path(args.runs_dir) if args.runs_dir else cache_root() / "runs" / "two-step"
    config = TrainingConfig(
        max_epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        eval_every=args.eval_steps,
        patience=args.patience or None,
        seed=args.seed,
    )
    outcomes = {
        lr: two_step(
            args.model, args.target_dims, args.candidate_dims, [training], runs, dev,
            args.objective, config, dataclasses.replace(config, learning_rate=lr),
            step2_name=f"two-step-lr{lr:g}", progress=False,
        )
        for lr in args.pooler_lr_list
    }  # fmt: skip
    first = outcomes[args.pooler_lr_list[0]]
    encoder_opt = first.end_to_end[first.encoder_dim]
    step2_dev = {
        lr: dict(zip(args.target_dims,
                     pooled_dev_scores(encoder_opt, list(out.two_step.values()), dev), strict=True))
        for lr, out in outcomes.items()
    }  # fmt: skip
    pooler_lr = max(step2_dev, key=lambda lr: float(np.mean(list(step2_dev[lr].values()))))
    log(f"encoder_opt: d={first.encoder_dim}; step-2 pooler lr {pooler_lr:g}")
    return outcomes, step2_dev, pooler_lr


class Embeddings:
    """The evaluation texts embedded by each model directory, each encoder loaded once."""

    def __init__(self, texts: list[str], batch_size: int) -> None:
        self.texts, self.batch_size = texts, batch_size
        self.encoders: dict[Path | str, Encoder] = {}
        self.vectors: dict[Path | str, np.ndarray] = {}

    def encoder(self, model_dir: Path | str) -> Encoder:
        if model_dir not in self.encoders:
            self.encoders[model_dir] = load_encoder(model_dir, cache=False)
        return self.encoders[model_dir]

    def encoded(self, model_dir: Path | str) -> np.ndarray:
        if model_dir not in self.vectors:
            log(f"encoding {len(self.texts)} texts with {model_dir}")
            encoder = self.encoder(model_dir)
            self.vectors[model_dir] = encoder.encode(self.texts, batch_size=self.batch_size)
        return self.vectors[model_dir]

    def pooled(self, pooler_dir: Path, encoder_dir: Path) -> np.ndarray:
        return load_compressor(pooler_dir / POOLER_DIR).transform(self.encoded(encoder_dir))


def vector_jobs(
    args: argparse.Namespace,
    result: TwoStepResult,
    embeddings: Embeddings,
    fit_texts: list[str],
    names: tuple[str, str],
) -> list[VectorJob]:
    """Every model to score: both full-width encoders, then per target the manifold fits,
    the untrained backbone's PCA and the poolers (end to end, after step 1, after step 2)."""
    base_name, trained_name = names
    end_to_end, trained_base = result.end_to_end, result.end_to_end[max(result.end_to_end)]
    encoder_opt = end_to_end[result.encoder_dim]
    jobs = [
        VectorJob("none", base_name, embeddings.encoded(args.model)),
        VectorJob("none", trained_name, embeddings.encoded(trained_base)),
    ]
    fit_trained = embeddings.encoder(trained_base).encode(fit_texts)
    fit_untrained = embeddings.encoder(args.model).encode(fit_texts)
    for d in args.target_dims:
        for method, label in MANIFOLDS.items():
            compressor = make_compressor(method, dim=d).fit(fit_trained)
            vectors = compressor.transform(embeddings.encoded(trained_base))
            jobs.append(VectorJob(label, trained_name, vectors))
        pca = make_compressor("pca", dim=d).fit(fit_untrained)
        jobs.append(
            VectorJob(UNTRAINED_PCA, base_name, pca.transform(embeddings.encoded(args.model)))
        )
        jobs += [
            VectorJob("end-to-end", trained_name, embeddings.pooled(end_to_end[d], end_to_end[d])),
            VectorJob("after step 1", trained_name, embeddings.pooled(end_to_end[d], encoder_opt)),
            VectorJob("two-step", trained_name, embeddings.pooled(result.two_step[d], encoder_opt)),
        ]
    return jobs


def swap_figure(
    args: argparse.Namespace, end_to_end: dict[int, Path], dev: ScoredPairs
) -> tuple[list[int], np.ndarray, Path]:
    """Every step-1 encoder with every step-1 pooler on STS-B dev (the paper's Figure 4)."""
    swap_dims = sorted(end_to_end, reverse=True)
    swap = pooler_swap_matrix({d: end_to_end[d] for d in swap_dims}, end_to_end, dev)
    plot = plot_matrix_heatmap(
        swap,
        [f"encoder_{d}" for d in swap_dims],
        [f"pooler_{d}" for d in swap_dims],
        HERE / "results" / f"{args.results_name}_swap.png",
        row_label="encoder (trained end to end with pooler_d)",
        column_label="pooler (trained end to end)",
        value_label="STS-B dev Spearman ×100",
        title=PROSE.fill("swap_plot"),
    )
    return swap_dims, swap, plot


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    data_dir = resolve_data_dir(args.data_dir)
    tasks, dev, eval_texts = evaluation_data(args, data_dir)
    training, train_texts = training_data(args, data_dir, eval_texts, dev)
    if args.objective == "simcse" and args.write_train_texts:
        atomic_write_text(args.write_train_texts, "".join(t + "\n" for t in train_texts))
        return 0
    fit_texts = train_texts[: args.n_fit]
    log(f"training on {training.name} ({len(training)}); {len(eval_texts)} evaluation texts")
    outcomes, step2_dev, pooler_lr = train(args, training, dev)
    first = outcomes[args.pooler_lr_list[0]]
    result = dataclasses.replace(first, two_step=outcomes[pooler_lr].two_step)
    embeddings = Embeddings(eval_texts, args.encode_batch_size)
    base_name = embeddings.encoder(args.model).name
    names = (base_name, f"{base_name}+{args.objective}")
    jobs = vector_jobs(args, result, embeddings, fit_texts, names)
    log(f"scoring {len(jobs)} embeddings on {len(tasks)} tasks with {args.workers} processes")
    records = score_vectors(jobs, eval_texts, tasks, fit_data=training.name, workers=args.workers)
    swap = swap_figure(args, first.end_to_end, dev)
    elapsed = time.perf_counter() - started
    write_records(HERE / "results" / f"{args.results_name}.json", records)
    run = {"elapsed": elapsed, "pooler_lr": pooler_lr, "n_fit": len(fit_texts), "names": names}
    body = section(args, run, training, result, tasks, records, step2_dev, swap)
    update_section(RESULTS_MD, args.results_name, body)
    print(body)
    return 0


class Scores:
    """Look-ups into the records: a method's score at a width on a task's data set."""

    def __init__(self, records: list[ResultRecord], names: tuple[str, str]) -> None:
        self.base_name, self.trained_name = names
        self.scores = {(r.model, r.method, r.dim, r.task, r.dataset): r.score for r in records}

    def __call__(
        self, method: str, d: int, task: str, dataset: str = "avg", model: str = ""
    ) -> float:
        model = model or (self.base_name if method == UNTRAINED_PCA else self.trained_name)
        return self.scores[model, method, d, task, dataset]

    def layout(self, targets: list[int], task: str, datasets: list[str]) -> str:
        """Tables 3 and 4: one row per width and method, one column per data set."""
        rows = [
            [d, m, *(round(self(m, d, task, name), 2) for name in datasets)]
            for d in targets
            for m in [*METHODS, UNTRAINED_PCA]
        ]
        return markdown_table(["d", "method", *datasets], rows)


def step_tables(score: Scores, targets: list[int]) -> dict[str, str]:
    """The targets' checks and the paper's Table 1 (each step's STS average and its gain)."""

    def sts(method: str, d: int) -> float:
        return score(method, d, "sts")

    table1 = [
        [d, round(sts("end-to-end", d), 2), round(sts("after step 1", d), 2),
         f"{sts('after step 1', d) - sts('end-to-end', d):+.2f}", round(sts("two-step", d), 2),
         f"{sts('two-step', d) - sts('after step 1', d):+.2f}"]
        for d in targets
    ]  # fmt: skip
    checks = [
        *[[f"two-step − end-to-end, d={d} (STS avg)",
           round(sts("two-step", d) - sts("end-to-end", d), 2), ">= 0"] for d in targets],
        *[[f"two-step − PCA, d={d} (STS avg)", round(sts("two-step", d) - sts("PCA", d), 2),
           ">= 0"] for d in targets if d <= 32],
    ]  # fmt: skip
    header = ["d", "end-to-end", "after step 1", "gain", "after step 2", "gain"]
    return {
        "targets_table": markdown_table(["check", "value", "target"], checks),
        "table1": markdown_table(header, table1),
    }


def section(
    args: argparse.Namespace,
    run: dict[str, Any],
    training: TrainingSet,
    result: TwoStepResult,
    tasks: list[Task],
    records: list[ResultRecord],
    step2_dev: dict[float, dict[int, float]],
    swap: tuple[list[int], np.ndarray, Path],
) -> str:
    """The RESULTS.md section: the run's setup, then the paper's tables and Figure 4."""
    score, targets = Scores(records, run["names"]), args.target_dims
    full_dim = max(result.end_to_end)
    sts_names = [*tasks[0].suite, "avg"]  # type: ignore[attr-defined]
    cls_names = [*(s.name for s in tasks[1].sets), "avg"]  # type: ignore[attr-defined]
    full_rows = [
        [model, *(round(score("none", full_dim, task, model=model), 2)
                  for task in ("sts", "classification"))]
        for model in run["names"]
    ]  # fmt: skip
    scores_1 = sorted(result.encoder_scores.items(), reverse=True)
    lr_rows = [
        [f"{lr:g}", *(round(step2_dev[lr][d], 2) for d in targets)] for lr in args.pooler_lr_list
    ]
    swap_dims, matrix, plot = swap
    swap_rows = [[d, *(round(v, 2) for v in row)] for d, row in zip(swap_dims, matrix, strict=True)]
    return (
        PROSE.fill(
            **setup_values(args, run, training, result),
            **step_tables(score, targets),
            table3=score.layout(targets, "sts", sts_names),
            table4=score.layout(targets, "classification", cls_names),
            full_table=markdown_table(["model", "STS avg", "classification avg"], full_rows),
            step1_table=markdown_table(
                ["d'", "STS-B dev"], [[d, round(s, 2)] for d, s in scores_1]
            ),
            lr_table=markdown_table(["lr", *map(str, targets)], lr_rows),
            swap_plot=plot.name,
            swap_table=markdown_table(["encoder \\ pooler", *map(str, swap_dims)], swap_rows),
        )
        + "\n"
    )


def setup_values(
    args: argparse.Namespace, run: dict[str, Any], training: TrainingSet, result: TwoStepResult
) -> dict[str, Any]:
    """The template's values for the command, the machine and the training setup."""
    sample = PROSE.fill("simcse_sample", seed=args.seed) if args.objective == "simcse" else ""
    return {
        "results_name": args.results_name, "arguments": " ".join(sys.argv[1:]),
        "machine": machine_description(), "wall_seconds": f"{run['elapsed']:.0f}",
        "workers": args.workers, "backbone": run["names"][0],
        "full_dim": max(result.end_to_end), "objective": args.objective,
        "train_set": training.name, "n_examples": len(training), "sample": sample,
        "epochs": args.epochs, "batch_size": args.batch_size, "lr": f"{args.lr:g}",
        "eval_steps": args.eval_steps, "patience": args.patience,
        "step1_dims": ", ".join(map(str, sorted(result.end_to_end, reverse=True))),
        "encoder_dim": result.encoder_dim, "pooler_lr": f"{run['pooler_lr']:g}",
        "pooler_lrs": args.pooler_lrs, "n_fit": run["n_fit"],
        "probe_folds": args.probe_folds, "probe_inner_folds": args.probe_inner_folds,
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
