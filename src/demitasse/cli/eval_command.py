"""``eval`` (an encoder sweep, or a model directory scored exactly as fitted), ``report``
(results files → Markdown + one HTML page) and ``demo`` (a fixed, small sweep). Each parses its
options, calls the library and says where its results went."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demitasse.cli.arguments import (
    add_backend_argument,
    comma_list,
    compressor_help_text,
    non_blank,
    positive_int,
    precision_help_text,
)
from demitasse.cli.given_vectors import add_vectors_arguments
from demitasse.compress.binary import ROTATIONS as BINARY_ROTATIONS
from demitasse.errors import DemitasseError, require_library
from demitasse.io import atomic_directory, check_directory_target, check_not_input
from demitasse.search import RESCORE_PRECISIONS

if TYPE_CHECKING:
    from demitasse.cli.eval_options import SearchOptions
    from demitasse.cli.given_vectors import CorpusVectors
    from demitasse.evaluation.grid import CompressorSpec
    from demitasse.evaluation.records import ResultRecord
    from demitasse.evaluation.tasks import Task

DEFAULT_DIMS = "384,256,128,64,32,16,8"
STSB_TRAIN = "stsb-train"
ENCODE_SPEED_TEXTS = 2000
RESULTS_KIND = "evaluation results"


# ---- the parsers -----------------------------------------------------------------------------


def add_eval_parser(commands: Any) -> None:  # argparse's subparsers action
    """``eval``: an encoder sweep, or a model directory scored as fitted."""
    evaluate = commands.add_parser("eval", help="evaluate encoder × compressor × dim × precision")
    evaluate.add_argument(
        "--model",
        default=None,
        help="a model directory written by 'fit' (evaluated exactly as fitted), or an encoder "
        "name or directory to sweep with --layers/--compressor/--dims/--precision",
        type=non_blank,
    )
    evaluate.add_argument(
        "--layers", type=comma_list, default=None, help="'all', 'last' (default) or e.g. 1,3,6"
    )
    evaluate.add_argument(
        "--compressor",
        type=comma_list,
        default=None,
        help=compressor_help_text("comma-separated compressors (default none)"),
    )
    evaluate.add_argument("--dims", type=comma_list, default=None,
                          help=f"default {DEFAULT_DIMS}; a model directory: its width")  # fmt: skip
    evaluate.add_argument(
        "--fit-data",
        default=None,
        help=f"text file to fit compressors on, or '{STSB_TRAIN}' (default: the STS-B train "
        "sentences that are in no STS test or dev split)",
        type=non_blank,
    )
    evaluate.add_argument(
        "--precision",
        type=comma_list,
        default=None,
        help=precision_help_text("comma-separated precisions (default float32; a model "
                                 "directory: the precision it was fitted for)"),
    )  # fmt: skip
    evaluate.add_argument(
        "--tasks",
        type=comma_list,
        default=None,
        help="sts,classification,retrieval,clustering,translation,efficiency or 'all' "
        "(default: sts; retrieval with --beir or --corpus)",
    )
    evaluate.add_argument(
        "--datasets",
        type=comma_list,
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
    group.add_argument("--beir", type=comma_list, default=None, help="BEIR folders, DIR[,DIR...]")
    group.add_argument(
        "--split",
        default=None,
        type=non_blank,
        help="qrels split of the --beir folders (default: test, else dev, as for MS MARCO)",
    )
    group.add_argument("--corpus", default=None, help="documents: .jsonl/.tsv/.csv/.parquet")
    group.add_argument("--queries", default=None, help="queries: .jsonl/.tsv/.csv/.parquet")
    group.add_argument("--qrels", default=None, help="judgements: .tsv (query, doc, score), ...")
    group.add_argument(
        "--rescore",
        type=comma_list,
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
        choices=BINARY_ROTATIONS,
        default=None,
        help="rotate vectors before binarising (binary precision of a sweep; default none)",
    )
    add_vectors_arguments(group, "--corpus or --beir's corpus.jsonl")


def add_report_parser(commands: Any) -> None:
    """``report``: results files → Markdown + one HTML page."""
    report = commands.add_parser("report", help="render results as Markdown + one HTML page")
    report.add_argument("results", nargs="+", help="results.json files or folders holding one")
    report.add_argument("--out", required=True, help="report directory", type=non_blank)
    report.add_argument("--title", default="demitasse report")


def add_demo_parser(commands: Any) -> None:
    """``demo``: truncation vs PCA at float32 and int8 on STS."""
    demo = commands.add_parser("demo", help="truncation vs PCA at float32 and int8 on STS")
    demo.add_argument("--model", default=None, type=non_blank)
    _common(demo)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help="shared data folder ($DEMITASSE_DATA)")
    parser.add_argument("--out", default=None, help="output directory", type=non_blank)
    parser.add_argument("--batch-size", type=positive_int, default=64)


# ---- the commands ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sweep:
    """A sweep over an encoder as typed: each axis a comma-separated string, checked when the
    sweep runs (before the encoder loads)."""

    model: str | None
    out: Path
    data_dir: str | None
    batch_size: int
    layers: str = "last"
    compressors: str = "none"
    dims: str = DEFAULT_DIMS
    precisions: str = "float32"
    fit_data: str = STSB_TRAIN
    tasks: str = "sts"
    datasets: str = "all"
    limit: int | None = None
    backend: str | None = None


def run_eval(args: argparse.Namespace) -> int:
    from demitasse.cli.eval_options import search_options
    from demitasse.model import is_model_dir

    _require_plots("demitasse eval")
    out = Path(args.out or "demitasse-results")
    # Before the retrieval data and --vectors are read: a refused output costs nothing.
    _check_results_target(out, _eval_inputs(args), args.data_dir)
    search = search_options(args)
    if args.model is not None and is_model_dir(args.model):
        _evaluate_model_dir(args, search, out)
        return 0
    sweep = Sweep(
        model=args.model,
        out=out,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        layers=args.layers or "last",
        compressors=args.compressor or "none",
        dims=args.dims or DEFAULT_DIMS,
        precisions=args.precision or "float32",
        fit_data=args.fit_data or STSB_TRAIN,
        tasks=search.tasks,
        datasets=args.datasets,
        limit=args.limit,
        backend=args.backend,
    )
    _evaluate_sweep(sweep, search)
    return 0


def _eval_inputs(args: argparse.Namespace) -> list[str]:
    """Every path ``eval`` reads: the model (and its encoder folder), the fit texts, STS files
    and folders, the retrieval data and vectors (names of data sets name no path, and are
    passed over); the data folder is checked apart (:func:`_check_results_target`)."""
    from demitasse.model_files import model_inputs

    listed = [part.strip() for value in (args.datasets, args.beir) if value
              for part in value.split(",")]  # fmt: skip
    fit_data = None if args.fit_data == STSB_TRAIN else args.fit_data
    single = (fit_data, args.corpus, args.queries, args.qrels, args.vectors)
    return [*model_inputs(args.model), *listed, *(path for path in single if path)]


def _check_results_target(out: Path, inputs: list[str], data_dir: str | None) -> None:
    """The results folder, before any work: none of ``inputs``, inside or holding one. The
    shared data folder it may lie inside (its data sets are named files and folders, which a
    new folder beside them leaves as they were), but neither be nor hold."""
    check_not_input(out, [data_dir], nested=True)
    check_directory_target(out, kind=RESULTS_KIND, inputs=inputs)


def run_report(args: argparse.Namespace) -> int:
    from demitasse.evaluation.records import read_records
    from demitasse.report import render_report
    from demitasse.report.render import REPORT_KIND

    _require_plots("demitasse report")
    # Never one of the results it renders, nor a folder holding one; inside one it may be:
    # 'eval' writes its report there, a folder of its own the evaluation's marker allows.
    check_directory_target(args.out, kind=REPORT_KIND, inputs=args.results, nested=True)
    records = [record for path in args.results for record in read_records(path)]
    paths = render_report(records, args.out, title=args.title)
    print(f"report: {paths.html} (one self-contained page) and {paths.markdown}")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from demitasse.model_files import model_inputs

    _require_plots("demitasse demo")
    out = Path(args.out or "demo-results")
    _check_results_target(out, model_inputs(args.model), args.data_dir)
    print(
        "demitasse demo: all-MiniLM-L6-v2 on STS12-16, STS-B and SICK-R; PCA fitted on STS-B "
        "train sentences; truncation vs PCA at float32 and int8 (cached after the first run)",
        flush=True,
    )
    sweep = Sweep(
        model=args.model,
        out=out,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        compressors="truncate,pca",
        precisions="float32,int8",
    )
    _evaluate_sweep(sweep)
    return 0


def _require_plots(command: str) -> None:
    """Fail before any work where the report's plots cannot be drawn."""
    require_library("matplotlib", f"{command} (its report's plots)", extra="eval")


