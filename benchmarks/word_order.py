"""How much of the STS average is word order: each teacher on the 7 STS test sets as written and
with the words of every sentence shuffled, next to a static model (order-blind by construction).

A static model averages word vectors, so it cannot tell "a dog bites a man" from "a man bites a
dog". The teacher on shuffled sentences is a rough reference for what an order-blind copy of it
could keep: not a bound (shuffled text is unlike what the teacher was trained on, and a static
model is trained for its own input), but a measure of how much of the teacher's score rests on
order. Words are whitespace tokens; each shuffle seed permutes every sentence independently.

    python benchmarks/word_order.py --data-dir ../shared/data \
        --static ~/.cache/demitasse/static/all-MiniLM-L6-v2-250000/distilled-256
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence

import torch

from _common import HERE, RESULTS_MD, log, template
from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import ScoredPairs, load_sts_suite
from demitasse.encoders import Encoder
from demitasse.evaluation import ResultRecord, evaluate_grid, machine_description, write_records
from demitasse.evaluation.tasks import STSTask
from demitasse.loading import load_encoder
from demitasse.report.tables import markdown_table
from lab.templates import fill_section

NAME = "word_order"


def shuffled(texts: Sequence[str], seed: int) -> list[str]:
    """Every text with its whitespace-separated words in a random order (seeded)."""
    rng = random.Random(seed)
    out = []
    for text in texts:
        words = text.split()
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


def sts_scores(
    encoder: Encoder, suite: dict[str, ScoredPairs], seed: int | None
) -> dict[str, float]:
    """Spearman ×100 of cosine per set and their mean as ``avg`` (the harness's STS task); words
    shuffled unless ``seed`` is None (each side of a pair with its own stream)."""
    if seed is not None:
        suite = {
            name: ScoredPairs(
                pairs.name,
                shuffled(pairs.sentences1, seed),
                shuffled(pairs.sentences2, seed + 1000),
                pairs.scores,
            )
            for name, pairs in suite.items()
        }
    records = evaluate_grid(
        encoder, [STSTask(suite)], specs=parse_compressor_specs("none"), dims=[encoder.dim]
    )
    return {r.dataset: r.score for r in records if r.metric == "spearman"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--teachers", default="all-MiniLM-L6-v2,all-mpnet-base-v2")
    parser.add_argument("--static", default=None, help="a static model to score beside them")
    parser.add_argument("--seeds", default="0,1", help="shuffle seeds, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    suite = load_sts_suite(args.data_dir)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: list[tuple[str, str, int | None]] = [
        (teacher, "as written" if seed is None else f"words shuffled, seed {seed}", seed)
        for teacher in args.teachers.split(",")
        for seed in [None, *seeds]
    ]
    if args.static:
        runs.append((args.static, "static model (order-blind)", None))
    records, rows = [], []
    for model, variant, seed in runs:
        log(f"{model}: {variant}")
        encoder = load_encoder(model)
        scores = sts_scores(encoder, suite, seed)
        for dataset, score in scores.items():
            records.append(ResultRecord(
                model=encoder.name, layer=None, method=variant, dim=encoder.dim,
                precision="float32", task="sts", dataset=dataset, metric="spearman",
                score=score, extra={"shuffle_seed": seed, "threads": args.threads},
            ))  # fmt: skip
        rows.append([encoder.name, variant, *(f"{s:.2f}" for s in scores.values())])
    write_records(HERE / "results" / f"{NAME}.json", records)
    command = "python benchmarks/word_order.py " + " ".join(sys.argv[1:])
    headers = ["model", "input", *suite, "avg"]
    body = fill_section(
        RESULTS_MD, NAME, template(NAME), command=command, machine=machine_description(),
        wall_seconds=f"{time.perf_counter() - started:.0f}",
        table=markdown_table(headers, rows),
    )  # fmt: skip
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
