# ruff: noqa: N803, N806  (matrices are capitalised)
"""Transform throughput of every learned compressor, folded for inference, next to PCA's.

Each learned compressor (Matryoshka-Adaptor, SMEC, MCR²) is fitted with its library defaults
(hidden 512), and again with hidden width 128, for one epoch on random unit vectors of the
width of all-MiniLM-L6-v2 (384), with a decaying spectrum as sentence embeddings have: speed
depends on the shapes of the network, not on how well it was trained, so the script needs no
model and no data. Then ``transform`` (the folded plan, see ``demitasse.compress.folding``) and
``reference_transform`` (the network as it trains) are timed on the same vectors, best of
``--repeats``, with ``--threads`` torch threads, and the largest difference between the two
outputs is recorded.

    python benchmarks/compress_speed.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from _common import HERE, RESULTS_MD, log, template
from demitasse.compress import Compressor, make_compressor
from demitasse.compress.learned import LearnedCompressor
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.evaluation.efficiency import thread_counts, time_interleaved
from demitasse.report import markdown_table
from lab.results_file import update_section

PROSE = template("compress_speed")
# label: (registry name, options, widths timed). MCR² has one fixed width (its default 128).
# The "-h128" rows are the same networks with hidden width 128 instead of the 512 of SMEC and
# MCR²:
# the adaptor's scores did not drop with it (RESULTS.md, `learned_compressors_fast`).
COMPRESSORS: dict[str, tuple[str, dict[str, object], list[int]]] = {
    "pca": ("pca", {"dim": 256}, [256, 32, 8]),
    "adaptor": ("adaptor", {"dim": 256, "min_dim": 8, "hidden_dim": 512}, [256, 32, 8]),
    "adaptor-h128": ("adaptor", {"dim": 256, "min_dim": 8, "hidden_dim": 128}, [256, 32, 8]),
    "smec": ("smec", {"dim": 256, "min_dim": 8, "inference": "chain"}, [256, 32, 8]),
    "smec-h128": (
        "smec",
        {"dim": 256, "min_dim": 8, "hidden_dim": 128, "inference": "chain"},
        [256, 32, 8],
    ),
    # One distilled network per stage width (hidden 128) instead of the chain: the default
    # since issue #31.
    "smec-distilled": ("smec", {"dim": 256, "min_dim": 8, "inference": "distilled"}, [256, 32, 8]),
    "mcr2": ("mcr2", {"dim": 128, "hidden_dim": 512}, [128]),
    "mcr2-h128": ("mcr2", {"dim": 128, "hidden_dim": 128}, [128]),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=384, help="input width (MiniLM's)")
    parser.add_argument("--n-fit", type=int, default=5000, help="rows of the one-epoch fits")
    parser.add_argument("--n-vectors", type=int, default=100000, help="rows per transform")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--results-name", default="compress_speed")
    return parser.parse_args()


def unit_rows(n: int, width: int, seed: int) -> np.ndarray:
    """Random unit vectors whose variance decays along the axes, as embeddings' does."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, width)) * np.linspace(2.0, 0.1, width) + 0.05
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def fitted(name: str, params: dict[str, object], X: np.ndarray) -> Compressor:
    if name == "pca":
        return make_compressor(name, **params).fit(X)
    compressor = make_compressor(name, **params, max_epochs=1, device="cpu")
    return compressor.fit(X)


def measure(
    name: str, compressor: Compressor, dims: list[int], rows: np.ndarray, args: argparse.Namespace
) -> list[ResultRecord]:
    """Folded and reference vectors/s per width, timed interleaved, and their largest gap."""
    paths: dict[str, Callable[..., np.ndarray]] = {"folded": compressor.transform}
    if isinstance(compressor, LearnedCompressor):
        paths["reference"] = compressor.reference_transform
    runs = [partial(path, rows, dim=dim) for dim in dims for path in paths.values()]
    timings = iter(time_interleaved(runs, repeats=args.repeats))
    records = []
    for dim in dims:
        gap = None
        if isinstance(compressor, LearnedCompressor):
            gap = float(
                np.abs(compressor.transform(rows, dim) - paths["reference"](rows, dim)).max()
            )
        for path in paths:
            seconds = next(timings).best
            records.append(
                ResultRecord(
                    model=f"random-{args.width}d", layer=None, method=name, dim=dim,
                    precision="float32", task="efficiency", dataset="transform",
                    metric="vectors_per_s",
                    score=len(rows) / seconds, bytes_per_vector=4 * dim,
                    extra={"path": path, "n_vectors": len(rows), "repeats": args.repeats,
                           "max_abs_diff_folded_vs_reference": gap, **thread_counts(),
                           "load_1min": os.getloadavg()[0]},
                )
            )  # fmt: skip
    return records


def table(records: list[ResultRecord]) -> str:
    rate = {(r.method, r.dim, r.extra["path"]): r.score for r in records}
    gap = {(r.method, r.dim): r.extra["max_abs_diff_folded_vs_reference"] for r in records}
    pca = {r.dim: r.score for r in records if r.method == "pca"}
    rows = []
    for method, dim, path in rate:
        if path != "folded":
            continue
        reference = rate.get((method, dim, "reference"))
        rows.append([
            method, dim, f"{rate[method, dim, path]:,.0f}",
            "" if reference is None else f"{reference:,.0f}",
            f"{pca[dim]:,.0f}" if dim in pca and method != "pca" else "",
            "" if gap[method, dim] is None else f"{gap[method, dim]:.1e}",
        ])  # fmt: skip
    header = ["method", "dim", "folded (vectors/s)", "unfolded", "PCA at that dim", "max |diff|"]
    return markdown_table(header, rows)


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    X = unit_rows(args.n_fit, args.width, seed=0)
    rows = unit_rows(args.n_vectors, args.width, seed=1)
    records: list[ResultRecord] = []
    for label, (name, params, dims) in COMPRESSORS.items():
        log(f"{label}: fitting and timing")
        records += measure(label, fitted(name, params, X), dims, rows, args)
    write_records(HERE / "results" / f"{args.results_name}.json", records)
    body = PROSE.fill(
        results_name=args.results_name, arguments=" ".join(sys.argv[1:]),
        machine=machine_description(), threads=args.threads, n_fit=len(X), width=args.width,
        n_vectors=args.n_vectors, repeats=args.repeats,
        wall_seconds=f"{time.perf_counter() - started:.0f}",
        load=f"{os.getloadavg()[0]:.1f}", table=table(records),
    )  # fmt: skip
    update_section(RESULTS_MD, args.results_name, body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
