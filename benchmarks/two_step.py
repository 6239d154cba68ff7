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
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from demitasse.compress import load_compressor, make_compressor
from demitasse.data import (
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
    evaluate_vectors,
    machine_description,
    write_records,
)
from demitasse.io import atomic_write_text
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import plot_matrix_heatmap
from demitasse.report.results_file import update_section
from demitasse.training import TrainingConfig, TrainingSet
from demitasse.training.pooler import POOLER_DIR
from demitasse.training.two_step import pooled_dev_scores, pooler_swap_matrix, two_step

HERE = Path(__file__).resolve().parent
MANIFOLDS = ("pca", "isomap", "lle")
LABELS = {"pca": "PCA", "isomap": "Isomap", "lle": "LLE"}
UNTRAINED_PCA = "PCA of the untrained backbone"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def score_all(
    jobs: list[tuple[str, str, np.ndarray]],
    texts: list[str],
    tasks: list[Task],
    fit_data: str,
    workers: int,
) -> list[ResultRecord]:
    """Score every (method, model, vectors) job on every task, spread over ``workers``
    processes (the classification probes dominate the time)."""
    machine = machine_description()  # in this process: forked workers cannot ask the GPU
    if workers <= 1:
        records = [
            r
            for method, model, vectors in jobs
            for r in evaluate_vectors(
                vectors, texts, tasks, model=model, method=method, fit_data=fit_data
            )
        ]
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            futures = [
                pool.submit(evaluate_vectors, vectors, texts, tasks, model=model, method=method,
                            fit_data=fit_data)
                for method, model, vectors in jobs
            ]  # fmt: skip
            records = [r for future in futures for r in future.result()]
    return [dataclasses.replace(r, machine=machine) for r in records]


