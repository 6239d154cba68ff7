"""Depth that generalises: exit heads on the frozen encoder against the original, every layer,
on the 7 STS sets and off that family.

The candidates are exit heads fitted on the frozen encoder (the full-depth model is the
original by construction) from features computed once: supervised alone (NLI triples and
STS-B train, the frozen heads of ``demitasse train --exit-heads --frozen-encoder``), distilled
alone toward the model's own last layer on unlabeled text, or both. The one with the best mean
over the inner layers on STS-B dev and SICK trial is chosen, then the original and the chosen
model are scored at every layer on the 7 STS test sets, SciFact (nDCG@10), the SentEval
classification average and the label-free neighbour agreement with the original's last layer
on held-aside unlabeled text. A layer whose STS average rises while an out-of-family figure
falls is flagged. The speed of each cut is timed on the saved model.

    python benchmarks/depth.py --data-dir ../shared/data

Features are cached (``--cache-dir``, safetensors, resumable); ``--features-only`` computes
them and stops. The reductions for a slow model (``--sts-limit``, ``--classification-limit``,
``--scifact-docs``, ``--unlabeled``, ``--nli``) are written into the section.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from _common import HERE, RESULTS_MD, log, template
from demitasse.compress import make_quantizer
from demitasse.data import (
    BeirDataset,
    ScoredPairs,
    load_beir,
    load_sickr,
    load_sts_suite,
    load_stsb,
    load_unlabeled,
    resolve_data_dir,
)
from demitasse.data.overlap import evaluation_sentences
from demitasse.encoders.resolve import cache_root
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.evaluation.classification import ClassificationTask
from demitasse.evaluation.grid import evaluate_vectors
from demitasse.evaluation.label_free import neighbourhood_agreement
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.evaluation.tasks import STSTask, Task
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.search import QuantizedIndex
from demitasse.training import SentenceModel, TrainingSet
from demitasse.training.frozen import training_texts
from demitasse.training.heads import (
    ExitHeadDistiller,
    LayerFeatures,
    compute_layer_features,
    pair_features,
    save_model_with_heads,
)
from demitasse.training.recipes import load_training_sets
from demitasse.training.trainer import dev_texts, pairs_score
from lab.depth_checks import depth_checks, family_flags
from lab.results_file import update_section
from lab.templates import join_blocks

NAME = "depth"
#: The candidates' settings on top of :class:`ExitHeadDistiller`'s defaults. ``supervised``
#: has no unlabeled texts to start from, so it starts at the identity and at the rate
#: ``demitasse train`` gives heads (1e-3).
CANDIDATES: dict[str, dict[str, Any]] = {
    "supervised": {"distil_weight": 0.0, "learning_rate": 1e-3},
    "distil": {"supervised_weight": 0.0},
    "distil+supervised": {},
}
LABEL_FREE = "distil"
#: A candidate that needs labels is chosen over the label-free one only when it is better on
#: dev by more than this: dev is the STS family, and a label-free head is the broader recipe.
LABEL_FREE_MARGIN = 0.5
OUT_OF_FAMILY = ("scifact", "classification", "agreement")
METRICS = ("sts", *OUT_OF_FAMILY)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--unlabeled", type=int, default=100_000, help="distillation texts")
    parser.add_argument("--agreement-texts", type=int, default=2000, help="held-aside texts")
    parser.add_argument(
        "--max-examples",
        "--nli",
        type=int,
        default=None,
        help="most examples of each training set, as `demitasse train --max-examples` (all)",
    )
    parser.add_argument("--sts-limit", type=int, default=None, help="pairs per STS set (all)")
    parser.add_argument("--classification-limit", type=int, default=None)
    parser.add_argument("--scifact-docs", type=int, default=None, help="corpus size (all)")
    parser.add_argument(
        "--tasks",
        default="sts,scifact,classification",
        help="which of sts, scifact, classification to score (the agreement always is)",
    )
    parser.add_argument(
        "--recipe",
        choices=tuple(CANDIDATES),
        default=None,
        help="fit this candidate alone, without the choice on dev (a second model)",
    )
    parser.add_argument("--speed-texts", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--max-seq-length", type=int, default=None, help="tokens a text is cut to (the model's)"
    )
    parser.add_argument("--cache-dir", default=str(cache_root() / "depth-features"))
    parser.add_argument("--runs-dir", default=str(cache_root() / "runs" / "depth"))
    parser.add_argument("--results-name", default=NAME)
    parser.add_argument("--features-only", action="store_true")
    return parser.parse_args()


@dataclass
class Data:
    """Everything the run reads, with the reductions applied."""

    sts: dict[str, ScoredPairs]
    dev: dict[str, ScoredPairs]
    classification: ClassificationTask
    scifact: BeirDataset
    training: list[TrainingSet]
    unlabeled: list[str]
    agreement: list[str]

    wanted: tuple[str, ...] = ("sts", "scifact", "classification")

    def tasks(self) -> list[Task]:
        tasks: list[Task] = [STSTask(self.sts)]
        if "classification" in self.wanted:
            tasks.append(self.classification)
        if "scifact" in self.wanted:
            tasks.append(RetrievalTask(self.scifact))
        return tasks

    def texts(self) -> list[str]:
        """Every text, once, in a fixed order (the feature cache is keyed by it)."""
        texts = [t for task in self.tasks() for t in task.texts()]
        texts += [t for pairs in self.dev.values() for t in dev_texts(pairs)]
        texts += training_texts(self.training) + self.unlabeled + self.agreement
        return list(dict.fromkeys(texts))


def reduced_scifact(scifact: BeirDataset, docs: int | None, seed: int = 0) -> BeirDataset:
    """SciFact with ``docs`` documents: every judged one, then random others."""
    if docs is None or docs >= len(scifact.corpus_ids):
        return scifact
    judged = {d for q in scifact.qrels.values() for d in q}
    others = [i for i, d in enumerate(scifact.corpus_ids) if d not in judged]
    keep = [i for i, d in enumerate(scifact.corpus_ids) if d in judged]
    keep += random.Random(seed).sample(others, max(0, docs - len(keep)))
    keep.sort()
    return replace(
        scifact,
        corpus_ids=[scifact.corpus_ids[i] for i in keep],
        corpus_texts=[scifact.corpus_texts[i] for i in keep],
    )


def load_data(args: argparse.Namespace) -> Data:
    root = resolve_data_dir(args.data_dir)
    sts = load_sts_suite(root)
    if args.sts_limit:
        sts = {name: pairs.head(args.sts_limit) for name, pairs in sts.items()}
    dev = {"STS-B dev": load_stsb("dev", root), "SICK trial": load_sickr("trial", root)}
    # Dev decides between candidates; a single label-free recipe needs neither it nor pairs.
    label_free_only = args.recipe == LABEL_FREE
    training = (
        [] if label_free_only
        else load_training_sets(["stsb-train", "snli"], root, args.max_examples)
    )  # fmt: skip
    # No evaluation or dev sentence is distilled on or used to measure agreement.
    held = evaluation_sentences(root) | {t for p in dev.values() for t in p.texts()}
    pool = load_unlabeled(root, args.unlabeled + args.agreement_texts, 0, held)
    return Data(
        sts=sts,
        dev={} if label_free_only else dev,
        classification=ClassificationTask(root, limit=args.classification_limit),
        scifact=reduced_scifact(load_beir(root / "beir" / "scifact", "test"), args.scifact_docs),
        training=training,
        unlabeled=pool[: args.unlabeled],
        agreement=pool[args.unlabeled :],
        wanted=tuple(t.strip() for t in args.tasks.split(",")),
    )


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def fit_candidates(
    features: LayerFeatures, data: Data, args: argparse.Namespace
) -> dict[str, tuple[ExitHeadDistiller, float, dict[int, float]]]:
    """Each candidate (or ``--recipe`` alone) fitted, with its dev mean over the inner layers
    and per layer (NaN without dev data)."""
    unlabeled = features.subset(data.unlabeled)
    pairs = [pair_features(s, features) for s in data.training]
    names = [args.recipe] if args.recipe else list(CANDIDATES)
    fitted = {}
    for name in names:
        started = time.perf_counter()
        distiller = ExitHeadDistiller(device=args.device, **CANDIDATES[name])
        distiller.fit(unlabeled, pairs)
        per_layer = {
            layer: float(np.mean([dev_layer(features, dev, distiller, layer)
                                  for dev in data.dev.values()] or [np.nan]))
            for layer in sorted(distiller.heads_)
        }  # fmt: skip
        mean = float(np.mean(list(per_layer.values())))
        took = time.perf_counter() - started
        log(f"{name}: dev mean of the inner layers {mean:.2f} ({took:.0f} s)")
        fitted[name] = (distiller, mean, per_layer)
    return fitted


def choose(fitted: dict[str, tuple[ExitHeadDistiller, float, dict[int, float]]]) -> str:
    """The best dev mean, unless the label-free candidate is within the margin of it."""
    best = max(
        fitted, key=lambda name: fitted[name][1] if fitted[name][1] == fitted[name][1] else 0
    )
    if LABEL_FREE in fitted and fitted[best][1] - fitted[LABEL_FREE][1] <= LABEL_FREE_MARGIN:
        return LABEL_FREE
    return best


def dev_layer(
    features: LayerFeatures, dev: ScoredPairs, distiller: ExitHeadDistiller | None, layer: int
) -> float:
    texts = dev_texts(dev)
    raw = features.layers[layer][features.rows(texts)]
    return pairs_score(raw if distiller is None else distiller.transform(raw, layer), texts, dev)


def layer_vectors(
    features: LayerFeatures, texts: list[str], layer: int, distiller: ExitHeadDistiller | None
) -> np.ndarray:
    raw = features.layers[layer][features.rows(texts)]
    return unit(raw if distiller is None else distiller.transform(raw, layer))


def score_model(
    features: LayerFeatures,
    data: Data,
    distiller: ExitHeadDistiller | None,
    fields: dict[str, Any],
    num_layers: int,
) -> list[ResultRecord]:
    """Every layer of one model on the tasks and the agreement, as records."""
    tasks = data.tasks()
    texts = list(dict.fromkeys(t for task in tasks for t in task.texts()))
    reference = layer_vectors(features, data.agreement, num_layers, None)
    records = []
    for layer in range(1, num_layers + 1):
        started = time.perf_counter()
        vectors = layer_vectors(features, texts, layer, distiller)
        records += evaluate_vectors(vectors, texts, tasks, layer=layer, **fields)
        candidate = layer_vectors(features, data.agreement, layer, distiller)
        index = QuantizedIndex(candidate, make_quantizer("float32"))
        agreement = neighbourhood_agreement(reference, index, candidate, sample=None)
        for score in agreement.scores("held-aside unlabeled"):
            records.append(
                ResultRecord(
                    task="agreement",
                    dataset=score.dataset,
                    metric=score.metric,
                    score=score.score,
                    extra={**score.extra, **fields["extra"]},
                    layer=layer,
                    dim=vectors.shape[1],
                    precision="float32",
                    **{k: v for k, v in fields.items() if k in ("model", "method")},
                )
            )
        log(
            f"{fields['extra']['role']} layer {layer}: scored "
            f"({time.perf_counter() - started:.0f} s)"
        )
    return records


def summary(records: list[ResultRecord]) -> dict[str, dict[tuple[int, str], float]]:
    """role -> (layer, metric) -> the figure the checks read."""
    out: dict[str, dict[tuple[int, str], float]] = {}
    for r in records:
        role = r.extra.get("role")
        if role not in ("original", "chosen") or r.layer is None:
            continue
        key = None
        if r.task == "sts" and r.dataset == "avg":
            key = "sts"
        elif r.task == "retrieval" and r.metric == "ndcg@10":
            key = "scifact"
        elif r.task == "classification" and r.dataset == "avg":
            key = "classification"
        elif r.task == "agreement" and r.metric == "overlap@10":
            key = "agreement"
        if key is not None:
            out.setdefault(str(role), {})[r.layer, key] = r.score
    return out


def time_cuts(model_dir: Path, texts: list[str], num_layers: int) -> list[list[Any]]:
    """Sentences per second of the saved model cut at each layer (best of 3, cache off)."""
    encoder = load_encoder(model_dir, cache=False)
    rows = []
    for layer in range(1, num_layers + 1):
        encoder.encode(texts[:32], layer=layer)  # warm-up
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            encoder.encode(texts, layer=layer, batch_size=32)
            best = min(best, time.perf_counter() - started)
        rows.append([layer, f"{len(texts) / best:.0f}", f"{1000 * best / len(texts):.2f}"])
    return rows


def verify_saved(
    model_dir: Path, features: LayerFeatures, distiller: ExitHeadDistiller, texts: list[str],
    num_layers: int,
) -> float:  # fmt: skip
    """The largest difference between the saved model's encodings and the vectors scored."""
    encoded = load_encoder(model_dir, cache=False).encode_layers(texts)
    worst = 0.0
    for layer, vectors in encoded.items():
        expected = layer_vectors(features, texts, layer, distiller if layer < num_layers else None)
        worst = max(worst, float(np.abs(vectors - expected).max()))
    return worst


