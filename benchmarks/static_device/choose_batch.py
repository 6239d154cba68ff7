"""Distillation settings of the static recipe, chosen on dev data only.

    python benchmarks/static_device/choose_batch.py --data-dir ../shared/data \
        --variant '{"batch_size": 128}' --variant '{"batch_size": 512}' \
        --output benchmarks/results/static_batch_choices.json

Each variant is a JSON object of `StaticRecipe` fields over the benchmark's default recipe
(250,000 shuffled sentences, 40,000-step cap); the extraction comes from the static cache, so
only the first variant pays for it. One JSON line per variant and distillation seed: STS-B dev,
SICK-R trial and SciFact train queries (nDCG@10), never a test set. With `--seeds 0,1,2` each
variant's reduced model is distilled once per seed (batch order and validation split; the
corpus stays): one seed's dev sum moves by about 1.5 between seeds, more than most variants do.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from demitasse.data import resolve_data_dir
from demitasse.data.beir import load_beir
from demitasse.encoders.transformer import load_transformer
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.static.pipeline import StaticRecipe, distill_stage, distill_static

sys.path.insert(0, str(Path(__file__).resolve().parent))
from choose import dev_scores


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--teacher", default="all-MiniLM-L6-v2")
    parser.add_argument("--variant", action="append", type=json.loads, required=True)
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", default="0", help="distillation seeds, comma-separated")
    parser.add_argument("--output", type=Path, default=None, help="also write the rows (JSON)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data_dir = Path(resolve_data_dir(args.data_dir))
    scifact = RetrievalTask(load_beir(data_dir / "beir" / "scifact", "train"))
    teacher = load_transformer(args.teacher)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    rows: list[dict] = []
    for variant in args.variant:
        recipe = StaticRecipe(max_steps=args.steps, **variant)
        stages = distill_static(teacher, data_dir / "unlabeled" / "en", recipe=recipe)
        texts = stages.encoded_texts
        for seed in seeds:
            distiller, seconds = stages.distiller, stages.seconds["distill"]
            if seed != recipe.seed:  # the corpus and its extraction stay
                seeded = replace(recipe, seed=seed)
                distiller, seconds = distill_stage(
                    teacher, stages.reduced, texts, seeded, False, stages.pca
                )
            assert distiller is not None
            scores = dev_scores(distiller.model_, str(data_dir), scifact)
            rows.append({
                "teacher": args.teacher, **variant, "seed": seed, "best_step": distiller.best_step_,
                "distill_seconds": seconds, **scores, "sum": sum(scores.values()),
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
            if args.output:
                args.output.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