def main() -> int:
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

    started = time.perf_counter()
    data_dir = resolve_data_dir(args.data_dir)
    runs = Path(args.runs_dir) if args.runs_dir else cache_root() / "runs" / "two-step"
    suite = (
        load_sts_suite(data_dir, args.sts_sets.split(","))
        if args.sts_sets
        else load_sts_suite(data_dir)
    )
    tasks: list[Task] = [
        STSTask(suite),
        ClassificationTask(
            data_dir,
            limit=args.classification_limit,
            seed=args.seed,
            settings=ProbeSettings(folds=args.probe_folds, inner_folds=args.probe_inner_folds),
        ),
    ]
    dev = load_stsb("dev", data_dir)
    if args.dev_limit:
        dev = dataclasses.replace(
            dev,
            sentences1=dev.sentences1[: args.dev_limit],
            sentences2=dev.sentences2[: args.dev_limit],
            scores=dev.scores[: args.dev_limit],
        )
    eval_texts = list(dict.fromkeys(t for task in tasks for t in task.texts()))
    if args.objective == "simcse":
        if args.train_texts:
            train_texts = read_texts(args.train_texts)[: args.n_train]
        else:
            exclude = set(eval_texts) | set(dev.texts())
            train_texts = load_unlabeled(data_dir, args.n_train, args.seed, exclude)
        if args.write_train_texts:
            atomic_write_text(args.write_train_texts, "".join(t + "\n" for t in train_texts))
            return 0
        sets = [TrainingSet.unlabeled(f"unlabeled-en-{len(train_texts) // 1000}k", train_texts)]
    else:
        snli = load_snli(data_dir, ("dev", "test"))
        sets = [TrainingSet.from_nli("snli", snli)]
        train_texts = list(dict.fromkeys(snli.premises + snli.hypotheses))
    fit_texts = train_texts[: args.n_fit]
    log(f"training on {sets[0].name} ({len(sets[0])}); {len(eval_texts)} evaluation texts")

    config = TrainingConfig(
        max_epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        eval_every=args.eval_steps,
        patience=args.patience or None,
        seed=args.seed,
    )
    targets = [int(d) for d in args.targets.split(",") if d]
    candidates = [int(d) for d in args.candidates.split(",") if d]
    pooler_lrs = [float(v) for v in args.pooler_lrs.split(",")]
    outcomes = {
        lr: two_step(
            args.model, targets, candidates, sets, runs, dev, args.objective, config,
            dataclasses.replace(config, learning_rate=lr), step2_name=f"two-step-lr{lr:g}",
            progress=False,
        )
        for lr in pooler_lrs
    }  # fmt: skip
    first = outcomes[pooler_lrs[0]]
    end_to_end, encoder_dim = first.end_to_end, first.encoder_dim
    encoder_opt = end_to_end[encoder_dim]
    step2_dev = {
        lr: dict(zip(targets, pooled_dev_scores(encoder_opt, list(out.two_step.values()), dev),
                     strict=True))
        for lr, out in outcomes.items()
    }  # fmt: skip
    pooler_lr = max(pooler_lrs, key=lambda lr: float(np.mean(list(step2_dev[lr].values()))))
    two = outcomes[pooler_lr].two_step
    full_dim = max(end_to_end)
    log(f"encoder_opt: d={encoder_dim}; step-2 pooler lr {pooler_lr:g}")

    encoders: dict[Path | str, Encoder] = {}
    vectors: dict[Path | str, np.ndarray] = {}

    def encoder_of(model_dir: Path | str) -> Encoder:
        if model_dir not in encoders:
            encoders[model_dir] = load_encoder(model_dir, cache=False)
        return encoders[model_dir]

    def encoded(model_dir: Path | str) -> np.ndarray:
        if model_dir not in vectors:
            log(f"encoding {len(eval_texts)} texts with {model_dir}")
            encoder = encoder_of(model_dir)
            vectors[model_dir] = encoder.encode(eval_texts, batch_size=args.encode_batch_size)
        return vectors[model_dir]

    def pooled(pooler_dir: Path, encoder_dir: Path) -> np.ndarray:
        return load_compressor(pooler_dir / POOLER_DIR).transform(encoded(encoder_dir))

    base_name = encoder_of(args.model).name
    trained_name = f"{base_name}+{args.objective}"
    trained_base = end_to_end[full_dim]
    jobs: list[tuple[str, str, np.ndarray]] = [
        ("none", base_name, encoded(args.model)),
        ("none", trained_name, encoded(trained_base)),
    ]
    fit_trained = encoder_of(trained_base).encode(fit_texts)
    fit_untrained = encoder_of(args.model).encode(fit_texts)
    for d in targets:
        for method in MANIFOLDS:
            compressor = make_compressor(method, dim=d).fit(fit_trained)
            jobs.append((LABELS[method], trained_name, compressor.transform(encoded(trained_base))))
        pca = make_compressor("pca", dim=d).fit(fit_untrained)
        jobs.append((UNTRAINED_PCA, base_name, pca.transform(encoded(args.model))))
        jobs.append(("end-to-end", trained_name, pooled(end_to_end[d], end_to_end[d])))
        jobs.append(("after step 1", trained_name, pooled(end_to_end[d], encoder_opt)))
        jobs.append(("two-step", trained_name, pooled(two[d], encoder_opt)))
    log(f"scoring {len(jobs)} embeddings on {len(tasks)} tasks with {args.workers} processes")
    records = score_all(jobs, eval_texts, tasks, sets[0].name, args.workers)

    swap_dims = sorted(end_to_end, reverse=True)
    swap = pooler_swap_matrix({d: end_to_end[d] for d in swap_dims}, end_to_end, dev)
    swap_plot = plot_matrix_heatmap(
        swap,
        [f"encoder_{d}" for d in swap_dims],
        [f"pooler_{d}" for d in swap_dims],
        HERE / "results" / f"{args.results_name}_swap.png",
        row_label="encoder (trained end to end with pooler_d)",
        column_label="pooler (trained end to end)",
        value_label="STS-B dev Spearman ×100",
        title="Encoder × pooler swaps (paper Figure 4)",
    )
    elapsed = time.perf_counter() - started
    write_records(HERE / "results" / f"{args.results_name}.json", records)

    scores = {(r.model, r.method, r.dim, r.task, r.dataset): r.score for r in records}

    def score(method: str, d: int, task: str, dataset: str = "avg", model: str = "") -> float:
        model = model or (base_name if method == UNTRAINED_PCA else trained_name)
        return scores[model, method, d, task, dataset]

    methods = [*(LABELS[m] for m in MANIFOLDS), "end-to-end", "two-step"]
    tasks_named = ("sts", "classification")
    sts_names = [*suite, "avg"]
    cls_names = [*(s.name for s in tasks[1].sets), "avg"]  # type: ignore[attr-defined]

    def layout(task: str, names: list[str]) -> str:
        rows = [
            [d, m, *(round(score(m, d, task, name), 2) for name in names)]
            for d in targets
            for m in [*methods, UNTRAINED_PCA]
        ]
        return markdown_table(["d", "method", *names], rows)

    table1 = [
        [d, round(score("end-to-end", d, "sts"), 2),
         round(score("after step 1", d, "sts"), 2),
         f"{score('after step 1', d, 'sts') - score('end-to-end', d, 'sts'):+.2f}",
         round(score("two-step", d, "sts"), 2),
         f"{score('two-step', d, 'sts') - score('after step 1', d, 'sts'):+.2f}"]
        for d in targets
    ]  # fmt: skip
    checks = [
        *[[f"two-step − end-to-end, d={d} (STS avg)",
           round(score("two-step", d, "sts") - score("end-to-end", d, "sts"), 2), ">= 0"]
          for d in targets],
        *[[f"two-step − PCA, d={d} (STS avg)",
           round(score("two-step", d, "sts") - score("PCA", d, "sts"), 2), ">= 0"]
          for d in targets if d <= 32],
    ]  # fmt: skip
    full_rows = [
        [model, *(round(score("none", full_dim, task, model=model), 2) for task in tasks_named)]
        for model in (base_name, trained_name)
    ]
    step1_rows = [[d, round(s, 2)] for d, s in sorted(first.encoder_scores.items(), reverse=True)]
    lr_rows = [[f"{lr:g}", *(round(step2_dev[lr][d], 2) for d in targets)] for lr in pooler_lrs]
    body = "\n".join(
        [
            f"## Two-step pooler training vs end-to-end, PCA, Isomap, LLE (`{args.results_name}`)",
            "",
            f"Command: `python benchmarks/two_step.py {' '.join(sys.argv[1:])}`  ",
            f"Machine: {machine_description()}; wall time {elapsed:.0f} s (training, encoding, "
            f"{args.workers} probe processes).  ",
            f"Backbone {base_name} (D = {full_dim}); objective {args.objective} on {sets[0].name} "
            f"({len(sets[0])} examples"
            + (
                f", sampled with seed {args.seed} from `unlabeled/en`, no evaluation sentence"
                if args.objective == "simcse"
                else ""
            )
            + f"); every run: {args.epochs} epoch(s), batch {args.batch_size}, lr {args.lr:g}, "
            f"best STS-B dev checkpoint (every {args.eval_steps} steps, patience "
            f"{args.patience}); pooler = linear + tanh on the normalised mean-pooled output. "
            f"Step 1 dims {', '.join(map(str, sorted(end_to_end, reverse=True)))}; encoder_opt "
            f"= encoder_{encoder_dim}; step-2 pooler lr {pooler_lr:g} (chosen on STS-B dev among "
            f"{args.pooler_lrs}). PCA / Isomap / LLE fitted on {len(fit_texts)} training "
            f"sentences embedded by encoder_{full_dim} (the backbone trained the same way at "
            "d = D); classification: SentEval logistic-regression probe "
            f"({args.probe_folds}-fold cross-validation, C by inner {args.probe_inner_folds}-fold "
            "where a set has no test split).",
            "",
            "Targets:",
            "",
            markdown_table(["check", "value", "target"], checks),
            "",
            "Table 1 layout (7-set STS average): end-to-end, after step 1 (pooler_d on "
            "encoder_opt), after step 2 (pooler_d fine-tuned on encoder_opt), with each gain:",
            "",
            markdown_table(
                ["d", "end-to-end", "after step 1", "gain", "after step 2", "gain"], table1
            ),
            "",
            "Table 3 layout (STS, Spearman ×100):",
            "",
            layout("sts", sts_names),
            "",
            "Table 4 layout (classification accuracy ×100):",
            "",
            layout("classification", cls_names),
            "",
            f"Full width (d = {full_dim}) for reference:",
            "",
            markdown_table(["model", "STS avg", "classification avg"], full_rows),
            "",
            "Step 1: STS-B dev of each encoder_d' alone (without its pooler):",
            "",
            markdown_table(["d'", "STS-B dev"], step1_rows),
            "",
            "Step 2 pooler learning rate: STS-B dev of pooler_d on encoder_opt:",
            "",
            markdown_table(["lr", *map(str, targets)], lr_rows),
            "",
            f"Encoder × pooler swaps (Figure 4, STS-B dev): `benchmarks/results/{swap_plot.name}`.",
            "",
            markdown_table(
                ["encoder \\ pooler", *(str(d) for d in swap_dims)],
                [[d, *(round(v, 2) for v in row)] for d, row in zip(swap_dims, swap, strict=True)],
            ),
            "",
        ]
    )
    update_section(HERE / "RESULTS.md", args.results_name, body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