def layer_table(scores: dict[str, dict[tuple[int, str], float]], num_layers: int) -> str:
    metrics = [m for m in METRICS if any(key[1] == m for key in scores["chosen"])]
    headers = ["layer", *[f"{m} {role}" for m in metrics for role in ("original", "chosen")]]
    rows = []
    for layer in range(1, num_layers + 1):
        row: list[Any] = [layer]
        for metric in metrics:
            row += [f"{scores[role][layer, metric]:.2f}" for role in ("original", "chosen")]
        rows.append(row)
    means: list[Any] = [f"mean 1–{num_layers - 1}"]
    for metric in metrics:
        means += [
            f"{np.mean([scores[role][layer, metric] for layer in range(1, num_layers)]):.2f}"
            for role in ("original", "chosen")
        ]
    return markdown_table(headers, [*rows, means])


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    data = load_data(args)
    model = SentenceModel.load(args.model, device=args.device)
    if args.max_seq_length:
        model.encoder.max_seq_length = args.max_seq_length
    texts = data.texts()
    log(f"{len(texts)} texts to embed at every layer of {args.model}")
    cache = Path(args.cache_dir) / (
        Path(args.model).name + (f"-{args.max_seq_length}" if args.max_seq_length else "")
    )
    features = compute_layer_features(model, texts, cache, args.batch_size)
    seconds = {"features": time.perf_counter() - started}
    if args.features_only:
        return
    run(args, data, model, features, seconds, started)


