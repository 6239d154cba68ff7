"""``demitasse`` commands. Each one parses options, calls the library and prints where results went.

User mistakes end in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from demitasse.cli.arguments import (
    add_backend_argument,
    compressor_help_text,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    precision_help_text,
)
from demitasse.cli.embed_command import add_bulk_parsers, run_bulk_command
from demitasse.cli.model_commands import (
    add_model_commands,
    run_encode,
    run_export,
    run_fit,
    run_transform,
)
from demitasse.cli.serve_command import add_serve_parser, run_serve
from demitasse.cli.store_commands import add_store_commands, run_index, run_search
from demitasse.cli.tune_command import add_tune_parser, run_tune
from demitasse.errors import DemitasseError, single_line
from demitasse.io import atomic_directory, check_directory_target, handle_termination
from demitasse.search import RESCORE_PRECISIONS

if TYPE_CHECKING:
    from demitasse.cli.eval_options import SearchOptions
    from demitasse.evaluation.grid import CompressorSpec
    from demitasse.evaluation.records import ResultRecord
    from demitasse.evaluation.tasks import Task

DEFAULT_DIMS = "384,256,128,64,32,16,8"
STSB_TRAIN = "stsb-train"
ENCODE_SPEED_TEXTS = 2000
RESULTS_KIND = "evaluation results"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse quotes some arguments as typed ("unrecognized arguments: ..."): one line.
        self.exit(2, f"demitasse: error: {single_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="demitasse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # The order here is the order of the commands in ``demitasse --help``.
    _add_eval_parser(commands)
    _add_report_parser(commands)
    _add_train_parser(commands)
    add_model_commands(commands)
    add_bulk_parsers(commands)
    add_tune_parser(commands)
    _add_distill_static_parser(commands)
    add_serve_parser(commands)
    add_store_commands(commands)
    _add_demo_parser(commands)
    return parser


def _add_eval_parser(commands: Any) -> None:
    """``eval``: an encoder sweep, or a model directory scored as fitted."""
    evaluate = commands.add_parser("eval", help="evaluate encoder × compressor × dim × precision")
    evaluate.add_argument(
        "--model",
        default=None,
        help="a model directory written by 'fit' (evaluated exactly as fitted), or an encoder "
        "name or directory to sweep with --layers/--compressor/--dims/--precision",
    )
    evaluate.add_argument("--layers", default=None, help="'all', 'last' (default) or e.g. 1,3,6")
    evaluate.add_argument(
        "--compressor",
        default=None,
        help=compressor_help_text("comma-separated compressors (default none)"),
    )
    evaluate.add_argument(
        "--dims", default=None, help=f"default {DEFAULT_DIMS}; a model directory: its width"
    )
    evaluate.add_argument(
        "--fit-data",
        default=None,
        help=f"text file to fit compressors on, or '{STSB_TRAIN}' (default: the STS-B train "
        "sentences that are in no STS test or dev split)",
    )
    evaluate.add_argument(
        "--precision",
        default=None,
        help=precision_help_text("comma-separated precisions (default float32; a model "
                                 "directory: the precision it was fitted for)"),
    )  # fmt: skip
    evaluate.add_argument(
        "--tasks",
        default=None,
        help="sts,classification,retrieval,clustering,translation,efficiency or 'all' "
        "(default: sts; retrieval with --beir or --corpus)",
    )
    evaluate.add_argument(
        "--datasets",
        default="all",
        help="STS sets: 'all' (STS12-16, STS-B, SICK-R), names like sts12,stsb, or files and "
        "folders: SemEval STS (STS.input/STS.gs), STS-B or SICK layout, or tables with "
        "sentence1, sentence2, score",
    )
    evaluate.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="shorten each data set to N items (quick runs)",
    )
    _add_retrieval_options(evaluate)
    add_backend_argument(evaluate)
    _common(evaluate)


def _add_retrieval_options(evaluate: argparse.ArgumentParser) -> None:
    """``eval``'s retrieval data and the way the codes are searched."""
    group = evaluate.add_argument_group("retrieval (default: SciFact test)")
    group.add_argument("--beir", default=None, help="BEIR folders, DIR[,DIR...]")
    group.add_argument("--split", default="test", help="qrels split of the --beir folders")
    group.add_argument("--corpus", default=None, help="documents: .jsonl/.tsv/.csv/.parquet")
    group.add_argument("--queries", default=None, help="queries: .jsonl/.tsv/.csv/.parquet")
    group.add_argument("--qrels", default=None, help="judgements: .tsv (query, doc, score), ...")
    group.add_argument(
        "--rescore",
        default=None,
        help="F[,F...]: search int8/binary codes for the top k·F documents and rescore them "
        "with the encoder's full output (a model directory: instead of its own factor)",
    )
    group.add_argument(
        "--rescore-precision",
        choices=RESCORE_PRECISIONS,
        default=None,
        help="how the full output is kept for --rescore (default int8)",
    )
    group.add_argument(
        "--rotation",
        choices=("none", "random", "itq"),
        default=None,
        help="rotate vectors before binarising (binary precision of a sweep; default none)",
    )


