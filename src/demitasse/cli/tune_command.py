"""``demitasse tune``: the cheapest configuration of a model that keeps what the user needs on
their own data, written as a model directory. The command parses its options, calls
:func:`demitasse.tune.tune` and prints the Pareto front and what it chose."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from demitasse.cli.arguments import comma_list, non_blank, positive_float, positive_int

TUNE_HELP = "find the cheapest configuration that keeps a target quality on your data"
DEFAULT_COMPRESSORS = "truncate,pca,pca-whiten,adaptor"
#: demitasse.tune.space.CODES, written out: the parser is built without importing the tune.
DEFAULT_CODES = "rq8,rq16,rq32"


def add_tune_parser(commands: Any) -> None:  # argparse's subparsers action
    """Add ``tune`` to the ``demitasse`` parser."""
    tune = commands.add_parser(
        "tune",
        help=TUNE_HELP,
        description="Sweep layer cuts, compressors, widths, precisions, codebook codes and "
        "rescoring on your data; print the Pareto front of quality against bytes per document "
        "(--budget: codes + rescoring copy, or codes only); write the cheapest "
        "configuration that meets the target as a model directory (encode, eval and export "
        "take it), with records and an HTML report in the work folder.",
    )
    tune.add_argument(
        "--model", default="all-MiniLM-L6-v2", help="encoder: name or directory", type=non_blank
    )
    tune.add_argument("--static", default=None, help="also sweep this static model directory")
    data = tune.add_argument_group(
        "your data: --beir, or --corpus/--queries/--qrels, or --pairs, or --corpus alone "
        "(optionally with --queries: then the label-free estimate decides)"
    )
    data.add_argument("--beir", default=None, help="BEIR folder (corpus, queries, qrels/)")
    data.add_argument(
        "--split",
        default=None,
        help="qrels split of --beir (default: train, else dev; test only when named)",
    )
    data.add_argument(
        "--corpus", default=None, help="documents: .jsonl, .tsv, .csv, .parquet, .txt"
    )
    data.add_argument("--queries", default=None, help="queries: .jsonl, .tsv, .csv, .parquet, .txt")
    data.add_argument("--qrels", default=None, help="judgements: .tsv (query, doc, score)")
    data.add_argument("--pairs", default=None, help="scored pairs: a table or an STS file")
    target = tune.add_argument_group("what you need (a target and/or limits)")
    target.add_argument(
        "--min-retention",
        type=positive_float,
        default=None,
        help="keep this share of the full model's quality, e.g. 0.97",
    )
    target.add_argument(
        "--max-bytes",
        type=positive_int,
        default=None,
        help="at most N bytes per document: codes + rescoring copy with --budget total "
        "(default), codes only with --budget memory",
    )
    target.add_argument(
        "--budget",
        default="total",
        help="which bytes --max-bytes, the choice and the Pareto front count: total (default: "
        "every byte a document costs, the codes held in memory and the int8 copy kept for "
        "rescoring) or memory (the codes held in memory only)",
    )
    target.add_argument(
        "--min-speed",
        type=positive_float,
        default=None,
        help="at least N texts/s of encoding on this machine",
    )
    _add_run_options(tune)


def _add_run_options(tune: argparse.ArgumentParser) -> None:
    tune.add_argument("--out", required=True, help="model directory to write", type=non_blank)
    tune.add_argument(
        "--work-dir",
        default=None,
        help="embedding cache, sweep results, records and report (default: OUT-tune next to --out)",
        type=non_blank,
    )
    tune.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in --work-dir: finished configurations are kept",
    )
    tune.add_argument(
        "--quiet", action="store_true", help="no progress (a bar, or a line every 30 s)"
    )
    tune.add_argument(
        "--compressors",
        type=comma_list,
        default=DEFAULT_COMPRESSORS,
        help=f"compressors to sweep besides none (default {DEFAULT_COMPRESSORS})",
    )
    tune.add_argument(
        "--time-budget",
        type=positive_float,
        default=900.0,
        help="seconds of fitting and measuring (embedding not counted); compressors that "
        "train a network (fitted last) are tried only within it",
    )
    tune.add_argument(
        "--codes",
        type=comma_list,
        default=None,
        help="codebook codes tried on the encoder's full output, searched asymmetrically "
        f"(default {DEFAULT_CODES} for retrieval or a corpus alone, none for --pairs), or "
        "none",
    )
    tune.add_argument("--batch-size", type=positive_int, default=64)
    tune.add_argument(
        "--backends",
        type=comma_list,
        default="torch",
        help="what runs the transformer, swept as one more axis: torch (default), or e.g. "
        "torch,onnx-int8 (the int8 encoder is crossed with every configuration: twice the work)",
    )


def run_tune(args: argparse.Namespace) -> int:
    from demitasse.tune import SweepSettings, SweepSpace, Target, load_tune_data, parse_methods
    from demitasse.tune import tune as run
    from demitasse.tune.space import parse_backends, parse_codes

    target = Target(args.min_retention, args.max_bytes, args.min_speed, budget=args.budget)
    compressors = parse_methods(args.compressors)
    backends = parse_backends(args.backends)
    codes = None if args.codes is None else parse_codes(args.codes)
    out = Path(args.out)
    work = Path(args.work_dir) if args.work_dir else out.with_name(out.name + "-tune")
    _check_outputs(args, out, work)
    data = load_tune_data(
        beir=args.beir,
        split=args.split,
        corpus=args.corpus,
        queries=args.queries,
        qrels=args.qrels,
        pairs=args.pairs,
    )
    print(f"tune: {args.model} on {data.describe()}", flush=True)
    settings = SweepSettings(
        work_dir=work,
        resume=args.resume,
        batch_size=args.batch_size,
        time_budget=args.time_budget,
        progress=not args.quiet,
    )
    space = SweepSpace(
        methods=compressors, search=data.kind != "pairs", backends=backends, codes=codes
    )
    try:
        result = run(
            args.model, data, target, out=out, settings=settings, static=args.static, space=space
        )
    except KeyboardInterrupt:
        print(
            f"demitasse: tune: finished configurations are kept in {work}; rerun with "
            "--resume to continue",
            file=sys.stderr,
            flush=True,
        )
        raise
    _print_result(result)
    return 0


def _check_outputs(args: argparse.Namespace, out: Path, work: Path) -> None:
    """``--out`` and ``--work-dir``, before the data are read (:func:`check_tune_outputs`),
    against the encoders' folders and the data files."""
    from demitasse.model_files import model_inputs
    from demitasse.tune.run import check_tune_outputs

    given = (args.beir, args.corpus, args.queries, args.qrels, args.pairs)
    inputs = [*model_inputs(args.model), *model_inputs(args.static), *given]
    check_tune_outputs(out, work, inputs, names=("--out", "--work-dir"))