def run(
    args: argparse.Namespace,
    data: Data,
    model: SentenceModel,
    features: LayerFeatures,
    seconds: dict[str, float],
    started: float,
) -> None:
    n = model.num_layers
    stage = time.perf_counter()
    # Small matrices: on a busy machine a second thread only spins (20x slower fits were seen).
    torch.set_num_threads(1)
    fitted = fit_candidates(features, data, args)
    chosen_name = choose(fitted)
    distiller = fitted[chosen_name][0]
    seconds["heads"] = time.perf_counter() - stage
    model_dir = save_model_with_heads(
        model, distiller.heads_, Path(args.runs_dir) / Path(args.model).name
    )
    sample = next(iter(data.sts.values())).sentences1[:64]
    difference = verify_saved(model_dir, features, distiller, sample, n)
    stage = time.perf_counter()
    name = Path(args.model).name
    records = score_model(
        features, data, None, {"model": name, "method": "none", "extra": {"role": "original"}}, n
    )
    records += score_model(features, data, distiller, {"model": name, "method": "exit-heads",
                           "extra": {"role": "chosen", "candidate": chosen_name}}, n)  # fmt: skip
    seconds["scoring"] = time.perf_counter() - stage
    scores = summary(records)
    metrics = [m for m in METRICS if m in ("sts", "agreement") or m in data.wanted]
    others = [m for m in metrics if m != "sts"]
    flags = family_flags(scores["original"], scores["chosen"], others, tolerance=0.0)
    checks = depth_checks(scores["original"], scores["chosen"], metrics, n)
    speed_texts = list(dict.fromkeys(load_stsb("test", args.data_dir).sentences1))[
        : args.speed_texts
    ]
    torch.set_num_threads(args.threads)
    with Path("/tmp/demitasse-bench.lock").open("w") as lock:  # no two timing runs overlap
        fcntl.flock(lock, fcntl.LOCK_EX)
        load_before = os.getloadavg()[0]
        speed = time_cuts(model_dir, speed_texts, n)
    write_results(args, data, fitted, chosen_name, records, scores, flags, checks, speed,
                  {"difference": difference, "load_before": load_before, "seconds": seconds,
                   "wall": time.perf_counter() - started, "num_layers": n})  # fmt: skip