def _add_report_parser(commands: Any) -> None:
    """``report``: results files → Markdown + one HTML page."""
    report = commands.add_parser("report", help="render results as Markdown + one HTML page")
    report.add_argument("results", nargs="+", help="results.json files or folders holding one")
    report.add_argument("--out", required=True, help="report directory")
    report.add_argument("--title", default="demitasse report")


def _add_train_parser(commands: Any) -> None:
    """``train``: fine-tune an encoder with Espresso or its baselines."""
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
    train.add_argument(
        "--max-examples",
        type=positive_int,
        default=None,
        help="train on at most the first N examples of each --data set (all)",
    )
    train.add_argument("--out", required=True, help="run directory (resumes if it exists)")
    train.add_argument("--loss", choices=("angle", "cosent", "ibn"), default="angle")
    train.add_argument("--epochs", type=positive_int, default=1)
    train.add_argument("--batch-size", type=positive_int, default=32)
    train.add_argument("--lr", type=positive_float, default=2e-5)
    train.add_argument("--max-steps", type=positive_int, default=None)
    train.add_argument("--eval-steps", type=positive_int, default=100)
    train.add_argument(
        "--patience",
        type=non_negative_int,
        default=5,
        help="stop after this many STS-B dev evaluations without a new best (0: train the "
        "whole budget)",
    )
    train.add_argument("--seed", type=non_negative_int, default=0)
    _add_espresso_loss_options(train)
    _add_espresso_training_options(train)
    train.add_argument(
        "--frozen-encoder",
        action="store_true",
        help="train only the objective's own parameters (with --exit-heads: fit a head per "
        "layer on any model, its encoder untouched)",
    )
    _add_distil_options(train)
    train.add_argument(
        "--head-lr",
        type=positive_float,
        default=None,
        help="learning rate of the objective's own parameters: exit heads, dynamic layer "
        "weights (default 1e-3 with --exit-heads or --layer-weighting dynamic, else --lr; "
        "--distil: 3e-4)",
    )


def _add_distil_options(train: argparse.ArgumentParser) -> None:
    """Exit heads on the frozen encoder fitted from cached features (``--distil``)."""
    train.add_argument(
        "--distil",
        type=non_negative_int,
        default=None,
        help="with --exit-heads --frozen-encoder: compute every layer's features once and fit "
        "the heads on them, distilled toward the last layer on this many unlabeled sentences "
        "(--texts, else the shared unlabeled corpus) and supervised by --data (weight "
        "--supervised-weight; 0: label-free)",
    )
    train.add_argument("--texts", default=None, help="--distil: your own unlabeled text file")
    train.add_argument(
        "--supervised-weight",
        type=non_negative_float,
        default=1.0,
        help="--distil: weight of the supervised loss on --data (0: distillation alone)",
    )
    train.add_argument(
        "--structure-weight",
        type=non_negative_float,
        default=1.0,
        help="--distil: weight of the in-batch similarity-structure term of the distillation",
    )
    train.add_argument(
        "--head-epochs", type=positive_int, default=None, help="--distil: epochs (default 3)"
    )


