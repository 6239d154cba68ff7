"""Static sentence encoder distilled from all-MiniLM-L6-v2 vs Model2Vec, WordLlama and the teacher.

One run on one machine: our recipe (extraction → sentence-level PCA with ABTT → distillation,
256 dimensions), Model2Vec distilled here from the same teacher at 256 dimensions, WordLlama
l2_supercat 256 and the teacher itself, on the 7-set STS average, SentEval classification
(MR, CR, SST-2, TREC, MRPC) and SciFact nDCG@10; the ablation of Wada et al.'s Table 6 (STS
only); encode throughput on 10,000 STS sentences (same process, best of several repetitions,
same thread count for every model) and peak memory (a fresh process per model). The models,
the ablation's steps and the translation pairs: grids/static.toml.

    python benchmarks/static.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from _common import HERE, RESULTS_MD, grid, log, template
from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import load_stsb, resolve_data_dir
from demitasse.encoders import TransformerEncoder, cache_root, resolve_model
from demitasse.evaluation import (
    ResultRecord,
    build_tasks,
    evaluate_grid,
    machine_description,
    measure_encode_throughput,
    spearman_x100,
    write_records,
)
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import save_figure
from demitasse.static import StaticModel
from demitasse.static.extract import COUNTS_FILE
from demitasse.static.pca import StaticPCA
from demitasse.static.pipeline import (
    StaticRecipe,
    StaticStages,
    distill_stage,
    distill_static,
    write_stage_summary,
)
from demitasse.static.vocabulary import static_tokenizer
from lab.results_file import update_section

NAME = "static"
PEERS = ("ours", "model2vec", "wordllama", "teacher")
STAGES = ("extracted", "reduced", "distilled")
SIDES = ("teacher", "english", "initial", "aligned")
PATHS = (
    "earlier path: Rust BERT normaliser, unknown ids dropped per text, gather + np.add.reduceat",
    "+ mean as one sparse count-matrix product",
    "+ printable ASCII lower-cased in Python, no Rust normaliser (ours)",
)


@dataclass(frozen=True)
class AblationStep:
    """One of: a stage of our recipe; a PCA (StaticPCA options) of the extracted vectors; our
    distilled model with its vocabulary cut to the corpus words seen ``min_count`` times; our
    reduced model distilled again with another ``seed`` (batch order and validation split); or
    the whole recipe with another ``teacher``."""

    stage: str | None = None
    pca: dict[str, Any] | None = None
    min_count: int | None = None
    seed: int | None = None
    teacher: str | None = None

    def __post_init__(self) -> None:
        options = (self.stage, self.pca, self.min_count, self.seed, self.teacher)
        if sum(v is not None for v in options) != 1:
            raise ValueError(
                "an ablation step names one of 'stage', 'pca', 'min_count', 'seed', 'teacher'"
            )
        if self.stage is not None and self.stage not in STAGES:
            raise ValueError(f"unknown stage {self.stage!r}; known: {', '.join(STAGES)}")


@dataclass(frozen=True)
class Grid:
    teacher: str
    distill_teacher: str
    dim: int
    speed_texts: int
    memory_texts: int
    peers: dict[str, str]
    ablation: dict[str, AblationStep]
    translation: dict[str, tuple[str, str]]

    def __post_init__(self) -> None:
        if tuple(self.peers) != PEERS:
            raise ValueError(f"'peers' must be {', '.join(PEERS)}, in that order")
        if unknown := {side for pair in self.translation.values() for side in pair} - set(SIDES):
            raise ValueError(f"unknown translation side {sorted(unknown)[0]!r}; known: {SIDES}")


GRID = grid(NAME, Grid)
PROSE = template(NAME)
TEACHER = GRID.teacher  # the teacher row and Model2Vec's teacher
DISTILL_TEACHER = GRID.distill_teacher  # our static model's teacher
DIM = GRID.dim
SPEED_TEXTS = GRID.speed_texts
MEMORY_TEXTS = GRID.memory_texts
ROWS = GRID.peers


class CallableEncoder:
    """A peer library's model as a demitasse Encoder (one layer, float32 rows)."""

    num_layers = 1

    def __init__(self, name: str, dim: int, encode: Callable[[list[str]], np.ndarray]) -> None:
        self.name = name
        self.dim = dim
        self._encode = encode

    def encode(self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32):
        return np.asarray(self._encode(list(texts)), dtype=np.float32)

    def encode_layers(self, texts: Sequence[str], layers=None, batch_size: int = 32):
        return {1: self.encode(texts)}


