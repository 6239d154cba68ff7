# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""The SMEC paper's three analyses on our data, scored on STS-B dev only (never a test set).

all-MiniLM-L6-v2 embeddings of unlabeled sentences (the sample of learned_compressors.py):

1. gradient variance while training, parallel Matryoshka (``smrl=False``) vs SMRL (the paper's
   Figure 6), from ``SMEC(record_gradients=True)``;
2. ADS vs truncation at 128/64/32 selected input dimensions (the paper's Table 2), with a
   documented proxy for its WARE achievement rate (see ``removal_importance``);
3. S-XBM memory size vs training time and STS-B dev quality (the paper's Table 3).

    OMP_NUM_THREADS=1 python benchmarks/smec_analyses.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from demitasse.compress.smec import SMEC
from demitasse.data import load_sts_suite, load_stsb, load_unlabeled, resolve_data_dir
from demitasse.data.beir import load_beir
from demitasse.evaluation import ResultRecord, STSTask, machine_description, write_records
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.evaluation.sts import spearman_x100
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import save_figure
from demitasse.report.results_file import update_section

HERE = Path(__file__).resolve().parent
STAGES = (128, 64, 32)
WINDOW = 5  # steps per gradient-variance window (demitasse.compress.learned._GradientLog)


def removal_importance(X: np.ndarray) -> np.ndarray:
    """Importance of each input dimension: mean |Δ cosine| over all pairs when it is removed.

    Our proxy for the paper's WARE importance (see the RESULTS section): the similarity
    structure the compressors are trained to keep, and how much of it each dimension carries.
    Closed form per dimension j: cos' = (G − x_j x_jᵀ) / √((‖a‖² − a_j²)(‖b‖² − b_j²)).
    """
    G = X @ X.T
    norms = np.einsum("ij,ij->i", X, X)
    cos = G / np.sqrt(np.outer(norms, norms))
    upper = np.triu_indices(len(X), 1)
    importance = np.empty(X.shape[1])
    for j in range(X.shape[1]):
        col = X[:, j]
        rest = norms - col**2
        changed = (G - np.outer(col, col)) / np.sqrt(np.outer(rest, rest))
        importance[j] = np.abs(changed - cos)[upper].mean()
    return importance


class DevScorer:
    """Spearman ×100 of cosine on STS-B dev for any map of the 384-d embeddings."""

    def __init__(self, encoder: Any, data_dir: Path) -> None:
        self.pairs = load_stsb("dev", data_dir)
        self.left = encoder.encode(self.pairs.sentences1)
        self.right = encoder.encode(self.pairs.sentences2)

    def __call__(self, transform: Any = None) -> float:
        a, b = self.left, self.right
        if transform is not None:
            a, b = transform(a), transform(b)
        a = a / np.linalg.norm(a, axis=1, keepdims=True).clip(1e-12)
        b = b / np.linalg.norm(b, axis=1, keepdims=True).clip(1e-12)
        return spearman_x100(np.einsum("ij,ij->i", a, b), np.asarray(self.pairs.scores))


def variance_series(history: list[dict[str, Any]], run: str, module: int) -> np.ndarray:
    """(step within the run, window variance, relative variance) of one trained module.

    Relative variance = window variance / mean ‖g‖² over the window: the share of the
    gradient's energy that is mini-batch noise (0: every batch agrees, 1: pure noise).
    """
    rows, window = [], []
    for entry in history:
        if entry["run"] != run:
            continue
        window = [*window[-(WINDOW - 1) :], entry["grad_sq_norm"][module]]
        if "grad_variance" in entry:
            variance = entry["grad_variance"][module]
            rows.append((entry["step"], variance, variance / max(np.mean(window), 1e-30)))
    return np.array(rows, dtype=float).reshape(-1, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--n-unlabeled", type=int, default=10000)
    parser.add_argument("--max-epochs", type=int, default=8, help="per SMEC stage")
    parser.add_argument("--memory-sizes", default="0,1000,5000")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731

    data_dir = resolve_data_dir(args.data_dir)
    encoder = load_encoder("all-MiniLM-L6-v2")
    # The exclusion set of learned_compressors.py, so the sample (and the embedding cache) match.
    eval_texts = STSTask(load_sts_suite(data_dir)).texts()
    eval_texts += RetrievalTask(load_beir(data_dir / "beir" / "scifact")).texts()
    exclude = set(eval_texts) | set(load_stsb("dev", data_dir).texts())
    unlabeled = load_unlabeled(data_dir, args.n_unlabeled, args.seed, exclude)
    fit_data = f"unlabeled-en-{len(unlabeled) // 1000}k"

    def record(method: str, dim: int, dataset: str, metric: str, score: float, **extra: Any) -> Any:
        return ResultRecord(
            model=encoder.name, layer=None, method=method, dim=dim, precision="float32",
            task="analysis", dataset=dataset, metric=metric, score=float(score),
            bytes_per_vector=4 * dim, fit_data=fit_data, extra=extra,
        )  # fmt: skip

    X = encoder.encode(unlabeled)
    dev = DevScorer(encoder, data_dir)
    full = dev()
    log(f"{len(X)} unlabeled sentences; STS-B dev at 384 dims: {full:.2f}")
    common = {"max_epochs": args.max_epochs, "device": "cpu", "seed": args.seed}
    records: list[ResultRecord] = [record("none", 384, "STS-B-dev", "spearman", full)]

    # 1. Gradient variance: parallel vs sequential, same stages 384→128→64→32.
    curves: dict[str, dict[str, np.ndarray]] = {}
    grad_rows = []
    for smrl in (False, True):
        mode = "SMRL" if smrl else "parallel"
        clock = time.perf_counter()
        model = SMEC(dim=128, min_dim=32, smrl=smrl, record_gradients=True, **common).fit(X)
        seconds = time.perf_counter() - clock
        curves[mode] = {}
        for index, width in enumerate(STAGES):
            run, module = (f"smec: stage {width}", 0) if smrl else ("smec: stage 128→64→32", index)
            series = variance_series(model.history_, run, module)
            stage = f"{'384' if index == 0 else STAGES[index - 1]}→{width}"
            curves[mode][stage] = series
            score = dev(lambda V, w=width, m=model: m.transform(V, dim=w))
            medians = np.median(series[:, 1]), np.median(series[:, 2])
            steps = len(series) * WINDOW
            grad_rows.append([mode, stage, steps, *(f"{m:.3g}" for m in medians), round(score, 2)])
            records += [
                record(f"smec-{mode.lower()}", width, "gradient-variance", "median-variance",
                       np.median(series[:, 1]), stage=stage, window_steps=WINDOW,
                       steps=series[:, 0].tolist(), variance=series[:, 1].tolist(),
                       relative=series[:, 2].tolist()),
                record(f"smec-{mode.lower()}", width, "gradient-variance", "median-relative",
                       np.median(series[:, 2]), stage=stage),
                record(f"smec-{mode.lower()}", width, "STS-B-dev", "spearman", score,
                       fit_seconds=round(seconds, 1)),
            ]  # fmt: skip
        log(f"gradient variance {mode}: fitted in {seconds:.0f} s")

    # 2. ADS vs truncation: one single-stage SMEC per size on the raw (unrotated) dimensions.
    sample = X[np.random.default_rng(args.seed).permutation(len(X))[:800]].astype(np.float64)
    importance = removal_importance(sample)
    ranked = np.argsort(-importance)
    by_variance = np.argsort(-X.var(axis=0))
    ads_rows = []
    for k in STAGES:
        model = SMEC(dim=k, min_dim=k, rotate=False, xbm=False, **common).fit(X)
        chosen = {
            "ADS": model.selected_dims(0),
            "truncation": np.arange(k),
            "top variance": by_variance[:k],
            "proxy-WARE top-k (oracle)": ranked[:k],
        }
        top = set(ranked[:k].tolist())
        smec_score = dev(lambda V, m=model, k=k: m.transform(V, dim=k))
        for name, dims in chosen.items():
            hit = len(top & set(dims.tolist())) / k
            score = dev(lambda V, d=dims: V[:, d])
            kept = importance[dims].sum() / importance[ranked[:k]].sum()
            ads_rows.append([k, name, f"{hit:.2f}", f"{kept:.3f}", round(score, 2),
                             f"{score / full:.3f}"])  # fmt: skip
            method = name.split(" (")[0].replace(" ", "-")
            records += [
                record(method, k, "ads-selection", "achievement-rate", hit, chance=k / 384),
                record(method, k, "ads-selection", "importance-captured", kept),
                record(method, k, "STS-B-dev", "spearman", score, selection_only=True),
                record(method, k, "STS-B-dev", "retained-fraction", score / full),
            ]
        records.append(record("smec-single-stage", k, "STS-B-dev", "spearman", smec_score))
        ads_rows.append([k, "(SMEC output, ADS + reduction)", "", "", round(smec_score, 2),
                         f"{smec_score / full:.3f}"])  # fmt: skip
        log(f"ADS {k}: done")

    # 3. S-XBM memory size vs training time and quality.
    memory_rows = []
    for size in (int(s) for s in args.memory_sizes.split(",")):
        wall, cpu = time.perf_counter(), time.process_time()
        params = {"xbm": size > 0, "memory_size": max(size, 1)}
        model = SMEC(dim=128, min_dim=32, **params, **common).fit(X)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        scores = [dev(lambda V, w=w, m=model: m.transform(V, dim=w)) for w in STAGES]
        memory_rows.append([size, f"{wall:.1f}", f"{cpu:.1f}", *(round(s, 2) for s in scores)])
        for width, score in zip(STAGES, scores, strict=True):
            extra = {
                "memory_size": size,
                "fit_seconds": round(wall, 1),
                "cpu_seconds": round(cpu, 1),
            }
            records.append(record("smec", width, "STS-B-dev", "spearman", score, **extra))
        log(f"S-XBM {size}: {wall:.0f} s")

    elapsed = time.perf_counter() - started
    write_records(HERE / "results" / "smec_analyses.json", records)
    plot = HERE / "results" / "smec_analyses.png"
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, width_label, field in (
        (axes[0], "384→128", 1),
        (axes[1], "384→128", 2),
        (axes[2], "64→32", 2),
    ):
        for mode, colour in (("parallel", "tab:red"), ("SMRL", "tab:blue")):
            series = curves[mode][width_label]
            ax.plot(series[:, 0], series[:, field], color=colour, label=mode)
        ax.set_yscale("log")
        ax.set_xlabel("training step of the stage")
        what = "gradient variance" if field == 1 else "relative gradient variance"
        ax.set_title(f"{what}, stage {width_label}")
        ax.legend()
    figure.suptitle(f"SMEC on all-MiniLM-L6-v2, {len(X)} unlabeled sentences: parallel vs SMRL")
    figure.tight_layout()
    save_figure(figure, plot)

    body = "\n".join(
        [
            "## SMEC analyses: gradient variance, ADS vs truncation, S-XBM memory "
            "(`smec_analyses`)",
            "",
            f"Command: `OMP_NUM_THREADS=1 python benchmarks/smec_analyses.py "
            f"{' '.join(sys.argv[1:])}`  ",
            f"Machine: {machine_description()}, one torch thread; wall time {elapsed:.0f} s "
            f"(embedding cache warm); load average at the end {os.getloadavg()[0]:.1f}.  ",
            f"all-MiniLM-L6-v2 (384-d) embeddings of {len(X)} unlabeled sentences "
            f"(`{fit_data}`, the first {len(X)} of the learned_compressors.py sample, seed "
            f"{args.seed}); every score is Spearman ×100 of cosine on **STS-B dev** (no test "
            f"set); uncompressed: {full:.2f}. SMEC library defaults except at most "
            f"{args.max_epochs} epochs per stage; stages 384→128→64→32.",
            "",
            "### 1. Gradient variance, parallel Matryoshka vs SMRL (paper's Figure 6)",
            "",
            "`SMEC(record_gradients=True)` logs, every 5 mini-batches, the gradient variance of "
            "each trained stage's weights over those batches (mean ‖g‖² − ‖mean g‖², "
            "importance logits excluded). Parallel trains all three stages at once on the mean "
            "of the three widths' losses; SMRL trains one stage at a time on its own loss. "
            "Because the parallel loss averages three terms, raw variances differ in scale, so "
            "the table also gives the relative variance (window variance / mean ‖g‖² over the "
            "window: the share of gradient energy that is mini-batch noise). Medians over the "
            "stage's training (steps: those in complete 5-step windows):",
            "",
            markdown_table(
                ["training", "stage", "steps", "variance", "relative", "STS-B dev at width"],
                grad_rows,
            ),
            "",
            f"Plot: `benchmarks/results/{plot.name}`.",
            "",
            "### 2. ADS vs truncation (paper's Table 2)",
            "",
            "The paper's WARE definition was not available to us, so the achievement rate here "
            "is a documented proxy: each raw input dimension's importance is the mean absolute "
            "change of all pairwise cosines (800 fit sentences) when that dimension alone is "
            "removed; the achievement rate of a selection of k dimensions is the fraction of it "
            "inside the k most important (chance: k/384). Also: the share of the top-k "
            "importance mass the selection captures, and STS-B dev using only the selected raw "
            "dimensions (cosine), absolute and as a fraction of the 384-d score. ADS is a "
            "single-stage `SMEC(dim=k, min_dim=k, rotate=False, xbm=False)` (its importance "
            "logits start from the log-variance prior); truncation keeps the first k.",
            "",
            markdown_table(
                [
                    "k",
                    "selection",
                    "achievement rate",
                    "importance captured",
                    "STS-B dev (selected dims)",
                    "retained",
                ],
                ads_rows,
            ),
            "",
            "### 3. S-XBM memory size (paper's Table 3)",
            "",
            "Memory 0 = S-XBM off (in-batch top-k neighbours instead). Fit times on a CPU "
            "shared with another benchmark; CPU seconds are the more stable figure.",
            "",
            markdown_table(
                ["memory", "fit wall s", "fit CPU s", *(f"STS-B dev @{w}" for w in STAGES)],
                memory_rows,
            ),
        ]
    )
    update_section(HERE / "RESULTS.md", "smec_analyses", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