def _add_espresso_loss_options(train: argparse.ArgumentParser) -> None:
    """What the ``ese`` objective computes: the compression, the layers' terms and weights.

    Each defaults to None, so that the objective's own default applies and an option given with
    another --method can be refused."""
    train.add_argument(
        "--compress-dim", type=positive_int, default=None, help="ese: k (default dim/3)"
    )
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
        "--express-weight",
        type=non_negative_float,
        help="ese: alpha, the weight of the inner layers' loss",
    )


def _add_espresso_training_options(train: argparse.ArgumentParser) -> None:
    """The rest of ``ese``: how its terms update the model, its exit heads, where it compresses."""
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
        type=non_negative_float,
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


def _add_distill_static_parser(commands: Any) -> None:
    """``distill-static``: a static word-vector model distilled from a transformer."""
    static = commands.add_parser(
        "distill-static",
        help="distil a static word-vector sentence encoder from a transformer (Wada et al.)",
    )
    static.add_argument("--corpus", required=True, help="text file or folder of *.txt(.gz)")
    static.add_argument("--out", required=True, help="directory for the static model")
    static.add_argument(
        "--teacher", default="all-MiniLM-L6-v2", help="path or packaged name (WordPiece)"
    )
    static.add_argument("--dim", type=positive_int, default=256)
    static.add_argument(
        "--max-sentences", type=positive_int, default=250_000, help="shuffled corpus sentences"
    )
    static.add_argument(
        "--min-count", type=positive_int, default=5, help="corpus occurrences to be a word"
    )
    static.add_argument("--harvest-limit", type=positive_int, default=None)
    static.add_argument(
        "--steps", type=positive_int, default=10_000, help="most distillation steps"
    )
    static.add_argument("--lr", type=positive_float, default=3e-3)
    static.add_argument(
        "--batch-size", type=positive_int, default=512, help="sentences a distillation step"
    )
    static.add_argument(
        "--regression-weight",
        type=non_negative_float,
        default=0.3,
        help="pull of each sentence toward its teacher embedding (0: similarities only)",
    )
    static.add_argument("--work-dir", default=None, help="extraction checkpoints (resumable)")
    static.add_argument("--model2vec", default=None, help="also export the model2vec layout here")


def _add_demo_parser(commands: Any) -> None:
    """``demo``: truncation vs PCA at float32 and int8 on STS."""
    demo = commands.add_parser("demo", help="truncation vs PCA at float32 and int8 on STS")
    demo.add_argument("--model", default=None)
    _common(demo)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help="shared data folder ($DEMITASSE_DATA)")
    parser.add_argument("--out", default=None, help="output directory")
    parser.add_argument("--batch-size", type=positive_int, default=64)