def reduceat_mean(vectors: np.ndarray, ids: list[list[int]]) -> np.ndarray:
    """The mean of token vectors as StaticModel computed it before the sparse product."""
    lengths = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
    out = np.zeros((len(ids), vectors.shape[1]), dtype=np.float32)
    filled = np.flatnonzero(lengths)
    if len(filled):
        flat = np.concatenate([np.asarray(ids[i], dtype=np.int64) for i in filled])
        starts = np.concatenate([[0], np.cumsum(lengths[filled])[:-1]])
        out[filled] = np.add.reduceat(vectors[flat], starts, axis=0) / lengths[filled, None]
    return out


def encode_paths(model: StaticModel) -> dict[str, object]:
    """Our model through the earlier encode path, through the sparse mean alone, and as is."""

    def old(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), model.dim), dtype=np.float32)
        for start in range(0, len(texts), 2048):
            ids = model.token_ids(texts[start : start + 2048])  # unknown ids dropped in Python
            out[start : start + len(ids)] = reduceat_mean(model.vectors, ids)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    sparse = StaticModel(model.vectors, model.tokenizer, name=model.name)
    sparse._plain = None  # every text through the Rust normaliser
    return {
        PATHS[0]: CallableEncoder(model.name, model.dim, old),
        PATHS[1]: sparse,
    }  # PATHS[2] is our model as is: the "ours" row's own timing


