"""How far each ONNX backend's vectors are from torch's, text by text: the worst case, not the
average (issue #50: "onnx-int8 is worse than the docs say").

For each model, the same sentences (from the unlabeled corpora: never an evaluation text) are
encoded by torch,
``onnx`` (float32) and ``onnx-int8`` (dynamic int8, the feed-forward output projections kept in
float32: ``demitasse.encoders.backends.float_matmuls``) at the full depth, one batch size,
no embedding cache. Per backend: the cosine of each text's vector with torch's (min, 1st
percentile, median, mean) and the share of sign bits that differ from torch's (the binary code
of the full width, what a binary index would store).

    python benchmarks/backend_agreement.py --data-dir ../shared/data --texts 5000

all-mpnet-base-v2 needs ``make models-mpnet``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from _common import HERE, RESULTS_MD, log, page_head
from demitasse.data import load_unlabeled
from demitasse.encoders.base import BACKENDS
from demitasse.encoders.transformer import load_transformer
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.report import markdown_table
from lab.results_file import update_section

NAME = "backend_agreement"
MODELS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")


def agreement_records(model: str, texts: list[str], batch_size: int) -> list[ResultRecord]:
    """Per backend: cosines with torch's vectors text by text, and sign bits that differ."""
    vectors = {}
    for backend in BACKENDS:
        encoder = load_transformer(model, cache=False, backend=backend, device="cpu")
        started = time.perf_counter()
        vectors[backend] = encoder.encode(texts, batch_size=batch_size)
        log(f"{model} {backend}: {len(texts)} texts in {time.perf_counter() - started:.0f} s")
    reference = vectors["torch"]
    records = []
    for backend in (b for b in BACKENDS if b != "torch"):
        other = vectors[backend]
        cosine = np.einsum("ij,ij->i", reference, other) / (
            np.linalg.norm(reference, axis=1) * np.linalg.norm(other, axis=1)
        )
        flipped = float(np.mean((reference > 0) != (other > 0)))
        scores = {
            "cosine_min": float(cosine.min()),
            "cosine_p01": float(np.percentile(cosine, 1)),
            "cosine_median": float(np.median(cosine)),
            "cosine_mean": float(cosine.mean()),
            "sign_bits_differing": flipped,
        }
        for metric, score in scores.items():
            records.append(
                ResultRecord(
                    model=model,
                    layer=None,
                    method=backend,
                    dim=int(reference.shape[1]),
                    precision="float32",
                    task="backend-agreement",
                    dataset="unlabeled",
                    metric=metric,
                    score=score,
                    extra={"texts": len(texts), "batch_size": batch_size},
                )
            )
    return records


def page(records: list[ResultRecord], command: str, machine: str, wall: float) -> str:
    keys = list(dict.fromkeys((r.model, r.method) for r in records))
    score = {(r.model, r.method, r.metric): r.score for r in records}
    metrics = ["cosine_min", "cosine_p01", "cosine_median", "cosine_mean", "sign_bits_differing"]
    rows = [
        [model, backend, *(f"{score[(model, backend, m)]:.4f}" for m in metrics)]
        for model, backend in keys
    ]
    texts = records[0].extra["texts"] if records else 0
    return "\n".join(
        [
            *page_head(
                "# ONNX backends against torch, text by text (`backend_agreement`)",
                command,
                machine,
                wall,
            ),
            f"{texts} sentences of the unlabeled corpora (seed 0), full depth, each backend's "
            "own vectors against torch's: the cosine of each text's pair of vectors, and the "
            "share of sign bits (a binary code of the full width) that differ.",
            "",
            markdown_table(["model", "backend", *metrics], rows),
            "",
            f"Records: `benchmarks/results/{NAME}.json`.",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--texts", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    texts = load_unlabeled(args.data_dir, n=args.texts, seed=0)
    records = [
        record
        for model in args.models.split(",")
        for record in agreement_records(model, texts, args.batch_size)
    ]
    write_records(HERE / "results" / f"{NAME}.json", records)
    command = "python benchmarks/backend_agreement.py " + " ".join(sys.argv[1:])
    text = page(records, command, machine_description(), time.perf_counter() - started)
    update_section(RESULTS_MD, NAME, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