def _warn_in_one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # Python's default shows the source file and line: noise for a command-line user.
    print(f"demitasse: warning: {single_line(str(message))}", file=file or sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; user mistakes and interruptions end in one line, never a traceback."""
    _configure_logging()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help (0) or a usage error (2), already printed
            return exc.code if isinstance(exc.code, int) else 2
        with warnings.catch_warnings():
            warnings.showwarning = _warn_in_one_line
            return _dispatch(args)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        print(
            f"demitasse: interrupted ({signal.Signals(signum).name}); earlier outputs are "
            "intact and unfinished ones were removed",
            file=sys.stderr,
        )
        return 128 + signum


def _configure_logging() -> None:
    """Library messages go to stderr as ``demitasse: …``: warnings always, progress notes
    (INFO) with DEMITASSE_VERBOSE=1."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("demitasse: %(message)s"))
    root = logging.getLogger("demitasse")
    root.handlers[:] = [handler]  # once, however often main() runs in one process
    root.setLevel(logging.INFO if os.environ.get("DEMITASSE_VERBOSE") else logging.WARNING)


def run() -> int:
    """The ``demitasse`` executable: SIGTERM and SIGHUP clean up as Ctrl-C does, and a signal
    that arrives once the work is done cannot turn a finished run into a traceback."""
    handle_termination()
    code: int | None = None
    try:
        try:
            code = main()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
    except KeyboardInterrupt as exc:
        # It came after main() was done: in the instant between its return and the line above
        # (the work is finished; keep its exit code), or while main() was reporting an earlier
        # interruption (that report is all there is to say).
        if code is None:
            code = 128 + getattr(exc, "signum", signal.SIGINT)
    assert code is not None  # main() returned
    if code >= 128:
        # Interrupted. A KeyboardInterrupt that passed through code run by PyRun_* (some
        # imports do) leaves CPython convinced it went unhandled, and it would then kill itself
        # with SIGINT at exit instead of returning our code: leave directly.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _dispatch(args: argparse.Namespace) -> int:
    try:
        runners = {
            "demo": _run_demo,
            "eval": _run_eval,
            "fit": run_fit,
            "tune": run_tune,
            "encode": run_encode,
            "transform": run_transform,
            "embed": run_bulk_command,
            "recompress": run_bulk_command,
            "report": _run_report,
            "train": _run_train,
            "export": run_export,
            "distill-static": _run_distill_static,
            "serve": run_serve,
            "index": run_index,
            "search": run_search,
        }
        return runners[args.command](args)
    except DemitasseError as exc:
        print(f"demitasse: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        message = f"{exc.strerror or exc}: {exc.filename or ''}"
        print(f"demitasse: error: {single_line(message)}", file=sys.stderr)
        return 2


def _run_distill_static(args: argparse.Namespace) -> int:
    from demitasse.export import export_model2vec
    from demitasse.export.model2vec import check_export_target
    from demitasse.persistence import check_saved_target
    from demitasse.static.model import METHOD as STATIC_MODEL
    from demitasse.static.pipeline import StaticRecipe, distill_static

    # Outputs that would be refused at the end of a long run are refused now.
    check_saved_target(args.out, STATIC_MODEL)
    if args.model2vec:
        check_export_target(args.model2vec)
    recipe = StaticRecipe(
        dim=args.dim,
        max_sentences=args.max_sentences,
        min_count=args.min_count,
        harvest_limit=args.harvest_limit,
        max_steps=args.steps,
        learning_rate=args.lr,
        batch_size=args.batch_size,
        regression_weight=args.regression_weight,
    )
    stages = distill_static(args.teacher, args.corpus, args.work_dir, recipe, progress=True)
    stages.distilled.save(args.out)
    print(f"static model: {args.out} ({len(stages.distilled.vectors)} words × {args.dim})")
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.seconds.items()))
    if args.model2vec:
        export_model2vec(stages.distilled, args.model2vec)
        print(f"model2vec export: {args.model2vec}")
    return 0


