"""Bulk embedding and re-compression at scale on this machine: ``demitasse embed`` with
``--engine local`` and ``--engine ray`` on up to 1 million texts with a static model and on a
100k sample with all-MiniLM-L6-v2, peak memory at 100k and at 1M, and ``demitasse recompress``
of stored vectors with a linear compressor (PCA).

The texts are the unlabeled English corpus (``unlabeled/en``, 486k lines) repeated until there
are enough, every copy after the first with the suffix `` [copy k]`` so that no text repeats;
written as 10 plain-text files. Each run is a fresh CLI process (``python -m demitasse``), timed
from start to exit (model load and, for Ray, starting a local Ray included); peak memory is the
largest summed resident memory of the process and all its descendants (Ray's raylet, workers
and object store included), sampled every 0.2 s.

    python benchmarks/scale.py --data-dir ../shared/data --static /tmp/serve/minilm-static-256
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import HERE, RESULTS_MD, log, template
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.report import markdown_table
from lab.templates import fill_section

NAME = "scale"
REPO = HERE.parent
FILES = 10
FIT_TEXTS = 2000


def corpus_lines(data_dir: str | None) -> list[str]:
    root = Path(data_dir or os.environ.get("DEMITASSE_DATA", "../shared/data")) / "unlabeled/en"
    lines: list[str] = []
    for path in sorted(root.glob("*.txt.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines += [line.rstrip("\n") for line in f if line.strip()]
    return lines


def write_corpus(lines: list[str], n: int, folder: Path) -> Path:
    """``n`` texts: the corpus, then copies of it with a per-copy suffix, in ``FILES`` files."""
    if folder.is_dir() and len(list(folder.glob("*.txt"))) == FILES:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    per_file = -(-n // FILES)
    texts = (
        lines[i % len(lines)] + (f" [copy {i // len(lines)}]" if i >= len(lines) else "")
        for i in range(n)
    )
    for index in range(FILES):
        with (folder / f"part-{index:02d}.txt").open("w", encoding="utf-8") as f:
            for _, text in zip(range(per_file), texts, strict=False):
                f.write(text.replace("\n", " ") + "\n")
    return folder


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack += children.get(current, [])
    return total


def run_cli(argv: list[str]) -> dict[str, float]:
    """Run ``demitasse`` in a fresh process: wall seconds and peak memory of its tree."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "demitasse", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss(process.pid))
        time.sleep(0.2)
    wall = time.perf_counter() - started
    _, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"error: demitasse {' '.join(argv[:2])} failed: {err.strip()[-500:]}")
    return {"wall_s": wall, "peak_rss_mb": peak / 2**20, "load_1min": os.getloadavg()[0]}


def steady_rate(out: Path, manifest: dict[str, Any]) -> float:
    """Records a second between the first and the last shard written (file times): the rate
    once the model is loaded and Ray is up, start-up costs left out."""
    done = sorted(((out / "shards" / s["name"]).stat().st_mtime, s["rows"])
                  for s in manifest["shards"])  # fmt: skip
    if len(done) < 2 or done[-1][0] <= done[0][0]:
        return float("nan")
    return sum(rows for _, rows in done[1:]) / (done[-1][0] - done[0][0])


def make_model(encoder: str | None, texts: Any, out: Path, **kwargs: Any) -> Path:
    from demitasse import CompressedModel

    if (out / "config.json").is_file():
        return out
    model = CompressedModel(encoder, **kwargs)
    if encoder is None:
        model.fit(vectors=texts, data_label="scale benchmark sample")
    else:
        model.fit(texts, data_label="scale benchmark sample")
    return model.save(out)