# ---- a sweep over an encoder -----------------------------------------------------------------


def _evaluate_sweep(sweep: Sweep, search: SearchOptions | None = None) -> None:
    from demitasse.cli.eval_options import check_one_layer
    from demitasse.cli.specs import parse_compressor_specs, parse_int_list, parse_precisions
    from demitasse.data import STSB_FIT_DATA
    from demitasse.encoders import DEFAULT_MODEL
    from demitasse.evaluation.grid import evaluate_grid
    from demitasse.evaluation.suites import parse_task_names
    from demitasse.loading import load_encoder

    # Parse everything and read the data before the slow model load, so mistakes fail fast
    # (the commands checked the output first).
    specs = parse_compressor_specs(sweep.compressors)
    dims = parse_int_list(sweep.dims, "--dims")
    precisions = parse_precisions(sweep.precisions)
    layers = _parse_layers(sweep.layers)
    given = None if search is None else search.vectors
    if search is not None:
        check_one_layer(search, layers)
    task_names = parse_task_names(sweep.tasks)
    tasks = _sweep_tasks(task_names, sweep, precisions, search)
    fit_texts = _fit_texts(sweep.fit_data, sweep.data_dir)
    fit_name = STSB_FIT_DATA if sweep.fit_data == STSB_TRAIN else Path(sweep.fit_data).name
    backend = sweep.backend or "torch"
    encoder = load_encoder(sweep.model or DEFAULT_MODEL, backend=backend)
    chosen = list(range(1, encoder.num_layers + 1)) if layers is None else layers
    if given is not None:
        encoder = given.encoder(encoder, chosen[0] if chosen else None)
    started = time.perf_counter()
    records = evaluate_grid(
        encoder, tasks, specs=specs, dims=dims, precisions=precisions, layers=chosen,
        fit_texts=fit_texts, fit_data=fit_name, batch_size=sweep.batch_size,
        progress=sys.stderr.isatty() or bool(os.environ.get("DEMITASSE_PROGRESS")),
        quantizer_params=search.quantizer_params if search else None,
    )  # fmt: skip
    if given is not None:
        given.tag(records)
    if "efficiency" in task_names:
        layers_timed = chosen or [encoder.num_layers]
        records += _speed_records(sweep, layers_timed, specs, dims, fit_texts, fit_name)
    _tag_backend(records, backend)
    _write_results(records, sweep.out, encoder.name, started)


