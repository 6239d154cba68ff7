"""``demitasse eval``'s retrieval options: the data to search and how the codes are searched.

Everything here is checked, and the retrieval files read, before any model loads, so a
mistake costs nothing.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demitasse.errors import DemitasseError

if TYPE_CHECKING:
    from demitasse.cli.given_vectors import CorpusVectors
    from demitasse.data.beir import BeirDataset
    from demitasse.search import Rescoring


@dataclass(frozen=True)
class SearchOptions:
    """What ``eval`` searches and how: the task names, the retrieval sets (None: SciFact
    test), the rescoring factors, per-precision quantiser options of a sweep, and the
    encoder's vectors of the retrieval corpus given with ``--vectors``."""

    tasks: str
    retrieval: list[BeirDataset] | None = None
    factors: list[float] = field(default_factory=list)
    rescore_precision: str | None = None
    quantizer_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    vectors: CorpusVectors | None = None

    @property
    def rescoring(self) -> list[Rescoring]:
        """The sweep's rescoring variants: the encoder's full output, kept at the precision."""
        from demitasse.search import Rescoring

        precision = self.rescore_precision or "int8"
        return [Rescoring(f, precision, source="encoder") for f in self.factors]


def search_options(args: argparse.Namespace) -> SearchOptions:
    """``args``' retrieval data (read now) and search settings, checked against each other."""
    from demitasse.evaluation.suites import parse_task_names

    retrieval = _retrieval_data(args)
    tasks = args.tasks or ("retrieval" if retrieval is not None else "sts")
    names = parse_task_names(tasks)
    given = "--beir" if args.beir else "--corpus/--queries/--qrels"
    if retrieval is not None and "retrieval" not in names:
        raise DemitasseError(f"{given} give retrieval data: add retrieval to --tasks")
    factors = _factors(args.rescore)
    if args.rescore_precision is not None and not factors:
        raise DemitasseError("--rescore-precision needs --rescore F")
    params = {} if args.rotation is None else {"binary": {"rotation": args.rotation}}
    vectors = None if args.vectors is None else _corpus_vectors(args, retrieval)
    return SearchOptions(tasks, retrieval, factors, args.rescore_precision, params, vectors)


def check_sweep(options: SearchOptions, precisions: list[str]) -> None:
    """What a sweep over an encoder needs for its rescoring and rotation options."""
    from demitasse.evaluation.suites import parse_task_names

    if options.factors:
        if "retrieval" not in parse_task_names(options.tasks):
            raise DemitasseError("--rescore applies to retrieval: add retrieval to --tasks")
        if set(precisions) == {"float32"}:
            raise DemitasseError(
                "--rescore rescores codes, not float32 vectors: add int8 or binary to "
                "--precision (or other codes: pq<bytes>, ...)"
            )
    if options.quantizer_params and "binary" not in precisions:
        raise DemitasseError("--rotation applies to binary codes: add binary to --precision")


def rescoring_of_model(options: SearchOptions, folder: str) -> dict[str, Any]:
    """``--rescore F`` on a model directory, as keywords of ``CompressedModel.load``: search
    with factor F instead of its own."""
    if options.quantizer_params:
        raise DemitasseError(
            f"--rotation applies to a sweep over an encoder; the model directory {folder} "
            "carries its own quantiser"
        )
    if not options.factors:
        return {}
    if len(options.factors) > 1:
        raise DemitasseError("a model directory searches one way: give one --rescore factor")
    return {"rescore_factor": options.factors[0], "rescore_precision": options.rescore_precision}


def check_one_layer(options: SearchOptions, layers: list[int] | None) -> None:
    """``--vectors`` are one layer's output: a sweep over several layers cannot use them
    (``layers`` as parsed: None for all, [] for the last)."""
    if options.vectors is not None and (layers is None or len(layers) > 1):
        raise DemitasseError(
            f"--vectors are the encoder's output at one layer; --layers "
            f"{'all' if layers is None else ','.join(map(str, layers))} asks for several: "
            "give the layer they were computed at (default: the last)"
        )


def _corpus_vectors(args: argparse.Namespace, retrieval: list[BeirDataset] | None) -> CorpusVectors:
    """``--vectors``, checked against the one retrieval corpus they must be the vectors of."""
    from demitasse.cli.given_vectors import corpus_vectors

    if retrieval is None:
        raise DemitasseError(
            "--vectors are the encoder's vectors of a retrieval corpus: name it with --beir "
            "DIR or --corpus/--queries/--qrels"
        )
    if len(retrieval) > 1:
        names = ", ".join(dataset.name for dataset in retrieval)
        raise DemitasseError(
            f"--vectors hold one corpus's vectors, but --beir gives {len(retrieval)} data sets "
            f"({names}): evaluate them one at a time"
        )
    source = args.corpus or f"the corpus of {args.beir}"
    return corpus_vectors(args.vectors, args.vector_column, retrieval[0].corpus_texts, source)


def _factors(text: str | None) -> list[float]:
    if text is None:
        return []
    factors = []
    for item in (part.strip() for part in text.split(",")):
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 1:
            raise DemitasseError(f"--rescore takes factors ≥ 1 such as 4 or 2,10; got {item!r}")
        factors.append(value)
    return list(dict.fromkeys(factors))


def _retrieval_data(args: argparse.Namespace) -> list[BeirDataset] | None:
    from demitasse.data.beir import load_beir_folders, load_retrieval

    files = (args.corpus, args.queries, args.qrels)
    if args.beir and any(files):
        raise DemitasseError("give --beir or --corpus/--queries/--qrels, not both")
    if args.split is not None and not args.beir:
        raise DemitasseError("--split applies to --beir folders")
    if args.beir:
        folders = [part.strip() for part in args.beir.split(",") if part.strip()]
        return load_beir_folders(folders, args.split)
    if not any(files):
        return None
    if not all(files):
        raise DemitasseError(
            "--corpus, --queries and --qrels go together (retrieval is scored on judgements)"
        )
    return [load_retrieval(args.corpus, args.queries, args.qrels, name=_files_name(args.corpus))]


def _files_name(corpus: str) -> str:
    """The records' data set name for the user's own files: the corpus file's name, or its
    folder's when the file is just called corpus."""
    path = Path(corpus).expanduser().resolve()
    stem = path.name.split(".")[0]
    return path.parent.name if stem == "corpus" else stem