def _run_train(args: argparse.Namespace) -> int:
    from demitasse.data import load_stsb
    from demitasse.training import SentenceModel, TrainingConfig, fine_tune
    from demitasse.training.espresso import own_learning_rate
    from demitasse.training.recipes import load_training_sets, make_objective, split_options
    from demitasse.training.trainer import check_run_directory

    if args.distil is not None:
        return _run_distil_heads(args)
    options = _espresso_options(args)
    # The options and the run folder (a corrupt checkpoint) fail before data and model load.
    check_run_directory(args.out)
    sets = load_training_sets(_training_data_names(args), args.data_dir, args.max_examples)
    dev = load_stsb("dev", args.data_dir)
    model = SentenceModel.load(args.model)
    objective_options, update_options = split_options(options)
    objective = make_objective(
        args.method, model.num_layers, model.dim, args.loss, **objective_options
    )
    config = TrainingConfig(
        max_epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        max_steps=args.max_steps,
        eval_every=args.eval_steps,
        patience=args.patience or None,
        seed=args.seed,
        train_backbone=not args.frozen_encoder,
        objective_learning_rate=args.head_lr or own_learning_rate(objective),
        **update_options,
    )
    _log(f"training {args.method} on {', '.join(f'{s.name} ({len(s)})' for s in sets)}")
    result = fine_tune(model, objective, sets, args.out, config, dev=dev, description=args.method)
    best = "n/a" if result.best_score is None else f"{result.best_score:.2f}"
    # Dev scores only the last layer at full width, so for ESE the best checkpoint can be the
    # untrained model: the final one is what a fixed-budget comparison evaluates.
    print(f"{result.last_dir}  (final model, {result.steps} steps, {result.seconds:.0f} s)")
    print(f"{result.model_dir}  (best STS-B dev checkpoint, last layer: {best})")
    return 0


def _run_distil_heads(args: argparse.Namespace) -> int:
    """``train --exit-heads --frozen-encoder --distil N``: heads fitted on cached features."""
    from demitasse.data import load_sickr, load_stsb, load_unlabeled, read_texts
    from demitasse.data.overlap import evaluation_sentences
    from demitasse.training import SentenceModel
    from demitasse.training.frozen import fit_frozen_exit_heads
    from demitasse.training.heads import ExitHeadDistiller
    from demitasse.training.recipes import load_training_sets

    if not (args.exit_heads and args.frozen_encoder) or args.method != "ese":
        raise DemitasseError("--distil fits exit heads on the frozen encoder: give it with "
                             "--exit-heads --frozen-encoder (and no other --method)")  # fmt: skip
    names = [] if args.supervised_weight == 0 else _training_data_names(args)
    sets = load_training_sets(names, args.data_dir, args.max_examples) if names else []
    dev = load_stsb("dev", args.data_dir)
    texts: list[str] = []
    if args.distil:
        if args.texts:
            texts = list(dict.fromkeys(read_texts(args.texts)))[: args.distil]
        else:  # no evaluation or dev sentence may be distilled on
            held = evaluation_sentences(args.data_dir) | set(dev.texts())
            held |= set(load_sickr("trial", args.data_dir).texts())
            texts = load_unlabeled(args.data_dir, args.distil, args.seed, held)
    distiller = ExitHeadDistiller(
        supervised_weight=args.supervised_weight,
        structure_weight=args.structure_weight,
        seed=args.seed,
    )
    if args.head_epochs:
        distiller.set_params(epochs=args.head_epochs)
    if args.head_lr:
        distiller.set_params(learning_rate=args.head_lr)
    model = SentenceModel.load(args.model)
    _log(f"exit heads on the frozen {args.model}: {len(texts)} unlabeled texts, "
         f"{', '.join(f'{s.name} ({len(s)})' for s in sets) or 'no pairs'}")  # fmt: skip
    result = fit_frozen_exit_heads(model, args.out, distiller, texts, sets, dev)
    for layer, (before, after) in result.dev.items():
        _log(f"layer {layer}: STS-B dev {before:.2f} -> {after:.2f} with its head")
    print(f"{result.model_dir}  (the model, encoder untouched, with exit heads)")
    return 0


