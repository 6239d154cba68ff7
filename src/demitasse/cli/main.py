"""``demitasse`` commands. Each one parses options, calls the library and prints where results went.

User mistakes end in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from demitasse.errors import DemitasseError

if TYPE_CHECKING:
    from demitasse.evaluation.grid import CompressorSpec
    from demitasse.evaluation.records import ResultRecord

DEFAULT_DIMS = "384,256,128,64,32,16,8"
STSB_TRAIN = "stsb-train"
ENCODE_SPEED_TEXTS = 2000


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"demitasse: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="demitasse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    evaluate = commands.add_parser("eval", help="evaluate encoder × compressor × dim × precision")
    evaluate.add_argument("--model", default=None, help="model name or directory")
    evaluate.add_argument("--layers", default="last", help="'all', 'last' or e.g. 1,3,6")
    evaluate.add_argument("--compressor", default="none", help="none,truncate,pca,pca-abtt,...")
    evaluate.add_argument("--dims", default=DEFAULT_DIMS)
    evaluate.add_argument(
        "--fit-data",
        default=STSB_TRAIN,
        help=f"text file to fit compressors on, or '{STSB_TRAIN}' (the STS-B train sentences "
        "that are in no STS test or dev split)",
    )
    evaluate.add_argument("--precision", default="float32", help="float32,int8,binary")
    evaluate.add_argument(
        "--tasks",
        default="sts",
        help="sts,classification,retrieval,clustering,translation,efficiency or 'all'",
    )
    evaluate.add_argument(
        "--datasets",
        default="all",
        help="STS sets: 'all' (STS12-16, STS-B, SICK-R), names like sts12,stsb, or pair files",
    )
    evaluate.add_argument(
        "--limit", type=int, default=None, help="shorten each data set to N items (quick runs)"
    )
    _common(evaluate)

    fit = commands.add_parser("fit", help="fit a compressor on precomputed vectors and save it")
    fit.add_argument("--method", required=True, help="truncate, pca, pca-abtt, pca:whiten=true…")
    fit.add_argument("--dim", type=int, default=None, help="largest output dimension")
    fit.add_argument("--input", required=True, help="vectors: .npy or Parquet list column")
    fit.add_argument("--column", default="embedding", help="Parquet column with the vectors")
    fit.add_argument("--out", required=True, help="directory to save the compressor in")

    transform = commands.add_parser("transform", help="compress vectors with a saved compressor")
    transform.add_argument("--compressor", required=True, help="directory written by 'fit'")
    transform.add_argument("--input", required=True, help="vectors: .npy or Parquet list column")
    transform.add_argument("--column", default="embedding")
    transform.add_argument("--dim", type=int, default=None)
    transform.add_argument("--output", required=True, help=".npy file to write")

    report = commands.add_parser("report", help="render results as Markdown + one HTML page")
    report.add_argument("results", nargs="+", help="results.json files or folders holding one")
    report.add_argument("--out", required=True, help="report directory")
    report.add_argument("--title", default="demitasse report")

    train = commands.add_parser(
        "train", help="fine-tune a model: Espresso (ese) or its raw / Matryoshka baselines"
    )
    train.add_argument("--method", choices=("raw", "mrl", "ese"), default="ese")
    train.add_argument("--model", default="all-MiniLM-L6-v2", help="path or packaged name")
    train.add_argument(
        "--data",
        default=None,
        help="comma-separated: stsb-train, sick-train, snli (default: stsb-train,snli)",
    )
    train.add_argument("--data-dir", default=None, help="shared data folder ($DEMITASSE_DATA)")
    train.add_argument("--out", required=True, help="run directory (resumes if it exists)")
    train.add_argument("--loss", choices=("angle", "cosent", "ibn"), default="angle")
    train.add_argument("--epochs", type=int, default=1)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=2e-5)
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--eval-steps", type=int, default=100)
    train.add_argument(
        "--patience",
        type=int,
        default=5,
        help="stop after this many STS-B dev evaluations without a new best (0: train the "
        "whole budget)",
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--compress-dim", type=int, default=None, help="ese: k (default dim/3)")
    train.add_argument("--layer-weighting", choices=("default", "none", "dynamic"))
    train.add_argument("--compression", choices=("dependencies", "embeddings", "none"))
    train.add_argument("--layer-indexing", choices=("paper", "reference"))
    train.add_argument("--pca-scaling", choices=("none", "singular-values"))
    train.add_argument(
        "--inner-reduction",
        choices=("sum", "mean"),
        help="ese: add the inner layers' terms whole (paper) or averaged (reference code)",
    )
    train.add_argument(
        "--prefix-loss",
        action="store_true",
        default=None,
        help="ese: also apply the loss to the first k dims, as the reference code does",
    )
    train.add_argument(
        "--matryoshka-dims",
        help="ese: also apply the loss to these prefixes of the last layer (e.g. 128,64,32)",
    )
    train.add_argument(
        "--express-weight", type=float, help="ese: alpha, the weight of the inner layers' loss"
    )
    train.add_argument(
        "--gradient-priority",
        action="store_true",
        default=None,
        help="ese: drop the part of the inner layers' gradient that opposes the last layer's "
        "(one-sided PCGrad; a second backward pass per step)",
    )
    train.add_argument(
        "--decoupled-updates",
        action="store_true",
        default=None,
        help="ese: the last layer's and the inner layers' terms update with their own AdamW "
        "moments (a second backward pass per step)",
    )
    train.add_argument(
        "--inner-rate",
        type=float,
        help="ese with --decoupled-updates: learning-rate factor of the inner layers' update "
        "of the encoder (0: the inner layers' terms train only the exit heads)",
    )
    train.add_argument(
        "--exit-heads",
        action="store_true",
        default=None,
        help="ese: a linear head per inner layer, fitted with the model (saved in exit_heads/, "
        "applied when encoding and exporting)",
    )
    train.add_argument(
        "--no-compress-last",
        dest="compress_last",
        action="store_false",
        default=None,
        help="ese: learn-to-compress on the inner layers only, not on the last layer",
    )
    train.add_argument(
        "--frozen-encoder",
        action="store_true",
        help="train only the objective's own parameters (with --exit-heads: fit a head per "
        "layer on any model, its encoder untouched)",
    )
    train.add_argument(
        "--head-lr",
        type=float,
        default=None,
        help="learning rate of the objective's own parameters: exit heads, dynamic layer "
        "weights (default 1e-3 with --exit-heads or --layer-weighting dynamic, else --lr)",
    )

    export = commands.add_parser(
        "export",
        help="write a sentence-transformers model cut to a layer, compressed to a dimension",
    )
    export.add_argument("model", help="model path or packaged name (e.g. RUN/best)")
    export.add_argument("--layer", type=int, default=None, help="keep blocks 1..layer")
    export.add_argument(
        "--dim",
        type=int,
        default=None,
        help="output width (default: the compressor's, else the model's)",
    )
    export.add_argument(
        "--compressor", default=None, help="a saved compressor (demitasse fit) to apply"
    )
    export.add_argument(
        "--quantizer", default=None, help="a saved quantizer whose calibration to include"
    )
    export.add_argument("--normalize", action="store_true", help="L2-normalise the output")
    export.add_argument("--out", required=True, help="directory to write")

    static = commands.add_parser(
        "distill-static",
        help="distil a static word-vector sentence encoder from a transformer (Wada et al.)",
    )
    static.add_argument("--corpus", required=True, help="text file or folder of *.txt(.gz)")
    static.add_argument("--out", required=True, help="directory for the static model")
    static.add_argument("--teacher", default="all-MiniLM-L6-v2", help="path or packaged name")
    static.add_argument("--dim", type=int, default=256)
    static.add_argument("--max-sentences", type=int, default=250_000)
    static.add_argument("--harvest-limit", type=int, default=None)
    static.add_argument("--steps", type=int, default=10_000, help="most distillation steps")
    static.add_argument("--lr", type=float, default=3e-3)
    static.add_argument("--work-dir", default=None, help="extraction checkpoints (resumable)")
    static.add_argument("--model2vec", default=None, help="also export the model2vec layout here")

    demo = commands.add_parser("demo", help="truncation vs PCA at float32 and int8 on STS")
    demo.add_argument("--model", default=None)
    _common(demo)
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help="shared data folder ($DEMITASSE_DATA)")
    parser.add_argument("--out", default=None, help="output directory")
    parser.add_argument("--batch-size", type=int, default=64)


def _warn_in_one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # Python's default shows the source file and line: noise for a command-line user.
    print(f"demitasse: warning: {message}", file=file or sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _warn_in_one_line
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        runners = {
            "demo": _run_demo,
            "eval": _run_eval,
            "fit": _run_fit,
            "transform": _run_transform,
            "report": _run_report,
            "train": _run_train,
            "export": _run_export,
            "distill-static": _run_distill_static,
        }
        return runners[args.command](args)
    except DemitasseError as exc:
        print(f"demitasse: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"demitasse: error: {exc.strerror or exc}: {exc.filename or ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("demitasse: interrupted; finished outputs are intact", file=sys.stderr)
        return 130


def _run_distill_static(args: argparse.Namespace) -> int:
    from demitasse.export import export_model2vec
    from demitasse.static.pipeline import StaticRecipe, distill_static

    for option in ("dim", "max_sentences", "harvest_limit", "steps"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise DemitasseError(f"--{option.replace('_', '-')} must be positive, got {value}")
    recipe = StaticRecipe(
        dim=args.dim,
        max_sentences=args.max_sentences,
        harvest_limit=args.harvest_limit,
        max_steps=args.steps,
        learning_rate=args.lr,
    )
    stages = distill_static(args.teacher, args.corpus, args.work_dir, recipe, show_progress=True)
    stages.distilled.save(args.out)
    print(f"static model: {args.out} ({len(stages.distilled.vectors)} words × {args.dim})")
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.seconds.items()))
    if args.model2vec:
        export_model2vec(stages.distilled, args.model2vec)
        print(f"model2vec export: {args.model2vec}")
    return 0


def _run_train(args: argparse.Namespace) -> int:
    from demitasse.data import load_stsb
    from demitasse.evaluation.grid import parse_int_list
    from demitasse.training import SentenceModel, TrainingConfig, fine_tune
    from demitasse.training.espresso import own_learning_rate
    from demitasse.training.recipes import (
        DEFAULT_TRAINING_DATA,
        load_training_sets,
        make_objective,
    )

    names = (
        [n.strip() for n in args.data.split(",") if n.strip()]
        if args.data is not None
        else list(DEFAULT_TRAINING_DATA)
    )
    sets = load_training_sets(names, args.data_dir, report=_log)
    dev = load_stsb("dev", args.data_dir)
    model = SentenceModel.load(args.model)
    espresso_options = (
        "compress_dim",
        "layer_weighting",
        "compression",
        "layer_indexing",
        "pca_scaling",
        "inner_reduction",
        "prefix_loss",
        "matryoshka_dims",
        "express_weight",
        "gradient_priority",
        "decoupled_updates",
        "inner_rate",
        "exit_heads",
        "compress_last",
    )
    options = {k: getattr(args, k) for k in espresso_options if getattr(args, k) is not None}
    if "matryoshka_dims" in options:
        options["matryoshka_dims"] = parse_int_list(options["matryoshka_dims"], "--matryoshka-dims")
    if options and args.method != "ese":
        raise DemitasseError(f"--{next(iter(options)).replace('_', '-')} applies to --method ese")
    objective = make_objective(args.method, model.num_layers, model.dim, args.loss, **options)
    config = TrainingConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        max_steps=args.max_steps,
        eval_steps=args.eval_steps,
        patience=args.patience or None,
        seed=args.seed,
        train_backbone=not args.frozen_encoder,
        objective_learning_rate=args.head_lr or own_learning_rate(objective),
    )
    _log(f"training {args.method} on {', '.join(f'{s.name} ({len(s)})' for s in sets)}")
    result = fine_tune(model, objective, sets, args.out, config, dev=dev, description=args.method)
    best = "n/a" if result.best_score is None else f"{result.best_score:.2f}"
    # Dev scores only the last layer at full width, so for ESE the best checkpoint can be the
    # untrained model: the final one is what a fixed-budget comparison evaluates.
    print(f"{result.last_dir}  (final model, {result.steps} steps, {result.seconds:.0f} s)")
    print(f"{result.model_dir}  (best STS-B dev checkpoint, last layer: {best})")
    return 0


def _run_export(args: argparse.Namespace) -> int:
    from demitasse.compress import load_compressor, load_quantizer
    from demitasse.export import export_sentence_transformer

    out = export_sentence_transformer(
        args.model,
        args.out,
        layer=args.layer,
        dim=args.dim,
        compressor=load_compressor(args.compressor) if args.compressor else None,
        quantizer=load_quantizer(args.quantizer) if args.quantizer else None,
        normalize=args.normalize,
    )
    print(out)
    return 0


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fit_texts(spec: str, data_dir: str | None) -> list[str]:
    from demitasse.data import read_texts, stsb_fit_sentences

    if spec == STSB_TRAIN:
        return stsb_fit_sentences(data_dir)
    return read_texts(spec)


def _parse_layers(text: str) -> list[int] | None:
    """Layers to evaluate; ``None`` means all, ``[]`` the last one."""
    from demitasse.evaluation.grid import parse_int_list

    if text == "all":
        return None
    if text == "last":
        return []
    return parse_int_list(text, "--layers")


def _evaluate_and_report(
    *,
    model: str | None,
    layers: str,
    compressors: str,
    dims: str,
    precisions: str,
    fit_data: str,
    tasks: str,
    datasets: str,
    data_dir: str | None,
    out: Path,
    limit: int | None,
    batch_size: int,
) -> Path:
    from demitasse.data import STSB_FIT_DATA
    from demitasse.encoders import DEFAULT_MODEL, load_encoder
    from demitasse.evaluation.grid import (
        evaluate_grid,
        parse_compressor_specs,
        parse_int_list,
        parse_precisions,
    )
    from demitasse.evaluation.records import write_records
    from demitasse.evaluation.suites import build_tasks, parse_task_names
    from demitasse.report import plot_sts_vs_dim, render_report, task_table

    # Parse everything and read the data before the slow model load, so mistakes fail fast.
    specs = parse_compressor_specs(compressors)
    dim_list = parse_int_list(dims, "--dims")
    precision_list = parse_precisions(precisions)
    layer_list = _parse_layers(layers)
    task_names = parse_task_names(tasks)
    task_list = build_tasks(task_names, data_dir, sts_datasets=datasets, limit=limit)
    fit_texts = _fit_texts(fit_data, data_dir)
    fit_name = STSB_FIT_DATA if fit_data == STSB_TRAIN else Path(fit_data).name
    encoder = load_encoder(model or DEFAULT_MODEL)
    chosen_layers = list(range(1, encoder.num_layers + 1)) if layer_list is None else layer_list
    started = time.perf_counter()
    records = evaluate_grid(
        encoder,
        task_list,
        specs=specs,
        dims=dim_list,
        precisions=precision_list,
        layers=chosen_layers,
        fit_texts=fit_texts,
        fit_data=fit_name,
        batch_size=batch_size,
        log=_log if os.environ.get("DEMITASSE_VERBOSE") else lambda _: None,
        progress=sys.stderr.isatty() or bool(os.environ.get("DEMITASSE_PROGRESS")),
    )
    if "efficiency" in task_names:
        records += _speed_records(
            model or DEFAULT_MODEL, chosen_layers or [encoder.num_layers], specs, dim_list,
            fit_texts, fit_name, batch_size,
        )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    write_records(out / "results.json", records)
    for task in dict.fromkeys(r.task for r in records if r.task != "efficiency"):
        print(f"\n{task}\n\n{task_table(records, task).markdown()}")
    outputs = [str(out / "results.json")]
    if any(r.task == "sts" for r in records):
        outputs.append(str(plot_sts_vs_dim(records, out / "sts_vs_dim.png", title=encoder.name)))
    report = render_report(records, out / "report", title=f"demitasse: {encoder.name}")
    outputs.append(str(report.html))
    print(
        f"\n{len(records)} results in {outputs[0]}; plot and report: {', '.join(outputs[1:])} "
        f"({time.perf_counter() - started:.0f} s)"
    )
    return out


def _speed_records(
    model: str,
    layers: list[int],
    specs: Sequence[CompressorSpec],
    dims: list[int],
    fit_texts: list[str],
    fit_name: str,
    batch_size: int,
) -> list[ResultRecord]:
    """Encode throughput per layer cut and transform throughput per compressor and dim."""
    from demitasse.encoders import load_encoder
    from demitasse.evaluation.efficiency import (
        measure_encode_throughput,
        measure_transform_throughput,
    )

    encoder = load_encoder(model, cache=False)  # timings must not read the cache
    sample = fit_texts[:ENCODE_SPEED_TEXTS]
    records = measure_encode_throughput(encoder, sample, layers, batch_size=batch_size)
    vectors = encoder.encode_layers(sample, layers, batch_size=batch_size)
    for layer in layers:
        for spec in (s for s in specs if s.method is not None):
            usable = [d for d in dims if d <= encoder.dim]
            compressor = spec.build(encoder.dim, max(usable))
            compressor.fit(vectors[layer], fit_data=f"{fit_name} (first {len(sample)})")
            usable = [d for d in usable if d <= compressor.output_dim_]
            records += measure_transform_throughput(
                compressor, vectors[layer], usable, label=spec.label, model=encoder.name,
                layer=layer,
            )  # fmt: skip
    return records


def _run_eval(args: argparse.Namespace) -> int:
    _evaluate_and_report(
        model=args.model,
        layers=args.layers,
        compressors=args.compressor,
        dims=args.dims,
        precisions=args.precision,
        fit_data=args.fit_data,
        tasks=args.tasks,
        datasets=args.datasets,
        data_dir=args.data_dir,
        out=Path(args.out or "demitasse-results"),
        limit=args.limit,
        batch_size=args.batch_size,
    )
    return 0


def _run_fit(args: argparse.Namespace) -> int:
    from demitasse.data import load_embeddings
    from demitasse.evaluation.grid import parse_compressor_specs

    specs = parse_compressor_specs(args.method)
    if len(specs) != 1 or specs[0].method is None:
        raise DemitasseError("--method takes one compressor, e.g. pca or truncate")
    vectors = load_embeddings(args.input, column=args.column)
    compressor = specs[0].build(vectors.shape[1], args.dim)
    compressor.fit(vectors, fit_data=Path(args.input).name)
    compressor.save(args.out)
    meta = compressor.metadata
    print(
        f"saved {meta['method']} ({meta['input_dim']} -> {meta['output_dim']} dims, fitted on "
        f"{meta['n_fit_samples']} rows of {meta['fit_data']}) to {args.out}"
    )
    return 0


def _run_transform(args: argparse.Namespace) -> int:
    from demitasse.compress import load_compressor
    from demitasse.data import load_embeddings
    from demitasse.io import atomic_npy

    compressor = load_compressor(args.compressor)
    vectors = load_embeddings(args.input, column=args.column)
    dim = args.dim or compressor.output_dim_
    compressor.transform(vectors[:1], dim=dim)  # validates dim and width before any output
    with atomic_npy(args.output, (vectors.shape[0], dim)) as out:
        compressor.transform(vectors, dim=dim, out=out)
    print(f"wrote {vectors.shape[0]} × {dim} float32 vectors to {args.output}")
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from demitasse.evaluation.records import read_records
    from demitasse.report import render_report

    records = [record for path in args.results for record in read_records(path)]
    paths = render_report(records, args.out, title=args.title)
    print(f"report: {paths.html} (one self-contained page) and {paths.markdown}")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    print(
        "demitasse demo: all-MiniLM-L6-v2 on STS12-16, STS-B and SICK-R; PCA fitted on STS-B "
        "train sentences; truncation vs PCA at float32 and int8 (cached after the first run)",
        flush=True,
    )
    _evaluate_and_report(
        model=args.model,
        layers="last",
        compressors="truncate,pca",
        dims=DEFAULT_DIMS,
        precisions="float32,int8",
        fit_data=STSB_TRAIN,
        tasks="sts",
        datasets="all",
        data_dir=args.data_dir,
        out=Path(args.out or "demo-results"),
        limit=None,
        batch_size=args.batch_size,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
