"""Serving throughput on loopback: 32 concurrent clients send single sentences for 60 s to
``demitasse serve`` with dynamic batching on and off, for all-MiniLM-L6-v2 and a static model.

Each configuration starts its own server process (``demitasse serve M --port 0``), warms it up,
runs the clients (asyncio, keep-alive connections, the openai client's default base64 format)
for ``--seconds``, then stops the server with SIGTERM. Recorded: requests/s, p50 and p99
latency, errors (any answer but 200, or a body without one embedding), texts per batch and
per encoder pass, the encoder thread's CPU time per text, the server's CPU time and the share
of it spent outside the encoder (its /health counts the encoder thread's CPU seconds inside
the encoder), and the load average. Clients and server share the machine's cores.

    python benchmarks/serve.py --data-dir ../shared/data --static minilm-static-256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from _common import HERE, RESULTS_MD, log, template
from demitasse.data import load_stsb
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.report import markdown_table
from lab.templates import fill_section

NAME = "serve"
REPO = HERE.parent
WARMUP_REQUESTS = 64
REQUEST = (
    b"POST /v1/embeddings HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)


def start_server(model: str, batching: bool, threads: int) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "demitasse", "serve", model, "--port", "0", "--quiet",
               "--threads", str(threads), "--name", "bench"]  # fmt: skip
    if not batching:
        command.append("--no-batching")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    line = server.stdout.readline()  # type: ignore[union-attr]
    match = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
    if not match:
        server.kill()
        raise SystemExit(f"error: the server for {model} did not start")
    return server, match.group(1)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def health(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + "/health", timeout=60) as response:
        return json.loads(response.read())


async def client(port: int, bodies: list[bytes], stop_at: float, out: list, seed: int) -> None:
    """One keep-alive connection sending one sentence per request until ``stop_at``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = seed
    try:
        while time.perf_counter() < stop_at:
            body = bodies[i % len(bodies)]
            i += 7
            started = time.perf_counter()
            writer.write(REQUEST % (len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
            reply = await reader.readexactly(length)
            ok = head.startswith(b"HTTP/1.1 200") and len(json.loads(reply)["data"]) == 1
            out.append((time.perf_counter() - started, ok))
    finally:
        writer.close()


async def load(port: int, bodies: list[bytes], clients: int, seconds: float) -> list:
    results: list = []
    stop_at = time.perf_counter() + seconds
    await asyncio.gather(*(client(port, bodies, stop_at, results, s) for s in range(clients)))
    return results


def measure(model: str, batching: bool, bodies: list[bytes], args: argparse.Namespace) -> dict:
    server, base = start_server(model, batching, args.server_threads)
    port = int(base.rsplit(":", 1)[1])
    try:
        asyncio.run(load(port, bodies[:WARMUP_REQUESTS], 4, 2.0))
        before, cpu_before = health(base), cpu_seconds(server.pid)
        started = time.perf_counter()
        results = asyncio.run(load(port, bodies, args.clients, args.seconds))
        wall = time.perf_counter() - started
        after, cpu_after = health(base), cpu_seconds(server.pid)
        load_average = os.getloadavg()[0]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    latencies = np.array([seconds for seconds, _ in results]) * 1000
    server_cpu = cpu_after - cpu_before
    # CPU, not wall, seconds: on a busy machine the encoder thread also waits for a core.
    encoder = after["encoder_cpu_seconds"] - before["encoder_cpu_seconds"]
    texts = after["texts"] - before["texts"]
    return {
        "requests_per_s": len(results) / wall,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "errors": sum(not ok for _, ok in results),
        "requests": len(results),
        "texts_per_batch": texts / max(after["batches"] - before["batches"], 1),
        "texts_per_pass": texts / max(after["passes"] - before["passes"], 1),
        "encoder_cpu_ms_per_text": 1000 * encoder / max(texts, 1),
        "packing": bool(after["packing"]),
        "server_cpu_s": server_cpu,
        "outside_encoder_share": 1 - encoder / server_cpu if server_cpu else float("nan"),
        "load_1min": load_average,
    }


def ensure_static(path: Path, data_dir: str | None) -> Path:
    """The static model to serve; distilled here, small and quick, when none exists."""
    if path.is_dir():
        return path
    log(f"no static model at {path}: distilling a small one (4,000 sentences, 300 steps)")
    corpus = Path(data_dir or os.environ.get("DEMITASSE_DATA", "../shared/data")) / "unlabeled/en"
    subprocess.run([sys.executable, "-m", "demitasse", "distill-static", "--corpus", str(corpus),
                    "--out", str(path), "--max-sentences", "4000", "--max-steps", "300"],
                   check=True)  # fmt: skip
    return path


def records_of(label: str, batching: bool, figures: dict, args: argparse.Namespace) -> list:
    extra = {"batching": batching, "clients": args.clients, "seconds": args.seconds,
             "server_threads": args.server_threads, "load_1min": round(figures["load_1min"], 2),
             "requests": figures["requests"], "packing": figures["packing"]}  # fmt: skip
    metrics = ("requests_per_s", "p50_ms", "p99_ms", "errors", "outside_encoder_share",
               "texts_per_batch", "texts_per_pass", "encoder_cpu_ms_per_text")  # fmt: skip
    return [
        ResultRecord(
            model=label,
            layer=None,
            method="none",
            dim=0,
            precision="float32",
            task="serve",
            dataset="single sentences, loopback",
            metric=metric,
            score=float(figures[metric]),
            extra=dict(extra),
        )
        for metric in metrics
    ]


def command_line(args: argparse.Namespace) -> str:
    """This run's command, with the options that differ from their defaults."""
    command = "python benchmarks/serve.py --data-dir ../shared/data"
    defaults = {"model": "all-MiniLM-L6-v2", "static": "minilm-static-256", "clients": 32,
                "seconds": 60.0, "server_threads": 1}  # fmt: skip
    for option, default in defaults.items():
        value = getattr(args, option)
        if value != default or option == "static":
            command += f" --{option.replace('_', '-')} {value}"
    return command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--static", default="minilm-static-256", help="static model directory "
                        "(distilled here, small, when it does not exist)")  # fmt: skip
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--server-threads", type=int, default=1,
                        help="torch threads of the server's encoder")  # fmt: skip
    args = parser.parse_args()
    started = time.perf_counter()
    sentences = list(dict.fromkeys(load_stsb("test", args.data_dir).sentences1))
    bodies = [json.dumps({"input": s, "model": "bench", "encoding_format": "base64"}).encode()
              for s in sentences]  # fmt: skip
    static = str(ensure_static(Path(args.static), args.data_dir))
    records, rows = [], []
    for label, model in ((args.model, args.model), ("static: " + Path(static).name, static)):
        figures = {}
        for batching in (True, False):
            log(f"{label}, batching {'on' if batching else 'off'}: {args.seconds:.0f} s")
            figures[batching] = measure(model, batching, bodies, args)
            records += records_of(label, batching, figures[batching], args)
            f = figures[batching]
            rows.append([label, "on" if batching else "off", f"{f['requests_per_s']:.1f}",
                         f"{f['p50_ms']:.1f}", f"{f['p99_ms']:.1f}", f["errors"],
                         f"{f['texts_per_batch']:.1f}", f"{f['texts_per_pass']:.1f}",
                         f"{f['encoder_cpu_ms_per_text']:.2f}",
                         f"{100 * f['outside_encoder_share']:.0f} %",
                         f"{f['load_1min']:.1f}"])  # fmt: skip
        speedup = figures[True]["requests_per_s"] / figures[False]["requests_per_s"]
        rows.append([label, "on ÷ off", f"{speedup:.2f}×", *[""] * 8])
    write_records(HERE / "results" / f"{NAME}.json", records)
    headers = ["model", "batching", "requests/s", "p50 ms", "p99 ms", "errors",
               "texts per batch", "texts per encoder pass", "encoder CPU ms per text",
               "server CPU outside the encoder", "load (1 min)"]  # fmt: skip
    body = fill_section(
        RESULTS_MD, NAME, template(NAME),
        command=command_line(args), machine=machine_description(),
        wall_seconds=f"{time.perf_counter() - started:.0f}",
        clients=args.clients, seconds=f"{args.seconds:.0f}", threads=args.server_threads,
        sentences=len(sentences), table=markdown_table(headers, rows),
    )  # fmt: skip
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