def _espresso_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ese`` options given on the command line, as keyword arguments of its objective."""
    from demitasse.cli.specs import parse_int_list

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
    return options


def _training_data_names(args: argparse.Namespace) -> list[str]:
    from demitasse.training.recipes import DEFAULT_TRAINING_DATA

    if args.data is None:
        return list(DEFAULT_TRAINING_DATA)
    return [n.strip() for n in args.data.split(",") if n.strip()]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fit_texts(spec: str, data_dir: str | None) -> list[str]:
    from demitasse.data import read_texts, stsb_fit_sentences

    if spec == STSB_TRAIN:
        return stsb_fit_sentences(data_dir)
    return read_texts(spec)


def _parse_layers(text: str) -> list[int] | None:
    """Layers to evaluate; ``None`` means all, ``[]`` the last one."""
    from demitasse.cli.specs import parse_int_list

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
    search: SearchOptions | None = None,
    backend: str | None = None,
) -> Path:
    from demitasse.cli.specs import parse_compressor_specs, parse_int_list, parse_precisions
    from demitasse.data import STSB_FIT_DATA
    from demitasse.encoders import DEFAULT_MODEL
    from demitasse.evaluation.grid import evaluate_grid
    from demitasse.evaluation.suites import parse_task_names
    from demitasse.loading import load_encoder

    # Parse everything and read the data before the slow model load, so mistakes fail fast.
    _check_results_target(out)
    specs = parse_compressor_specs(compressors)
    dim_list = parse_int_list(dims, "--dims")
    precision_list = parse_precisions(precisions)
    layer_list = _parse_layers(layers)
    task_names = parse_task_names(tasks)
    task_list = _sweep_tasks(task_names, data_dir, datasets, limit, precision_list, search)
    fit_texts = _fit_texts(fit_data, data_dir)
    fit_name = STSB_FIT_DATA if fit_data == STSB_TRAIN else Path(fit_data).name
    backend = backend or "torch"
    encoder = load_encoder(model or DEFAULT_MODEL, backend=backend)
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
        progress=sys.stderr.isatty() or bool(os.environ.get("DEMITASSE_PROGRESS")),
        quantizer_params=search.quantizer_params if search else None,
    )
    if "efficiency" in task_names:
        records += _speed_records(
            model or DEFAULT_MODEL, chosen_layers or [encoder.num_layers], specs, dim_list,
            fit_texts, fit_name, batch_size, backend,
        )  # fmt: skip
    _tag_backend(records, backend)
    _write_results(records, out, encoder.name, started)
    return out


def _tag_backend(records: list[ResultRecord], backend: str) -> None:
    """Records of an ONNX backend say so (torch's stay as they always were)."""
    if backend != "torch":
        for record in records:
            record.extra = {**(record.extra or {}), "backend": backend}


def _sweep_tasks(
    task_names: list[str],
    data_dir: str | None,
    datasets: str,
    limit: int | None,
    precisions: list[str],
    search: SearchOptions | None,
) -> list[Task]:
    """The sweep's tasks, with the retrieval data and rescoring variants of ``search``."""
    from demitasse.cli.eval_options import check_sweep
    from demitasse.evaluation.suites import build_tasks

    if search is None:
        return build_tasks(task_names, data_dir, sts_datasets=datasets, limit=limit)
    check_sweep(search, precisions)
    return build_tasks(
        task_names, data_dir, sts_datasets=datasets, limit=limit,
        retrieval=search.retrieval, rescoring=search.rescoring,
    )  # fmt: skip


def _write_results(records: list[ResultRecord], out: Path, title: str, started: float) -> None:
    """results.json, a table per task on stdout, the STS plot and the HTML report."""
    from demitasse.evaluation.records import write_records
    from demitasse.report import plot_sts_vs_dim, render_report, task_table

    if not records:
        raise DemitasseError("nothing was evaluated: no configuration fits the model's width")
    # results.json, the plot and the report are one set, replaced together or not at all.
    with atomic_directory(out, kind=RESULTS_KIND, recognise=_earlier_results) as tmp:
        write_records(tmp / "results.json", records)
        if any(r.task == "sts" for r in records):
            plot_sts_vs_dim(records, tmp / "sts_vs_dim.png", title=title)
        render_report(records, tmp / "report", title=f"demitasse: {title}")
    for task in dict.fromkeys(r.task for r in records if r.task != "efficiency"):
        print(f"\n{task}\n\n{task_table(records, task).markdown()}")
    outputs = [str(out / "results.json")]
    if any(r.task == "sts" for r in records):
        outputs.append(str(out / "sts_vs_dim.png"))
    outputs.append(str(out / "report" / "report.html"))
    print(
        f"\n{len(records)} results in {outputs[0]}; plot and report: {', '.join(outputs[1:])} "
        f"({time.perf_counter() - started:.0f} s)"
    )


def _check_results_target(out: Path) -> None:
    check_directory_target(out, kind=RESULTS_KIND, recognise=_earlier_results)


def _earlier_results(path: Path) -> bool:
    """An evaluation folder written before outputs carried a marker."""
    return (path / "results.json").is_file() and (path / "report").is_dir()


def _evaluate_model_dir(args: argparse.Namespace, search: SearchOptions) -> None:
    """``eval --model DIR``: score exactly the fitted model saved in DIR."""
    from demitasse.cli.eval_options import apply_to_model
    from demitasse.cli.specs import parse_int_list, parse_precisions
    from demitasse.evaluation.grid import evaluate_model
    from demitasse.evaluation.suites import build_tasks, parse_task_names
    from demitasse.model import CompressedModel

    sweep_only = {"--compressor": args.compressor, "--fit-data": args.fit_data,
                  "--layers": args.layers}  # fmt: skip
    given = [flag for flag, value in sweep_only.items() if value is not None]
    if given:
        raise DemitasseError(
            f"{given[0]} applies to a sweep over an encoder; the model directory {args.model} "
            "carries its own layer, compressor and fit"
        )
    task_names = parse_task_names(search.tasks)
    if "efficiency" in task_names:
        raise DemitasseError("--tasks efficiency takes an encoder name, not a model directory")
    out = Path(args.out or "demitasse-results")
    _check_results_target(out)
    model = CompressedModel.load(args.model, backend=args.backend)
    apply_to_model(search, model, args.model)
    dims = parse_int_list(args.dims, "--dims") if args.dims else None
    precisions = parse_precisions(args.precision) if args.precision else None
    requested: list[int | None] = list(dims) if dims else [None]
    for dim in requested:
        for precision in precisions or [model.precision]:
            model.bytes_per_vector(dim, precision)  # fail on a bad request before any work
    tasks = build_tasks(
        task_names, args.data_dir, sts_datasets=args.datasets, limit=args.limit,
        retrieval=search.retrieval,
    )  # fmt: skip
    model.batch_size = args.batch_size
    started = time.perf_counter()
    records = evaluate_model(
        model, tasks, dims=dims, precisions=precisions, extra={"model_dir": args.model}
    )
    _tag_backend(records, model.backend)
    _write_results(records, out, model.name, started)


def _speed_records(
    model: str,
    layers: list[int],
    specs: Sequence[CompressorSpec],
    dims: list[int],
    fit_texts: list[str],
    fit_name: str,
    batch_size: int,
    backend: str,
) -> list[ResultRecord]:
    """Encode throughput per layer cut and transform throughput per compressor and dim."""
    from demitasse.evaluation.efficiency import (
        measure_encode_throughput,
        measure_transform_throughput,
    )
    from demitasse.loading import load_encoder

    encoder = load_encoder(model, cache=False, backend=backend)  # timings: no cache
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
    from demitasse.cli.eval_options import search_options
    from demitasse.model import is_model_dir

    search = search_options(args)
    if args.model is not None and is_model_dir(args.model):
        _evaluate_model_dir(args, search)
        return 0
    _evaluate_and_report(
        model=args.model,
        layers=args.layers or "last",
        compressors=args.compressor or "none",
        dims=args.dims or DEFAULT_DIMS,
        precisions=args.precision or "float32",
        fit_data=args.fit_data or STSB_TRAIN,
        tasks=search.tasks,
        datasets=args.datasets,
        data_dir=args.data_dir,
        out=Path(args.out or "demitasse-results"),
        limit=args.limit,
        batch_size=args.batch_size,
        search=search,
        backend=args.backend,
    )
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