def _parse_layers(text: str) -> list[int] | None:
    """Layers to evaluate; ``None`` means all, ``[]`` the last one."""
    from demitasse.cli.specs import parse_int_list

    if text == "all":
        return None
    if text == "last":
        return []
    return parse_int_list(text, "--layers")


def _fit_texts(spec: str, data_dir: str | None) -> list[str]:
    from demitasse.data import read_texts, stsb_fit_sentences

    if spec == STSB_TRAIN:
        return stsb_fit_sentences(data_dir)
    return read_texts(spec)


def _sweep_tasks(
    task_names: list[str], sweep: Sweep, precisions: list[str], search: SearchOptions | None
) -> list[Task]:
    """The sweep's tasks, with the retrieval data and rescoring variants of ``search``."""
    from demitasse.cli.eval_options import check_sweep
    from demitasse.evaluation.suites import build_tasks

    if search is None:
        return build_tasks(
            task_names, sweep.data_dir, sts_datasets=sweep.datasets, limit=sweep.limit
        )
    check_sweep(search, precisions)
    return build_tasks(
        task_names, sweep.data_dir, sts_datasets=sweep.datasets, limit=sweep.limit,
        retrieval=search.retrieval, rescoring=search.rescoring,
    )  # fmt: skip


def _speed_records(
    sweep: Sweep,
    layers: list[int],
    specs: Sequence[CompressorSpec],
    dims: list[int],
    fit_texts: list[str],
    fit_name: str,
) -> list[ResultRecord]:
    """Encode throughput per layer cut and transform throughput per compressor and dim."""
    from demitasse.encoders import DEFAULT_MODEL
    from demitasse.evaluation.efficiency import (
        measure_encode_throughput,
        measure_transform_throughput,
    )
    from demitasse.loading import load_encoder

    backend = sweep.backend or "torch"
    encoder = load_encoder(sweep.model or DEFAULT_MODEL, cache=False, backend=backend)  # timings
    sample = fit_texts[:ENCODE_SPEED_TEXTS]
    batch_size = sweep.batch_size
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