def model2vec_peer() -> CallableEncoder:
    """Model2Vec distilled from the teacher's local files at 256 dims (kept in the cache)."""
    from model2vec import StaticModel as Model2VecModel

    teacher = resolve_model(TEACHER)
    saved = cache_root() / "static" / f"model2vec-{teacher.name}-{DIM}"
    if not (saved / "model.safetensors").is_file():
        from model2vec.distill import distill

        started = time.perf_counter()
        distill(model_name=str(teacher.path), pca_dims=DIM, device="cpu").save_pretrained(saved)
        (saved / "distill_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    model = Model2VecModel.from_pretrained(saved)
    return CallableEncoder(f"model2vec-{teacher.name}", model.dim, model.encode)


def wordllama_peer() -> CallableEncoder:
    import wordllama
    from wordllama import WordLlama

    folder = Path(wordllama.__file__).parent
    model = WordLlama.load(config="l2_supercat", dim=DIM, cache_dir=folder, disable_download=True)
    return CallableEncoder("wordllama-l2_supercat", DIM, lambda t: model.embed(t, norm=True))


def load_peer(name: str, teacher_name: str, static_dir: str) -> object:
    """Any benchmarked model by its row name, for the memory subprocess."""
    if name == "teacher":
        return load_encoder(teacher_name, cache=False, show_progress=False)
    if name == "ours":
        return StaticModel.load(static_dir)
    if name == "none":  # the imports and the texts alone: the baseline of the others
        return CallableEncoder("none", 1, lambda texts: np.zeros((len(texts), 1)))
    return model2vec_peer() if name == "model2vec" else wordllama_peer()


def peak_memory(name: str, args: argparse.Namespace, static_dir: Path) -> float:
    """Peak resident memory (MiB) of a fresh process that loads ``name`` and encodes texts."""
    count = min(MEMORY_TEXTS, args.limit or MEMORY_TEXTS)
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import static as b; "
        f"texts = b.speed_texts({str(args.data_dir)!r})[:{count}]; "
        f"m = b.load_peer({name!r}, {TEACHER!r}, {str(static_dir)!r}); "
        "m.encode(texts, batch_size=64); "
        "print(b.high_water_mib())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    return float(done.stdout.strip().splitlines()[-1])


def high_water_mib() -> float:
    """This process's peak resident memory. Not ru_maxrss: Linux keeps the parent's peak
    across fork + exec, so every child would report the benchmark's own peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def speed_texts(data_dir: str | None) -> list[str]:
    """The first 10,000 distinct sentences of the STS suite (test splits, in suite order)."""
    from demitasse.data import load_sts_suite

    texts = [t for pairs in load_sts_suite(data_dir).values() for t in pairs.texts()]
    return list(dict.fromkeys(texts))[:SPEED_TEXTS]


def stsb_dev(encoder: object, data_dir: str) -> float:
    pairs = load_stsb("dev", data_dir)
    left, right = encoder.encode(pairs.sentences1), encoder.encode(pairs.sentences2)  # type: ignore[attr-defined]
    return spearman_x100(np.sum(left * right, axis=1), pairs.scores)


def evaluate(encoder: object, tasks: list, label: str) -> list[ResultRecord]:
    records = evaluate_grid(
        encoder,  # type: ignore[arg-type]
        tasks,
        specs=parse_compressor_specs("none"),
        dims=[encoder.dim],  # type: ignore[attr-defined]
    )
    for record in records:
        record.method = label
    return records


def score(
    records: list[ResultRecord],
    method: str,
    task: str,
    dataset: str = "avg",
    metric: str | None = None,
) -> float:
    found = [
        r.score
        for r in records
        if (r.method, r.task, r.dataset) == (method, task, dataset) and metric in (None, r.metric)
    ]
    return found[0] if found else float("nan")


# The recipe options of the command line; the reproduced command names those that differ.
RECIPE_DEFAULTS = {
    "max_sentences": StaticRecipe.max_sentences, "harvest_limit": StaticRecipe.harvest_limit,
    "min_count": StaticRecipe.min_count, "steps": StaticRecipe.max_steps,
    "batch_size": StaticRecipe.batch_size, "regression_weight": StaticRecipe.regression_weight,
}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument(
        "--max-sentences", type=int, default=RECIPE_DEFAULTS["max_sentences"], help="0: all"
    )
    parser.add_argument("--harvest-limit", type=int, default=RECIPE_DEFAULTS["harvest_limit"])
    parser.add_argument("--min-count", type=int, default=RECIPE_DEFAULTS["min_count"])
    parser.add_argument("--steps", type=int, default=RECIPE_DEFAULTS["steps"])
    parser.add_argument("--batch-size", type=int, default=RECIPE_DEFAULTS["batch_size"])
    parser.add_argument(
        "--regression-weight", type=float, default=RECIPE_DEFAULTS["regression_weight"]
    )
    parser.add_argument(
        "--skip-teacher-ablation",
        action="store_true",
        help="leave out the ablation rows that run the whole recipe with another teacher "
        "(hours of extraction on a CPU when its cache is empty)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="throughput repetitions")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every model")
    parser.add_argument("--limit", type=int, default=None, help="smoke run: N texts per set")
    parser.add_argument("--output", type=Path, default=None, help="results folder")
    args = parser.parse_args()
    args.data_dir = str(resolve_data_dir(args.data_dir))
    return args


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    # The same thread budget for every model: torch's, and the Rust tokenizers' (rayon) pool,
    # which every model here tokenises with; set before anything tokenises.
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    teacher = load_encoder(TEACHER)
    assert isinstance(teacher, TransformerEncoder)
    recipe = StaticRecipe(
        dim=DIM,
        max_sentences=args.max_sentences or None,
        min_count=args.min_count,
        harvest_limit=args.harvest_limit,
        max_steps=args.steps,
        batch_size=args.batch_size,
        regression_weight=args.regression_weight,
    )
    corpus_dir = Path(args.data_dir) / "unlabeled" / "en"
    ours_teacher = teacher if DISTILL_TEACHER == TEACHER else load_encoder(DISTILL_TEACHER)
    assert isinstance(ours_teacher, TransformerEncoder)
    stages = distill_static(ours_teacher, corpus_dir, recipe=recipe, progress=True)
    work = cache_root() / "static" / f"{ours_teacher.name}-{len(stages.corpus)}"
    static_dir = work / f"distilled-{DIM}"
    stages.distilled.save(static_dir)
    write_stage_summary(stages, work / "summary.json")
    log(f"stages: {stages.seconds}")

    records, ablation_rows = ablation(stages, recipe, args, ours_teacher)
    # ---- peers on every task ---------------------------------------------------------------------
    tasks = build_tasks(["sts", "classification", "retrieval"], args.data_dir, limit=args.limit)
    m2v_started = time.perf_counter()
    peers: dict[str, object] = {"ours": stages.distilled, "model2vec": model2vec_peer()}
    m2v_seconds = time.perf_counter() - m2v_started
    peers |= {"wordllama": wordllama_peer(), "teacher": teacher}
    for label, encoder in peers.items():
        records += evaluate(encoder, tasks, label)

    # ---- the model2vec export gives our vectors in model2vec and in sentence-transformers --------
    texts = speed_texts(args.data_dir)[: args.limit]
    export_gap = export_check(stages.distilled, work / f"model2vec-{DIM}", texts)

    # ---- cross-lingual: German words aligned to the English static model on Multi30k ---------
    translation_rows, translation_s = cross_lingual(stages.distilled, teacher, args, records)

    # ---- throughput (same process, same threads) and peak memory (a fresh process each) ----------
    with timing_lock():  # no other benchmark's timings run alongside ours
        speed, memory = throughput(peers, texts, args, static_dir, records)
    for record in records:
        ours = record.model.startswith("static-") and record.method != "model2vec"
        record.extra.setdefault("teacher", DISTILL_TEACHER if ours else TEACHER)
    output = args.output or HERE / "results"
    write_records(output / f"{NAME}.json", records)
    plot = plot_speed(records, speed, output / f"{NAME}.png")
    elapsed = time.perf_counter() - started
    body = PROSE.fill(
        **section_values(args, stages, recipe, records, speed, memory, m2v_seconds, elapsed, plot),
        n_texts=f"{len(texts):,}",
        gaps=", ".join(f"{name} {gap:.1e}" for name, gap in export_gap.items()),
        path_table=markdown_table(
            ["encode path (our model)", "sentences/s", "load avg (1 min) before → after"],
            [
                [path, round(speed[key]), load_of(records, key)]
                for path, key in zip(PATHS, [*PATHS[:2], "ours"], strict=True)
            ],
        ),
        ablation_table=markdown_table(ABLATION_COLUMNS, ablation_rows),
        alignment_seconds=f"{translation_s:.0f}",
        translation_table=markdown_table(
            ["Multi30k test_2016_flickr", "de→en", "en→de"], translation_rows
        ),
    )
    if args.limit is None:
        update_section(RESULTS_MD, NAME, body)
    print(body)
    return 0


ABLATION_COLUMNS = ["stage (Table 6)", "dim", "STS avg (7)", "STS-B dev", "SciFact nDCG@10"]


def ablation(
    stages: StaticStages,
    recipe: StaticRecipe,
    args: argparse.Namespace,
    teacher: TransformerEncoder,
) -> tuple[list[ResultRecord], list[list[Any]]]:
    """Wada et al.'s Table 6 on STS and SciFact: each step of the recipe, PCAs instead of ours,
    and our recipe with other distillation seeds."""
    tasks = build_tasks(["sts", "retrieval"], args.data_dir, limit=args.limit)
    records: list[ResultRecord] = []
    rows = []
    for label, step in GRID.ablation.items():
        if step.teacher is not None and args.skip_teacher_ablation:
            log(f"ablation {label!r} left out (--skip-teacher-ablation)")
            continue
        model = ablation_model(stages, step, recipe, teacher, args.data_dir)
        found = evaluate(model, tasks, label)
        records += found
        sts, dev = score(found, label, "sts"), stsb_dev(model, args.data_dir)
        scifact = score(found, label, "retrieval", "SciFact", "ndcg@10")
        rows.append([label, model.dim, sts, dev, scifact])
    return records, rows


def ablation_model(
    stages: StaticStages,
    step: AblationStep,
    recipe: StaticRecipe,
    teacher: TransformerEncoder,
    data_dir: str,
) -> StaticModel:
    if step.stage is not None:
        model: StaticModel = getattr(stages, step.stage)
    elif step.pca is not None:
        pca = StaticPCA(DIM, **step.pca)
        sample = stages.encoded_texts[: recipe.pca_sentences]
        model = pca.fit(stages.extracted, sample).transform(stages.extracted)
    elif step.min_count is not None:
        model = smaller_vocabulary(stages, step.min_count)
    elif step.seed is not None:
        seeded = replace(recipe, seed=step.seed)  # the corpus and its extraction stay
        distiller, _ = distill_stage(
            teacher, stages.reduced, stages.encoded_texts, seeded, False, pca=stages.pca
        )
        model = distiller.model_
    else:
        corpus_dir = Path(data_dir) / "unlabeled" / "en"
        return distill_static(str(step.teacher), corpus_dir, recipe=recipe).distilled
    model.name = f"static-{DISTILL_TEACHER}"
    return model


def smaller_vocabulary(stages: StaticStages, min_count: int) -> StaticModel:
    """Our distilled model keeping the teacher's tokens and the corpus words seen ≥ min_count
    times (the vocabulary is sorted by count, so that is a prefix)."""
    model = stages.distilled
    work = cache_root() / "static" / f"{DISTILL_TEACHER}-{len(stages.corpus)}"
    counts = json.loads((work / "checkpoints" / COUNTS_FILE).read_text())["counts"]
    vocab = model.tokenizer.get_vocab()
    words = sorted(vocab, key=vocab.__getitem__)
    n_base = int(stages.extracted.metadata["base_tokens"])
    keep = n_base + sum(1 for word in words[n_base:] if counts.get(word, 0) >= min_count)
    base = load_encoder(DISTILL_TEACHER).tokenizer.backend_tokenizer  # type: ignore[attr-defined]
    tokenizer = static_tokenizer(base, words[:keep])
    return StaticModel(model.vectors[:keep], tokenizer, name=model.name)


def throughput(
    peers: dict[str, object],
    texts: list[str],
    args: argparse.Namespace,
    static_dir: Path,
    records: list[ResultRecord],
) -> tuple[dict[str, float], dict[str, float]]:
    """Sentences/s of every model in this process (same threads) and the peak memory of a
    fresh process per model; the throughput records are added to ``records``."""
    timed = {**peers, "teacher": load_encoder(TEACHER, cache=False, show_progress=False)}
    timed |= encode_paths(peers["ours"])  # type: ignore[arg-type]
    speed: dict[str, float] = {}
    memory: dict[str, float] = {}
    for label, encoder in timed.items():
        # The teacher takes minutes per pass on a shared CPU: two passes, the best kept.
        repeats = min(2, args.repeats) if label == "teacher" else args.repeats
        load_before = os.getloadavg()[0]
        [record] = measure_encode_throughput(
            encoder,  # type: ignore[arg-type]
            texts,
            layers=[encoder.num_layers],  # type: ignore[attr-defined]
            repeats=repeats,
        )
        record.method = label
        record.extra |= {"threads": args.threads, "load_1min": [load_before, os.getloadavg()[0]]}
        if label in ROWS:
            memory[label] = peak_memory(label, args, static_dir)
            record.extra["peak_rss_mib"] = memory[label]
        speed[label] = record.score
        records.append(record)
    memory["none"] = peak_memory("none", args, static_dir)
    return speed, memory


def export_check(model: StaticModel, out: Path, texts: list[str]) -> dict[str, float]:
    """Largest absolute difference to our vectors after loading the model2vec export."""
    from model2vec import StaticModel as Model2VecModel
    from sentence_transformers import SentenceTransformer

    from demitasse.export import export_model2vec

    export_model2vec(model, out)
    ours = model.encode(texts)
    loaded = {
        "model2vec": Model2VecModel.from_pretrained(out).encode(texts),
        "sentence-transformers": SentenceTransformer(str(out), device="cpu").encode(texts),
    }
    return {name: float(np.abs(vectors - ours).max()) for name, vectors in loaded.items()}


def cross_lingual(english: StaticModel, teacher: TransformerEncoder, args, records) -> tuple:
    """Translation retrieval on Multi30k test_2016_flickr (en–de), before and after alignment."""
    from demitasse.data import load_multi30k
    from demitasse.evaluation.translation import translation_accuracy
    from demitasse.static.crosslingual import TranslationAligner, foreign_model

    pairs = args.limit and max(args.limit, 256)  # a smoke run still fills the aligner's batches
    train = load_multi30k(args.data_dir, "train", limit=pairs and 10 * pairs)
    valid = load_multi30k(args.data_dir, "val", limit=pairs)
    test = load_multi30k(args.data_dir, "test_2016_flickr", limit=args.limit)
    started = time.perf_counter()
    initial = foreign_model(english, train.target)
    aligner = TranslationAligner(max_steps=3000, progress=True)
    aligner.fit(initial, english, train, valid)
    seconds = time.perf_counter() - started
    gold = np.arange(len(test))
    rows = []
    models = {"teacher": teacher, "english": english, "initial": initial, "aligned": aligner.model_}
    for label, (english_name, german_name) in GRID.translation.items():
        english_side, german_side = models[english_name], models[german_name]
        en = english_side.encode(test.source)
        de = german_side.encode(test.target)
        both = {
            "de→en": translation_accuracy(de, en, gold),
            "en→de": translation_accuracy(en, de, gold),
        }
        for dataset, value in both.items():
            records.append(
                ResultRecord(
                    model=english_side.name,
                    layer=english_side.num_layers,
                    method=label,
                    dim=english_side.dim,
                    precision="float32",
                    task="translation",
                    dataset=f"multi30k-test_2016_flickr {dataset}",
                    metric="accuracy",
                    score=value,
                    fit_data="multi30k-train (aligned rows only)",
                )
            )
        rows.append([label, both["de→en"], both["en→de"]])
    rows.append(
        ["(alignment: best step / German vocabulary)", aligner.best_step_, len(initial.vectors)]
    )
    return rows, seconds


@contextlib.contextmanager
def timing_lock() -> Iterator[None]:
    """The machine-wide lock that timing runs take (``flock /tmp/demitasse-bench.lock``)."""
    with Path("/tmp/demitasse-bench.lock").open("a") as handle:
        log("waiting for /tmp/demitasse-bench.lock")
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_of(records: list[ResultRecord], label: str) -> str:
    found = [r.extra["load_1min"] for r in records if r.method == label and "load_1min" in r.extra]
    return " → ".join(f"{value:.1f}" for value in found[0]) if found else "?"


def plot_speed(records: list[ResultRecord], speed: dict[str, float], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, rate in ((label, speed[label]) for label in ROWS):
        ax.scatter(rate, score(records, label, "sts"), s=40)
        ax.annotate(ROWS[label].split(":")[0], (rate, score(records, label, "sts")), fontsize=8)
    ax.set_xscale("log")
    ax.margins(x=0.25)  # room for the labels of the rightmost points
    ax.set_xlabel("sentences per second (10,000 STS sentences, 1 thread)")
    ax.set_ylabel("STS average of 7 sets (Spearman ×100)")
    ax.set_title("Static encoders vs their teacher")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def section_values(
    args: argparse.Namespace,
    stages: StaticStages,
    recipe: StaticRecipe,
    records: list[ResultRecord],
    speed: dict[str, float],
    memory: dict[str, float],
    m2v_seconds: float,
    elapsed: float,
    plot: Path,
) -> dict[str, Any]:
    """The template's values for the run, the recipe and the main table."""
    seconds = stages.seconds
    encoded = int(stages.encoded.sum())
    command = "python benchmarks/static.py --data-dir ../shared/data"
    for option, default in RECIPE_DEFAULTS.items():
        value = getattr(args, option)
        if value != default:
            command += f" --{option.replace('_', '-')} {value}"
    if args.skip_teacher_ablation:
        command += " --skip-teacher-ablation"
    m2v = f"{m2v_seconds:.0f} s"
    if m2v_seconds < 5:  # loaded from the cache: report the distillation's own wall time
        timing = cache_root() / "static" / f"model2vec-{TEACHER}-{DIM}" / "distill_seconds.txt"
        m2v = PROSE.fill("model2vec_cached", seconds=f"{float(timing.read_text()):.0f}")
    shown = plot.relative_to(HERE.parent) if plot.is_relative_to(HERE.parent) else plot
    meta = stages.extracted.metadata
    extraction = (
        f"on {meta['extracted_on']}, {seconds['extract']:.0f} s there; the corpus words were "
        "counted on this machine's CPU beforehand and handed over; the teacher's sentence "
        "embeddings of the harvested sentences came back as int8 with a per-row scale and "
        "were renormalised into the embedding cache (`benchmarks/static_device/`), and this "
        "run resumed from that cache"
        if "extracted_on" in meta
        else f"on this machine's CPU, {seconds['extract']:.0f} s (2 torch threads, whole runs "
        "summed over resumptions)"
    )
    loads = [v for r in records for v in r.extra.get("load_1min", [])]
    teacher_dim = stages.extracted.dim
    return {
        "distill_teacher": DISTILL_TEACHER, "extraction": extraction,
        "load": f"{min(loads):.1f}–{max(loads):.1f}" if loads else "?",
        "teacher_dim": teacher_dim,
        "abtt": recipe.abtt if recipe.abtt is not None else teacher_dim // 100,
        "command": command, "machine": machine_description(), "threads": args.threads,
        "wall_seconds": f"{elapsed:.0f}", "teacher": TEACHER, "min_count": recipe.min_count,
        "n_corpus": f"{len(stages.corpus):,}", "n_entries": f"{len(stages.extracted.vectors):,}",
        "max_occurrences": recipe.max_occurrences, "n_encoded": f"{encoded:,}",
        "dim": recipe.dim, "n_pca": f"{min(encoded, recipe.pca_sentences):,}",
        "batch_size": recipe.batch_size, "learning_rate": recipe.learning_rate,
        "temperature": recipe.temperature, "regression_weight": recipe.regression_weight,
        "best_step": stages.distiller.best_step_, "max_steps": recipe.max_steps,
        "extract_seconds": f"{seconds['extract']:.0f}", "pca_seconds": f"{seconds['pca']:.0f}",
        "distill_seconds": f"{seconds['distill']:.0f}", "model2vec_time": m2v,
        "speed_texts": f"{SPEED_TEXTS:,}", "repeats": args.repeats,
        "memory_texts": f"{MEMORY_TEXTS:,}", "memory_none": f"{memory['none']:.0f}",
        "table": peer_table(records, speed, memory), "plot": shown,
        "ablation_note": " (the rows that re-run the recipe with another teacher were left out "
        "of this run: `--skip-teacher-ablation`)" if args.skip_teacher_ablation else "",
    }  # fmt: skip


def peer_table(
    records: list[ResultRecord], speed: dict[str, float], memory: dict[str, float]
) -> str:
    """One row per peer: quality on every task, throughput and peak memory."""
    sts_sets = [r.dataset for r in records if r.method == "teacher" and r.task == "sts"]
    header = ["model", "dim", "STS avg", *sts_sets[:-1], "class. avg", "SciFact nDCG@10"]
    header += ["sentences/s", "× teacher", "peak RSS MiB"]
    rows = []
    for label, title in ROWS.items():
        dim = next(r.dim for r in records if r.method == label)
        rows.append(
            [
                title,
                dim,
                score(records, label, "sts"),
                *[score(records, label, "sts", name) for name in sts_sets[:-1]],
                score(records, label, "classification"),
                score(records, label, "retrieval", "SciFact", "ndcg@10"),
                round(speed[label]),
                f"{speed[label] / speed['teacher']:.0f}×",
                round(memory[label]),
            ]
        )
    return markdown_table(header, rows)


if __name__ == "__main__":
    sys.exit(main())
