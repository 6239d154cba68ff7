"""``train``: fine-tune an encoder with Espresso (``--objective ese``) or its raw / Matryoshka
baselines, or fit exit heads on a frozen encoder from cached features (``--distil``). The
command parses its options, calls :mod:`demitasse.training` and says where the model went."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from demitasse.cli.arguments import (
    comma_list,
    non_blank,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from demitasse.errors import DemitasseError

#: The training objectives ``--objective`` takes.
OBJECTIVES = ("raw", "mrl", "ese")


def add_train_parser(commands: Any) -> None:  # argparse's subparsers action
    """``train``: fine-tune an encoder with Espresso or its baselines."""
    train = commands.add_parser(
        "train", help="fine-tune a model: Espresso (ese) or its raw / Matryoshka baselines"
    )
    train.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="ese",
        help="what the model learns: ese (Espresso, default), raw (the last layer) or mrl "
        "(Matryoshka prefixes)",
    )
    train.add_argument("--model", default="all-MiniLM-L6-v2", type=non_blank,
                       help="path or packaged name")  # fmt: skip
    train.add_argument(
        "--data",
        type=comma_list,
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
    train.add_argument("--out", required=True, type=non_blank,
                       help="run directory (resumes if it exists)")  # fmt: skip
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
    another --objective can be refused."""
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
        type=comma_list,
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


def run_train(args: argparse.Namespace) -> int:
    from demitasse.data import load_stsb
    from demitasse.training import SentenceModel, TrainingConfig, fine_tune
    from demitasse.training.espresso import own_learning_rate
    from demitasse.training.recipes import load_training_sets, make_objective, split_options
    from demitasse.training.trainer import check_run_directory

    _check_out(args)
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
        args.objective, model.num_layers, model.dim, args.loss, **objective_options
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
    _log(f"training {args.objective} on {', '.join(f'{s.name} ({len(s)})' for s in sets)}")
    result = fine_tune(
        model, objective, sets, args.out, config, dev=dev, description=args.objective
    )
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

    if not (args.exit_heads and args.frozen_encoder) or args.objective != "ese":
        raise DemitasseError(
            "--distil fits exit heads on the frozen encoder: give it with --exit-heads "
            "--frozen-encoder (and no other --objective)"
        )
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


def _check_out(args: argparse.Namespace) -> None:
    """The run folder (resumed into: an output, not an input) is none of what the training
    reads, inside or holding it: checkpoints written there would replace the model trained.
    Inside the shared data folder it may lie, as eval's results may."""
    from demitasse.io import check_not_input
    from demitasse.model_files import model_inputs

    check_not_input(args.out, [*model_inputs(args.model), args.texts])
    check_not_input(args.out, [args.data_dir], nested=True)


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
    if options and args.objective != "ese":
        flag = f"--{next(iter(options)).replace('_', '-')}"
        raise DemitasseError(f"{flag} applies to --objective ese")
    return options


def _training_data_names(args: argparse.Namespace) -> list[str]:
    from demitasse.training.recipes import DEFAULT_TRAINING_DATA

    if args.data is None:
        return list(DEFAULT_TRAINING_DATA)
    return [n.strip() for n in args.data.split(",") if n.strip()]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
