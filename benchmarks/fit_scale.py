"""Fitting at scale: PCA from Parquet shard statistics (local and Ray) and a reservoir sample,
against the in-memory fit: seconds, vectors/s and peak memory at two corpus sizes.

The vectors are synthetic (Gaussian, a decaying spectrum, a common offset; float32 lists in
Parquet shards as ``demitasse embed`` writes them): the rates depend on the width and the
count, not on what the vectors mean. Each measurement runs in a fresh process, so its peak
resident memory (``ru_maxrss``) is its own; Ray's worker processes are not in the driver's
figure. Equality of the fits is checked on the same vectors and recorded too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import HERE, RESULTS_MD, log, template
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.report.tables import markdown_table
from lab.templates import fill_section

NAME = "fit_scale"
KINDS = ("in-memory", "statistics-local", "statistics-ray", "sample-local")


def write_corpus(folder: Path, rows: int, dim: int, shard_rows: int) -> None:
    """Synthetic vectors in shards of ``shard_rows``, generated shard by shard."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    scales = np.geomspace(1.0, 0.01, dim).astype(np.float32)
    for i, first in enumerate(range(0, rows, shard_rows)):
        n = min(shard_rows, rows - first)
        block = rng.standard_normal((n, dim), dtype=np.float32) * scales + 0.3
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(block.ravel()), dim).cast(
            pa.list_(pa.float32())
        )
        table = pa.table({"id": np.arange(first, first + n), "embedding": vectors})
        pq.write_table(table, folder / f"part-{i:05d}.parquet", row_group_size=16_384)


def worker(kind: str, folder: Path, dim: int, sample: int) -> dict:
    """One measurement, in this (fresh) process: seconds and peak RSS, and the fit."""
    from demitasse.compress import PCA
    from demitasse.compress.shards import sample_shards, shard_statistics

    extra: dict = {}
    if kind == "statistics-ray":
        import ray

        started = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        extra["ray_init_seconds"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    if kind == "in-memory":
        from demitasse.data import load_embeddings

        parts = [load_embeddings(p) for p in sorted(folder.glob("*.parquet"))]
        pca = PCA(dim=min(dim, 128)).fit(np.concatenate(parts))
        rows = pca.n_fit_samples_
    elif kind.startswith("statistics"):
        engine = "ray" if kind == "statistics-ray" else "local"
        stats = shard_statistics(folder, engine=engine)
        pca = PCA(dim=min(dim, 128)).fit_from_statistics(stats)
        rows = stats.count
    else:
        rows = len(sample_shards(folder, sample, seed=0))
        pca = None
    seconds = time.perf_counter() - started
    if pca is not None:
        np.save(folder.parent / f"{kind}-components.npy", pca.components_)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "rows": int(rows), "peak_mb": peak_mb, **extra}


def measure(kind: str, folder: Path, dim: int, sample: int) -> dict:
    load = os.getloadavg()[0]
    command = [sys.executable, __file__, "--worker", kind, "--folder", str(folder),
               "--dim", str(dim), "--sample", str(sample)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["load_1min"] = round((load + os.getloadavg()[0]) / 2, 2)
    return figures


def run(args: argparse.Namespace, root: Path) -> tuple[list[ResultRecord], list[list]]:
    records, rows = [], []
    for n in args.rows:
        folder = root / f"n{n}" / "shards"
        log(f"writing {n:,} × {args.dim} vectors")
        write_corpus(folder, n, args.dim, args.shard_rows)
        for kind in KINDS:
            log(f"{n:,}: {kind}")
            f = measure(kind, folder, args.dim, args.sample)
            rate = f["rows"] / f["seconds"] if kind != "sample-local" else n / f["seconds"]
            extra = {"rows": n, "omp_threads": 1, "load_1min": f["load_1min"],
                     "peak_mb": round(f["peak_mb"], 1), "seconds": round(f["seconds"], 2),
                     **({"ray_init_seconds": f["ray_init_seconds"]} if "ray_init_seconds" in f
                        else {})}  # fmt: skip
            dataset = f"synthetic {n:,} × {args.dim} float32, {args.shard_rows:,}-row shards"
            for metric, score in (("vectors_per_s", rate), ("peak_rss_mb", f["peak_mb"])):
                records.append(ResultRecord(
                    model="synthetic", layer=None, method=kind, dim=args.dim,
                    precision="float32", task="fit-at-scale", dataset=dataset, metric=metric,
                    score=float(score), extra=dict(extra),
                ))  # fmt: skip
            rows.append([f"{n:,}", kind, f"{f['seconds']:.2f}", f"{rate:,.0f}",
                         f"{f['peak_mb']:.0f}", f.get("ray_init_seconds", ""),
                         f"{f['load_1min']:.1f}"])  # fmt: skip
        rows.append([f"{n:,}", "largest component difference, statistics vs in-memory",
                     f"{_max_difference(root / f'n{n}'):.1e}", "", "", "", ""])  # fmt: skip
    return records, rows


def _max_difference(folder: Path) -> float:
    memory = np.load(folder / "in-memory-components.npy")
    worst = 0.0
    for kind in ("statistics-local", "statistics-ray"):
        other = np.load(folder / f"{kind}-components.npy")
        signs = np.sign(np.sum(memory * other, axis=1))[:, None]
        worst = max(worst, float(np.abs(other * signs - memory).max()))
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[100_000, 400_000],
        help="corpus sizes, comma-separated",
    )
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--shard-rows", type=int, default=50_000)
    parser.add_argument("--sample", type=int, default=20_000, help="reservoir size")
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.folder, args.dim, args.sample)))
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="demitasse-fit-scale-") as tmp:
        records, rows = run(args, Path(tmp))
    write_records(HERE / "results" / f"{NAME}.json", records)
    headers = ["vectors", "fit", "seconds", "vectors/s", "peak RSS MB (driver)",
               "ray.init s", "load (1 min)"]  # fmt: skip
    command = (
        "OMP_NUM_THREADS=1 flock /tmp/demitasse-bench.lock python benchmarks/fit_scale.py"
        f" --rows {','.join(map(str, args.rows))} --dim {args.dim} --sample {args.sample}"
    )
    body = fill_section(
        RESULTS_MD, NAME, template(NAME), command=command, machine=machine_description(),
        wall_seconds=f"{time.perf_counter() - started:.0f}", sample=f"{args.sample:,}",
        shard_rows=f"{args.shard_rows:,}", table=markdown_table(headers, rows),
    )  # fmt: skip
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