# ---- a model directory, scored as fitted -----------------------------------------------------


def _evaluate_model_dir(args: argparse.Namespace, search: SearchOptions, out: Path) -> None:
    """``eval --model DIR``: score exactly the fitted model saved in DIR."""
    from demitasse.cli.eval_options import rescoring_of_model
    from demitasse.cli.given_vectors import saved_width
    from demitasse.cli.specs import parse_int_list, parse_precisions
    from demitasse.evaluation.grid import evaluate_model
    from demitasse.evaluation.suites import build_tasks, parse_task_names
    from demitasse.model import CompressedModel

    _refuse_sweep_options(args)
    task_names = parse_task_names(search.tasks)
    if "efficiency" in task_names:
        raise DemitasseError("--tasks efficiency takes an encoder name, not a model directory")
    if search.vectors is not None:  # before the load, which writes its files' hashes
        search.vectors.check_width(saved_width(args.model), args.model)
    model = CompressedModel.load(
        args.model, backend=args.backend, **rescoring_of_model(search, args.model)
    )
    dims = parse_int_list(args.dims, "--dims") if args.dims else None
    precisions = parse_precisions(args.precision) if args.precision else None
    requested: list[int | None] = list(dims) if dims else [None]
    for dim in requested:
        for precision in [*precisions] if precisions else [None]:
            model.bytes_per_vector(dim, precision)  # fail on a bad request before any work
    tasks = build_tasks(
        task_names, args.data_dir, sts_datasets=args.datasets, limit=args.limit,
        retrieval=search.retrieval,
    )  # fmt: skip
    model.settings.batch_size = args.batch_size
    started = time.perf_counter()
    records = evaluate_model(
        model, tasks, dims=dims, precisions=precisions, extra={"model_dir": args.model},
        vectors_of=None if search.vectors is None else search.vectors.vectors_of(model),
    )  # fmt: skip
    if search.vectors is not None:
        search.vectors.tag(records)
    _tag_backend(records, model.settings.backend)
    reference = _full_model_records(model, tasks, args, search.vectors)
    _write_results([*records, *reference], out, model.recipe.name, started)
    _print_retention(records, reference)


