"""Choices for the static recipe on dev data only: STS-B dev, SICK-R trial, SciFact train queries.

    python benchmarks/static_device/choose.py --data-dir ../shared/data --teacher all-MiniLM-L6-v2 \
        --min-count 2 5 --distill --output benchmarks/results/static_choices.json

Reads the extraction that import_extraction.py left in the static cache (vocabulary at the
smallest min_count; a larger min_count keeps its prefix, which is exact: a word's vector does
not depend on which other words are in the vocabulary) and prints one JSON line per variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import load_sickr, load_stsb, resolve_data_dir
from demitasse.data.beir import load_beir
from demitasse.encoders import cache_root
from demitasse.evaluation import evaluate_grid, spearman_x100
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.loading import load_encoder
from demitasse.static import StaticModel
from demitasse.static.extract import COUNTS_FILE
from demitasse.static.pipeline import StaticRecipe, distill_stage, reduce_stage, shuffled_corpus
from demitasse.static.vocabulary import static_tokenizer


def subset(model: StaticModel, base: object, counts: Counter[str], min_count: int) -> StaticModel:
    n_base = int(model.metadata["base_tokens"])
    vocab = model.tokenizer.get_vocab()
    words = sorted(vocab, key=vocab.__getitem__)
    keep = n_base + sum(1 for w in words[n_base:] if counts[w] >= min_count)
    tokenizer = static_tokenizer(base, words[:keep])  # type: ignore[arg-type]
    return StaticModel(model.vectors[:keep], tokenizer, name=model.name, metadata=model.metadata)


def dev_scores(model: object, data_dir: str, scifact: RetrievalTask) -> dict[str, float]:
    out = {}
    for name, pairs in (
        ("stsb_dev", load_stsb("dev", data_dir)),
        ("sick_trial", load_sickr("trial", data_dir)),
    ):
        left, right = model.encode(pairs.sentences1), model.encode(pairs.sentences2)  # type: ignore[attr-defined]
        out[name] = spearman_x100(np.sum(left * right, axis=1), pairs.scores)
    records = evaluate_grid(
        model, [scifact], specs=parse_compressor_specs("none"), dims=[model.dim]
    )  # type: ignore[arg-type,attr-defined]
    out["scifact_train_ndcg10"] = next(r.score for r in records if r.metric == "ndcg@10")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--teacher", default="all-MiniLM-L6-v2")
    parser.add_argument("--min-count", type=int, nargs="+", default=[2])
    parser.add_argument("--distill", action="store_true")
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--output", type=Path, default=None, help="also write the rows (JSON)")
    parser.add_argument("--keep", default="/tmp/static/models", help="where models are saved")
    args = parser.parse_args()
    data_dir = str(resolve_data_dir(args.data_dir))
    corpus = shuffled_corpus(Path(data_dir) / "unlabeled" / "en", None, 0)
    work = cache_root() / "static" / f"{args.teacher}-{len(corpus)}"
    extracted = StaticModel.load(work / "extracted")
    encoded = np.load(work / "encoded.npy")
    texts = [corpus[i] for i in np.flatnonzero(encoded)]
    teacher = load_encoder(args.teacher)
    base = teacher.tokenizer.backend_tokenizer  # type: ignore[attr-defined]
    # import_extraction.py --counts put them where the extractor keeps its counts.
    counts = Counter(json.loads((work / "checkpoints" / COUNTS_FILE).read_text())["counts"])
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.output:
            args.output.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}))

    scifact = RetrievalTask(load_beir(Path(data_dir) / "beir" / "scifact", "train"))
    for min_count in args.min_count:
        model = subset(extracted, base, counts, min_count)
        recipe = StaticRecipe(max_sentences=None, min_count=min_count, max_steps=args.steps)
        pca, reduced, _ = reduce_stage(model, texts, recipe)
        keep = Path(args.keep) / f"{args.teacher}-{min_count}"
        reduced.save(keep / "reduced")
        row = {"teacher": args.teacher, "min_count": min_count, "vocabulary": len(model.vectors)}
        emit({**row, "stage": "extracted", **dev_scores(model, data_dir, scifact)})
        emit({**row, "stage": "reduced", **dev_scores(reduced, data_dir, scifact)})
        if args.distill:
            started = time.perf_counter()
            distiller, _ = distill_stage(teacher, reduced, texts, recipe, True, pca)  # type: ignore[arg-type]
            distiller.model_.save(keep / "distilled")
            scores = dev_scores(distiller.model_, data_dir, scifact)
            seconds = time.perf_counter() - started
            emit({**row, "stage": "distilled", "best_step": distiller.best_step_,
                  "seconds": seconds, **scores})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