def write_results(args, data, fitted, chosen_name, records, scores, flags, checks, speed, facts):  # type: ignore[no-untyped-def]
    n = facts["num_layers"]
    dev_rows = [[name, *[f"{per[layer]:.2f}" for layer in sorted(per)], f"{mean:.2f}"]
                for name, (_, mean, per) in fitted.items()]  # fmt: skip
    dev_headers = ["candidate", *[f"layer {layer}" for layer in range(1, n)], "mean"]
    threads = torch.get_num_threads()
    name = Path(args.model).name
    for layer, per_second, _ in speed:
        records.append(
            ResultRecord(
                model=name, layer=layer, method="exit-heads", dim=records[0].dim,
                precision="float32", task="efficiency", dataset="STS-B test sentences",
                metric="sentences_per_second", score=float(per_second),
                extra={"role": "chosen", "threads": threads, "batch_size": 32,
                       "texts": args.speed_texts, "load_1min": round(facts["load_before"], 2)},
            )
        )  # fmt: skip
    write_records(HERE / "results" / f"{args.results_name}.json", records)
    others = ", ".join(
        m for m in METRICS if m != "sts" and any(k[1] == m for k in scores["chosen"])
    )
    flag_text = "\n".join(f"- **flagged**: {f}" for f in flags) or (
        f"- no layer flagged: wherever the STS average rose, none of {others} fell."
    )
    check_rows = [
        [c.name, f"{c.value:+.2f}", c.target, "yes" if c.passed else "**no**"] for c in checks
    ]
    prose = template(NAME)
    body = prose.fill(
        name=args.results_name,
        command=" ".join(["python benchmarks/depth.py", *sys.argv[1:]]),
        machine=machine_description(), threads=threads, device=args.device,
        wall_seconds=f"{facts['wall']:.0f}", load=f"{os.getloadavg()[0]:.1f}",
        model=Path(args.model).name, layers=n,
        sizes=sizes(data, args),
        seconds=", ".join(f"{k} {v:.0f} s" for k, v in facts["seconds"].items()),
        choice=choice_text(args, chosen_name, markdown_table(dev_headers, dev_rows)),
        layer_table=layer_table(scores, n), flags=flag_text,
        checks=markdown_table(["check", "value", "target", "passed"], check_rows),
        difference=f"{facts['difference']:.1e}",
        speed_table=markdown_table(["cut at layer", "sentences / s", "ms / sentence"], speed),
        speed_texts=args.speed_texts, load_before=f"{facts['load_before']:.1f}",
        epochs_note=epochs_note(),
    )  # fmt: skip
    if args.results_name == NAME:  # one place for it, whichever model's section is re-run
        body = join_blocks(body, prose.fill("seed_claim"))
    update_section(RESULTS_MD, args.results_name, body)
    log(f"wrote the section {args.results_name} of {RESULTS_MD}")


