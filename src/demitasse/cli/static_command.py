"""``distill-static``: a static word-vector sentence encoder distilled from a transformer
(Wada et al.). The command parses its options, calls :mod:`demitasse.static` and says where the
model went."""

from __future__ import annotations

import argparse
from typing import Any

from demitasse.cli.arguments import non_blank, non_negative_float, positive_float, positive_int


def add_distill_static_parser(commands: Any) -> None:  # argparse's subparsers action
    """``distill-static``: a static word-vector model distilled from a transformer."""
    static = commands.add_parser(
        "distill-static",
        help="distil a static word-vector sentence encoder from a transformer (Wada et al.)",
    )
    static.add_argument("--corpus", required=True, help="text file or folder of *.txt(.gz)")
    static.add_argument(
        "--out", required=True, help="directory for the static model", type=non_blank
    )
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
    static.add_argument(
        "--harvest-limit", type=positive_int, default=None,
        help="of those sentences, how many the teacher reads (whole chunks; default all)",
    )  # fmt: skip
    static.add_argument(
        "--max-steps", type=positive_int, default=10_000, help="most distillation steps"
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
    static.add_argument(
        "--work-dir", default=None, help="extraction checkpoints (resumable)", type=non_blank
    )
    static.add_argument("--model2vec", default=None, help="also export the model2vec layout here")


def run_distill_static(args: argparse.Namespace) -> int:
    from demitasse.export import export_model2vec
    from demitasse.export.model2vec import check_export_target
    from demitasse.io_targets import check_apart, check_not_input
    from demitasse.model_files import model_inputs
    from demitasse.persistence import check_saved_target
    from demitasse.static.model import METHOD as STATIC_MODEL
    from demitasse.static.pipeline import StaticRecipe, distill_static

    # Outputs that would be refused at the end of a long run are refused now: none is an
    # input (the work folder is resumed into, an output too), nor another of them.
    outputs = {"--out": args.out, "--model2vec": args.model2vec, "--work-dir": args.work_dir}
    check_apart(outputs)
    inputs = [args.corpus, *model_inputs(args.teacher)]
    for output in (path for path in outputs.values() if path):
        check_not_input(output, inputs)
    check_saved_target(args.out, STATIC_MODEL)
    if args.model2vec:
        check_export_target(args.model2vec)
    recipe = StaticRecipe(
        dim=args.dim,
        max_sentences=args.max_sentences,
        min_count=args.min_count,
        harvest_limit=args.harvest_limit,
        max_steps=args.max_steps,
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
