# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""The SMEC paper's three analyses on our data, scored on STS-B dev only (never a test set).

all-MiniLM-L6-v2 embeddings of unlabeled sentences (the sample of learned_compressors.py):

1. gradient variance while training, parallel Matryoshka (``smrl=False``) vs SMRL (the paper's
   Figure 6), recorded by ``lab.gradients.GradientRecordingSMEC``;
2. ADS vs truncation at 128/64/32 selected input dimensions (the paper's Table 2), with a
   documented proxy for its WARE achievement rate (see ``removal_importance``);
3. S-XBM memory size vs training time and STS-B dev quality (the paper's Table 3).

The widths and memory sizes: grids/smec_analyses.toml.

    OMP_NUM_THREADS=1 python benchmarks/smec_analyses.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from _common import HERE, RESULTS_MD, grid, log, template
from demitasse.compress import SMECVariant, TrainingSettings
from demitasse.compress.smec import SMEC
from demitasse.data import load_sts_suite, load_stsb, resolve_data_dir
from demitasse.data.beir import load_beir
from demitasse.encoders import Encoder
from demitasse.evaluation import ResultRecord, STSTask, machine_description, write_records
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.evaluation.sts import spearman_x100
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import save_figure
from lab import evaluation_texts, held_out_unlabeled
from lab.gradients import GradientLog, GradientRecordingSMEC, variance_series
from lab.templates import fill_section

WINDOW = GradientLog.window  # steps per gradient-variance window
Model = TypeVar("Model", bound=SMEC)
SELECTIONS = ("ADS", "truncation", "top variance", "proxy-WARE top-k (oracle)")


@dataclass(frozen=True)
class Grid:
    stages: list[int]
    importance_sample: int
    memory_sizes: list[int]

    def __post_init__(self) -> None:
        if not self.stages or any(
            b * 2 != a for a, b in zip(self.stages, self.stages[1:], strict=False)
        ):
            raise ValueError("'stages' must be widths each half the one before (SMEC's stages)")


GRID = grid("smec_analyses", Grid)


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


@dataclass
class Analyses:
    """What the three analyses share: the fit rows, the dev scorer, SMEC's common options,
    and the records they add to."""

    model: str
    input_dim: int
    fit_data: str
    X: np.ndarray
    dev: DevScorer
    training: TrainingSettings
    variant: SMECVariant  # what every analysis's SMEC shares
    records: list[ResultRecord]

    def record(
        self, method: str, dim: int, dataset: str, metric: str, score: float, **extra: Any
    ) -> None:
        record = ResultRecord(
            model=self.model, layer=None, method=method, dim=dim, precision="float32",
            task="analysis", dataset=dataset, metric=metric, score=float(score),
            bytes_per_vector=4 * dim, fit_data=self.fit_data, extra=extra,
        )  # fmt: skip
        self.records.append(record)

    def smec(self, cls: type[Model], dim: int, min_dim: int, **options: Any) -> Model:
        """An unfitted SMEC (of class ``cls``) with the common settings; ``options`` are fields
        of its variant, or ``rotate``."""
        rotate = options.pop("rotate", True)
        variant = replace(self.variant, **options)
        return cls(dim=dim, min_dim=min_dim, rotate=rotate, variant=variant, training=self.training)

    def at_width(self, model: SMEC, width: int) -> float:
        return self.dev(lambda V: model.transform(V, dim=width))

    def stage_names(self) -> list[str]:
        inputs = [self.input_dim, *GRID.stages[:-1]]
        return [f"{a}→{b}" for a, b in zip(inputs, GRID.stages, strict=True)]


def gradient_variance(run: Analyses) -> tuple[list[list[Any]], dict[str, dict[str, np.ndarray]]]:
    """Analysis 1: parallel vs sequential (SMRL) training of the same stages."""
    curves: dict[str, dict[str, np.ndarray]] = {}
    rows = []
    chain = "→".join(map(str, GRID.stages))
    for smrl in (False, True):
        mode = "SMRL" if smrl else "parallel"
        clock = time.perf_counter()
        model = run.smec(GradientRecordingSMEC, GRID.stages[0], GRID.stages[-1], smrl=smrl)
        model.fit(run.X)
        seconds = time.perf_counter() - clock
        curves[mode] = {}
        for index, (width, stage) in enumerate(zip(GRID.stages, run.stage_names(), strict=True)):
            name, module = (f"smec: stage {width}", 0) if smrl else (f"smec: stage {chain}", index)
            series = curves[mode][stage] = variance_series(model.history_, name, module)
            score = run.at_width(model, width)
            medians = np.median(series[:, 1]), np.median(series[:, 2])
            steps = len(series) * WINDOW
            rows.append([mode, stage, steps, *(f"{m:.3g}" for m in medians), round(score, 2)])
            method = f"smec-{mode.lower()}"
            run.record(method, width, "gradient-variance", "median-variance", medians[0],
                       stage=stage, window_steps=WINDOW, steps=series[:, 0].tolist(),
                       variance=series[:, 1].tolist(), relative=series[:, 2].tolist())  # fmt: skip
            run.record(method, width, "gradient-variance", "median-relative", medians[1],
                       stage=stage)  # fmt: skip
            run.record(method, width, "STS-B-dev", "spearman", score,
                       fit_seconds=round(seconds, 1))  # fmt: skip
        log(f"gradient variance {mode}: fitted in {seconds:.0f} s")
    return rows, curves


def selections(
    model: SMEC, k: int, by_variance: np.ndarray, ranked: np.ndarray
) -> dict[str, np.ndarray]:
    """The k input dimensions each selection keeps."""
    dims = [model.selected_dims(0), np.arange(k), by_variance[:k], ranked[:k]]
    return dict(zip(SELECTIONS, dims, strict=True))


def ads_vs_truncation(run: Analyses, seed: int, full: float) -> list[list[Any]]:
    """Analysis 2: one single-stage SMEC per size on the raw (unrotated) dimensions."""
    order = np.random.default_rng(seed).permutation(len(run.X))
    importance = removal_importance(run.X[order[: GRID.importance_sample]].astype(np.float64))
    ranked = np.argsort(-importance)
    by_variance = np.argsort(-run.X.var(axis=0))
    rows = []
    for k in GRID.stages:
        model = run.smec(SMEC, k, k, rotate=False, xbm=False).fit(run.X)
        top = set(ranked[:k].tolist())
        smec_score = run.at_width(model, k)
        for name, dims in selections(model, k, by_variance, ranked).items():
            hit = len(top & set(dims.tolist())) / k
            score = run.dev(lambda V, d=dims: V[:, d])
            kept = importance[dims].sum() / importance[ranked[:k]].sum()
            rows.append([k, name, f"{hit:.2f}", f"{kept:.3f}", round(score, 2),
                         f"{score / full:.3f}"])  # fmt: skip
            method = name.split(" (")[0].replace(" ", "-")
            run.record(method, k, "ads-selection", "achievement-rate", hit,
                       chance=k / run.input_dim)  # fmt: skip
            run.record(method, k, "ads-selection", "importance-captured", kept)
            run.record(method, k, "STS-B-dev", "spearman", score, selection_only=True)
            run.record(method, k, "STS-B-dev", "retained-fraction", score / full)
        run.record("smec-single-stage", k, "STS-B-dev", "spearman", smec_score)
        rows.append([k, "(SMEC output, ADS + reduction)", "", "", round(smec_score, 2),
                     f"{smec_score / full:.3f}"])  # fmt: skip
        log(f"ADS {k}: done")
    return rows


def memory_sizes(run: Analyses, sizes: list[int]) -> list[list[Any]]:
    """Analysis 3: S-XBM memory size vs training time and quality."""
    rows = []
    for size in sizes:
        wall, cpu = time.perf_counter(), time.process_time()
        model = run.smec(SMEC, GRID.stages[0], GRID.stages[-1], xbm=size > 0,
                         memory_size=max(size, 1)).fit(run.X)  # fmt: skip
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        scores = [run.at_width(model, w) for w in GRID.stages]
        rows.append([size, f"{wall:.1f}", f"{cpu:.1f}", *(round(s, 2) for s in scores)])
        for width, score in zip(GRID.stages, scores, strict=True):
            run.record("smec", width, "STS-B-dev", "spearman", score, memory_size=size,
                       fit_seconds=round(wall, 1), cpu_seconds=round(cpu, 1))  # fmt: skip
        log(f"S-XBM {size}: {wall:.0f} s")
    return rows


def plot_curves(curves: dict[str, dict[str, np.ndarray]], stages: list[str], n: int) -> Path:
    """The first stage's variance and relative variance, and the last stage's relative one."""
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = ((stages[0], 1), (stages[0], 2), (stages[-1], 2))
    for ax, (stage, field) in zip(axes, panels, strict=True):
        for mode, colour in (("parallel", "tab:red"), ("SMRL", "tab:blue")):
            series = curves[mode][stage]
            ax.plot(series[:, 0], series[:, field], color=colour, label=mode)
        ax.set_yscale("log")
        ax.set_xlabel("training step of the stage")
        what = "gradient variance" if field == 1 else "relative gradient variance"
        ax.set_title(f"{what}, stage {stage}")
        ax.legend()
    figure.suptitle(f"SMEC on all-MiniLM-L6-v2, {n} unlabeled sentences: parallel vs SMRL")
    figure.tight_layout()
    return save_figure(figure, HERE / "results" / "smec_analyses.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--n-unlabeled", type=int, default=10000)
    parser.add_argument("--max-epochs", type=int, default=8, help="per SMEC stage")
    parser.add_argument("--memory-sizes", default=",".join(map(str, GRID.memory_sizes)))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    run = prepare(args)
    full = run.dev()
    log(f"{len(run.X)} unlabeled sentences; STS-B dev at {run.input_dim} dims: {full:.2f}")
    run.record("none", run.input_dim, "STS-B-dev", "spearman", full)
    gradient_rows, curves = gradient_variance(run)
    ads_rows = ads_vs_truncation(run, args.seed, full)
    memory_rows = memory_sizes(run, [int(s) for s in args.memory_sizes.split(",")])
    elapsed = time.perf_counter() - started
    write_records(HERE / "results" / "smec_analyses.json", run.records)
    plot = plot_curves(curves, run.stage_names(), len(run.X))
    ads_header = ["k", "selection", "achievement rate", "importance captured",
                  "STS-B dev (selected dims)", "retained"]  # fmt: skip
    memory_header = ["memory", "fit wall s", "fit CPU s",
                     *(f"STS-B dev @{w}" for w in GRID.stages)]  # fmt: skip
    gradient_header = ["training", "stage", "steps", "variance", "relative", "STS-B dev at width"]
    body = fill_section(
        RESULTS_MD, "smec_analyses", template("smec_analyses"),
        arguments=" ".join(sys.argv[1:]), machine=machine_description(),
        wall_seconds=f"{elapsed:.0f}", load=f"{os.getloadavg()[0]:.1f}",
        input_dim=run.input_dim, n_sentences=len(run.X), fit_data=run.fit_data, seed=args.seed,
        full=f"{full:.2f}", max_epochs=args.max_epochs,
        stage_chain="→".join(map(str, [run.input_dim, *GRID.stages])), window=WINDOW,
        gradient_table=markdown_table(gradient_header, gradient_rows), plot=plot.name,
        importance_sample=GRID.importance_sample, ads_table=markdown_table(ads_header, ads_rows),
        memory_table=markdown_table(memory_header, memory_rows),
    )  # fmt: skip
    print(body)
    return 0


def prepare(args: argparse.Namespace) -> Analyses:
    """The fit rows: the learned_compressors.py sample (the same exclusion set, so the same
    sentences and embedding cache), and the STS-B dev scorer."""
    data_dir = resolve_data_dir(args.data_dir)
    encoder: Encoder = load_encoder("all-MiniLM-L6-v2")
    scifact = load_beir(data_dir / "beir" / "scifact")
    tasks = [STSTask(load_sts_suite(data_dir)), RetrievalTask(scifact)]
    unlabeled = held_out_unlabeled(data_dir, args.n_unlabeled, args.seed, evaluation_texts(tasks))
    training = TrainingSettings(max_epochs=args.max_epochs, device="cpu", seed=args.seed)
    # Chain inference, as when the section was run (distilled width networks since #31).
    variant = SMECVariant(inference="chain")
    X = encoder.encode(unlabeled)
    return Analyses(encoder.name, encoder.dim, f"unlabeled-en-{len(unlabeled) // 1000}k", X,
                    DevScorer(encoder, data_dir), training, variant, [])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