def embed_runs(args: argparse.Namespace, work: Path, lines: list[str]) -> list[dict[str, Any]]:

    static = make_model(args.static, lines[:FIT_TEXTS], work / "static-int8", precision="int8")
    minilm = make_model(args.model, lines[:FIT_TEXTS], work / "minilm-int8", precision="int8")
    sizes = sorted({min(args.small, args.texts), args.texts})
    plan = [("static", static, n, engine) for n in sizes for engine in ("local", "ray")]
    plan += [("all-MiniLM-L6-v2", minilm, args.minilm_texts, e) for e in ("local", "ray")]
    runs = []
    for label, model, n, engine in plan:
        corpus = write_corpus(lines, n, work / f"corpus-{n}")
        out = work / f"out-{label}-{n}-{engine}"
        shutil.rmtree(out, ignore_errors=True)
        shard_rows = max(n // 20, 500)
        argv = ["embed", str(model), "--input", f"{corpus}/*.txt", "--out", str(out),
                "--engine", engine, "--threads", "1", "--batch-size", str(args.batch_size),
                "--shard-rows", str(shard_rows)]  # fmt: skip
        if engine == "ray":
            argv += ["--concurrency", str(args.concurrency)]
        else:
            argv[argv.index("--threads") + 1] = str(args.local_threads)
        log(f"{label}, {n} texts, {engine}")
        figures = run_cli(argv)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["rows"] == n, (manifest["rows"], n)
        runs.append({"model": label, "texts": n, "engine": engine, **figures,
                     "per_s": n / figures["wall_s"],
                     # Ray's driver writes shards in bursts as ordered results arrive: their
                     # file times do not time the work, so no start-up-free rate for Ray.
                     "steady_per_s": steady_rate(out, manifest) if engine == "local"
                     else float("nan")})  # fmt: skip
        shutil.rmtree(out, ignore_errors=True)
    return runs


def recompress_runs(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """PCA 384 → 128, int8, over stored float32 vectors: through the CLI (Parquet in and out)
    and the transform alone in memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from demitasse import CompressedModel

    rng = np.random.default_rng(0)
    basis = rng.normal(size=(384, 384)).astype(np.float32) / 20
    folder = work / "vectors"
    if not folder.is_dir():
        folder.mkdir()
        per_file = args.vectors // FILES
        for index in range(FILES):
            x = rng.normal(size=(per_file, 384)).astype(np.float32) @ basis
            column = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 384)
            pq.write_table(
                pa.table({"embedding": column}),
                folder / f"v{index:02d}.parquet",
                compression="none",
            )
    sample = rng.normal(size=(20_000, 384)).astype(np.float32) @ basis
    model_dir = make_model(
        None, sample, work / "pca128", compressor="pca", dim=128, precision="int8"
    )
    out = work / "out-recompress"
    shutil.rmtree(out, ignore_errors=True)
    log(f"recompress {args.vectors} vectors")
    figures = run_cli(
        [
            "recompress",
            str(model_dir),
            "--input",
            f"{folder}/*.parquet",
            "--out",
            str(out),
            "--batch-size",
            "16384",
            "--shard-rows",
            "100000",
        ]
    )
    shutil.rmtree(out, ignore_errors=True)
    model = CompressedModel.load(model_dir)
    block = rng.normal(size=(args.vectors // FILES, 384)).astype(np.float32) @ basis
    started = time.perf_counter()
    for _ in range(FILES):
        model.transform(block, precision="int8")
    memory_s = time.perf_counter() - started
    return [
        {
            "what": "demitasse recompress (Parquet in, Parquet out)",
            **figures,
            "per_s": args.vectors / figures["wall_s"],
        },
        {
            "what": "CompressedModel.transform in memory",
            "wall_s": memory_s,
            "per_s": args.vectors / memory_s,
            "peak_rss_mb": float("nan"),
            "load_1min": os.getloadavg()[0],
        },
    ]


def records_of(embeds: list[dict[str, Any]], recompress: list[dict[str, Any]]) -> list:
    records = []
    for run in embeds:
        extra = {
            "engine": run["engine"],
            "texts": run["texts"],
            "wall_s": round(run["wall_s"], 1),
            "load_1min": round(run["load_1min"], 2),
        }
        for metric in ("per_s", "steady_per_s", "peak_rss_mb"):
            if run[metric] != run[metric]:  # NaN: not measured
                continue
            records.append(
                ResultRecord(
                    model=run["model"],
                    layer=None,
                    method="none",
                    dim=0,
                    precision="int8",
                    task="bulk-embed",
                    dataset=f"unlabeled/en repeated, {run['texts']} texts",
                    metric={"per_s": "texts_per_s", "steady_per_s": "steady_texts_per_s"}.get(
                        metric, metric
                    ),
                    score=float(run[metric]),
                    extra=dict(extra),
                )
            )
    for run in recompress:
        records.append(
            ResultRecord(
                model="vectors-only",
                layer=None,
                method="pca",
                dim=128,
                precision="int8",
                task="recompress",
                dataset="synthetic 384-d float32 vectors",
                metric="vectors_per_s",
                score=float(run["per_s"]),
                extra={
                    "what": run["what"],
                    "wall_s": round(run["wall_s"], 2),
                    "load_1min": round(run["load_1min"], 2),
                },
            )
        )
    return records


def table_rows(embeds: list[dict[str, Any]], recompress: list[dict[str, Any]]) -> list[list]:
    rows = []
    for run in embeds:
        local = next(
            r
            for r in embeds
            if r["model"] == run["model"] and r["texts"] == run["texts"] and r["engine"] == "local"
        )
        overhead = "" if run is local else f"{run['wall_s'] / local['wall_s']:.2f}×"
        rows.append(
            [
                f"embed, {run['model']}",
                f"{run['texts']:,}",
                run["engine"],
                f"{run['per_s']:,.0f}",
                "n/a"
                if run["steady_per_s"] != run["steady_per_s"]
                else f"{run['steady_per_s']:,.0f}",
                f"{run['wall_s']:.0f}",
                f"{run['peak_rss_mb']:,.0f}",
                overhead,
                f"{run['load_1min']:.1f}",
            ]
        )
    for run in recompress:
        memory = "" if run["peak_rss_mb"] != run["peak_rss_mb"] else f"{run['peak_rss_mb']:,.0f}"
        rows.append(
            [
                run["what"],
                "",
                "local",
                f"{run['per_s']:,.0f}",
                "",
                f"{run['wall_s']:.1f}",
                memory,
                "",
                f"{run['load_1min']:.1f}",
            ]
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument(
        "--static",
        default="minilm-static-256",
        help="static model (an encoder directory from distill-static)",
    )
    parser.add_argument("--texts", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=100_000,
                        help="the smaller static run, whose peak memory is compared")  # fmt: skip
    parser.add_argument("--minilm-texts", type=int, default=100_000)
    parser.add_argument("--vectors", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=2, help="Ray actors (1 thread each)")
    parser.add_argument("--local-threads", type=int, default=2, help="torch threads, local")
    parser.add_argument("--work-dir", default="/tmp/demitasse-scale")
    args = parser.parse_args()
    started = time.perf_counter()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    lines = corpus_lines(args.data_dir)
    recompress = recompress_runs(args, work)
    embeds = embed_runs(args, work, lines)
    write_records(HERE / "results" / f"{NAME}.json", records_of(embeds, recompress))
    headers = [
        "run",
        "texts",
        "engine",
        "texts (vectors)/s",
        "after start-up /s",
        "wall s",
        "peak memory MB",
        "Ray ÷ local wall",
        "load (1 min)",
    ]
    body = fill_section(
        RESULTS_MD,
        NAME,
        template(NAME),
        command="python benchmarks/scale.py " + " ".join(sys.argv[1:]),
        vectors=f"{args.vectors:,}",
        machine=machine_description(),
        wall_seconds=f"{time.perf_counter() - started:.0f}",
        corpus_lines=f"{len(lines):,}",
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        local_threads=args.local_threads,
        static=Path(args.static).name,
        table=markdown_table(headers, table_rows(embeds, recompress)),
    )
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