def choice_text(args: argparse.Namespace, chosen: str, dev_table: str) -> str:
    if args.recipe:
        return (
            f"Run with `--recipe {chosen}`: that candidate alone was fitted, with no choice on "
            "dev (the recipe chosen for all-MiniLM-L6-v2 in `depth`), so no dev data was read."
        )
    return (
        "Chosen on STS-B dev and SICK trial (mean over the inner layers; a candidate that needs "
        f"labels had to beat `{LABEL_FREE}` by more than {LABEL_FREE_MARGIN} to be chosen): "
        f"**{chosen}**. The test sets scored only the original and the chosen model.\n\n"
        + dev_table
    )


def epochs_note() -> str:
    d = ExitHeadDistiller()
    return (
        f"{d.epochs} epochs, batch {d.batch_size}, AdamW {d.learning_rate:g} with 10 % warm-up "
        f"and linear decay, each head starting from the ridge least-squares map to the last "
        f"layer when there are unlabeled texts (penalty {d.ridge:g})"
    )


def sizes(data: Data, args: argparse.Namespace) -> str:
    """What the run read, with every reduction named."""
    sts_pairs = sum(len(p) for p in data.sts.values())
    limit = f", the first {args.sts_limit} of each" if args.sts_limit else ""
    parts = [f"7 STS test sets ({sts_pairs} pairs{limit})"]
    if "scifact" in data.wanted:
        reduced = ": every judged one, then random others" if args.scifact_docs else ""
        parts.append(
            f"SciFact test ({len(data.scifact.query_ids)} queries, "
            f"{len(data.scifact.corpus_ids)} documents{reduced})"
        )
    if "classification" in data.wanted:
        names = ", ".join(s.name for s in data.classification.sets)
        cut = args.classification_limit
        parts.append(
            f"SentEval classification ({names}"
            + (f", at most {cut} random examples a split" if cut else "")
            + ")"
        )
    parts.append(
        f"{len(data.unlabeled)} unlabeled sentences to distil on and {len(data.agreement)} "
        "held aside for the agreement (none an evaluation or dev sentence)"
    )
    if data.training:
        parts.append(", ".join(f"{s.name} {len(s)}" for s in data.training) + " for supervision")
    if args.max_seq_length:
        parts.append(f"texts cut to {args.max_seq_length} tokens")
    return "; ".join(parts)


if __name__ == "__main__":
    main()