def _print_result(result: Any) -> None:
    from demitasse.tune.choice import budget_label
    from demitasse.tune.output import outcome_table

    needed, budget = result.needed, result.budget
    for speed in result.speeds:
        threads = speed.extra.get("torch_threads")
        print(
            f"encoding speed: {speed.model} layer {speed.layer}: {speed.score:.0f} texts/s "
            f"({threads} torch threads, load {speed.extra.get('load_1m')})"
        )
    print(f"full model: {needed.metric} {result.full.quality:.2f}")
    print(f"target: {needed.describe()}")
    several = len({o.config.encoder for o in result.outcomes}) > 1
    print(
        f"\nPareto front, {needed.metric} against {budget_label(budget)} "
        f"({len(result.outcomes)} configurations):\n"
    )
    if result.left_out:
        print(f"left out by --time-budget: {'; '.join(result.left_out)}\n")
    print(outcome_table(result.front, needed, with_encoder=several, budget=budget))
    chosen, written = result.chosen, result.written
    spent = (
        f"{chosen.index_bytes} index bytes + {chosen.rescore_bytes} rescoring bytes a vector"
        if budget == "memory"
        else chosen.describe_bytes(budget)
    )
    print(
        f"\nchosen: {chosen.config.describe(with_encoder=several)}: {spent}, "
        f"{needed.metric} {chosen.quality:.2f}"
    )
    print(f"model: {written.path} (scored again from disk: {needed.metric} {written.quality:.2f})")
    print(f"records: {result.records}; report: {result.report.html}")
    stages = ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in result.seconds.items())
    print(f"wall time: {result.total_seconds:.0f} s ({stages})")