def _refuse_sweep_options(args: argparse.Namespace) -> None:
    """A model directory carries what a sweep's options would choose."""
    sweep_only = {"--compressor": args.compressor, "--fit-data": args.fit_data,
                  "--layers": args.layers}  # fmt: skip
    given = [flag for flag, value in sweep_only.items() if value is not None]
    if given:
        raise DemitasseError(
            f"{given[0]} applies to a sweep over an encoder; the model directory {args.model} "
            "carries its own layer, compressor and fit"
        )


#: ``extra["reference"]`` of the records of the full model an evaluated model is compared with.
FULL_MODEL = "full model"


def _full_model_records(
    model: Any, tasks: list[Any], args: argparse.Namespace, given: CorpusVectors | None
) -> list[ResultRecord]:
    """The same tasks scored by the model's encoder as published (every layer, no compressor,
    float32): what the model's retention is measured against. None for a vectors-only model."""
    from demitasse.evaluation.grid import evaluate_model
    from demitasse.model import open_model

    if model.recipe.encoder is None:
        return []
    full = open_model(model.recipe.encoder, backend=args.backend)
    full.settings.batch_size = args.batch_size
    # The given vectors are the model's encoder output: the full model's too only at the
    # same layer and backend; otherwise it encodes the corpus itself.
    given = given if _same_output(model, full) else None
    records = evaluate_model(
        full, tasks, extra={"model_dir": args.model, "reference": FULL_MODEL},
        vectors_of=None if given is None else given.vectors_of(full),
    )  # fmt: skip
    if given is not None:
        given.tag(records)
    _tag_backend(records, full.settings.backend)
    return records


def _same_output(model: Any, full: Any) -> bool:
    """Whether ``full``'s encoder output is ``model``'s: the last layer, on the same backend."""
    last = model.load_encoder().num_layers
    return model.recipe.layer in (None, last) and model.settings.backend == full.settings.backend


def _print_retention(records: list[ResultRecord], reference: list[ResultRecord]) -> None:
    """Each score beside the full model's and the share of it kept, and the bytes a document
    costs with their split (codes + rescoring copy)."""
    full = {(r.task, r.dataset, r.metric): r.score for r in reference}
    lines = []
    for r in records:
        whole = full.get((r.task, r.dataset, r.metric))
        if whole is None or r.task == "efficiency":
            continue
        kept = f"{100 * r.score / whole:.1f} %" if whole else "n/a"
        extra = r.extra or {}
        split = ""
        if "index_bytes" in extra:
            split = f" ({extra['index_bytes']} codes + {extra['store_bytes']} rescoring copy)"
        lines.append(
            f"{r.task} {r.dataset} {r.metric} at {r.dim} dims {r.precision}: {r.score:.2f}, "
            f"full model {whole:.2f} ({kept} kept); {r.bytes_per_vector} bytes a document{split}"
        )
    if lines:
        print("\nagainst the full model (its encoder as published, float32):\n" + "\n".join(lines))


# ---- results ---------------------------------------------------------------------------------


def _tag_backend(records: list[ResultRecord], backend: str) -> None:
    """Records of an ONNX backend say so (torch's stay as they always were)."""
    if backend != "torch":
        for record in records:
            record.extra = {**(record.extra or {}), "backend": backend}


def _write_results(records: list[ResultRecord], out: Path, title: str, started: float) -> None:
    """results.json, a table per task on stdout, the STS plot and the HTML report."""
    from demitasse.evaluation.records import write_records
    from demitasse.report import plot_sts_vs_dim, render_report, task_table

    if not records:
        raise DemitasseError("nothing was evaluated: no configuration fits the model's width")
    # results.json, the plot and the report are one set, replaced together or not at all.
    with atomic_directory(out, kind=RESULTS_KIND) as tmp:
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
