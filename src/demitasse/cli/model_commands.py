"""The commands that make and use a model directory: ``fit``, ``encode``, ``transform``,
``export``. Each parses its options, calls the library and says where its output went."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from demitasse.cli.arguments import (
    add_backend_argument,
    add_overwrite_argument,
    add_text_column_argument,
    compressor_help_text,
    non_blank,
    positive_int,
    precision_help_text,
    precision_name,
)
from demitasse.cli.fit_shards import add_shard_options, fit_from_shards, wants_shards
from demitasse.errors import DataError, DemitasseError

if TYPE_CHECKING:
    from demitasse.data import BeirDataset
    from demitasse.evaluation.grid import CompressorSpec
    from demitasse.model import CompressedModel


def add_model_commands(commands: Any) -> None:  # argparse's subparsers action
    """Add ``fit``, ``encode``, ``transform`` and ``export`` to the ``demitasse`` parser."""
    _add_fit_parser(commands)
    _add_encode_parser(commands)
    _add_transform_parser(commands)
    _add_export_parser(commands)


def _add_fit_parser(commands: Any) -> None:
    fit = commands.add_parser(
        "fit",
        help="fit a compressed model (encoder, layer, compressor, quantiser) and save it",
        description="Fit a compressed model on your texts (or on vectors from an embedding "
        "API) and save it as one directory that encode, transform, eval and export take.",
    )
    _add_fit_source_options(fit)
    fit.add_argument("--compressor", default="none",
                     help=compressor_help_text("the compressor (default none)"))  # fmt: skip
    fit.add_argument("--dim", type=positive_int, default=None, help="largest output dimension")
    fit.add_argument("--precision", type=precision_name, default="float32",
                     help=precision_help_text("quantiser to calibrate (float32 and binary "
                                              "need none)"))  # fmt: skip
    fit.add_argument("--normalize", action="store_true", help="L2-normalise float outputs")
    fit.add_argument("--batch-size", type=positive_int, default=64)
    add_backend_argument(fit, saved=False)
    fit.add_argument(
        "--onnx", action=argparse.BooleanOptionalAction, default=None,
        help="write the transformer encoder, cut at --layer, into the model directory as an "
        "ONNX graph with its tokenizer, so that encode runs it without torch (default: on for "
        "a transformer encoder where onnx is installed; all-MiniLM-L6-v2: 91 MB, 2 s)",
    )  # fmt: skip
    _add_fit_supervision_options(fit)
    fit.add_argument(
        "--data-label",
        default=None,
        help="a name for the fit data, recorded with the model (default: the input file's name)",
    )
    fit.add_argument("--out", required=True, help="model directory to write", type=non_blank)


def _add_fit_source_options(fit: argparse.ArgumentParser) -> None:
    source = fit.add_argument_group("what to fit on (texts with an encoder, or vectors)")
    source.add_argument(
        "--model",
        default=None,
        help="encoder: name or directory (default all-MiniLM-L6-v2); with --vectors, the "
        "encoder that made them (omit it for a vectors-only model)",
        type=non_blank,
    )
    source.add_argument("--layer", type=positive_int, default=None, help="keep blocks 1..layer")
    source.add_argument("--texts", default=None, help=".txt, .jsonl, .parquet, .csv, .tsv")
    add_text_column_argument(source)
    source.add_argument("--vectors", default=None, help="vectors: .npy or .parquet, or Parquet "
                        "shards, a glob ('dir/*.parquet') or a directory")  # fmt: skip
    source.add_argument("--vector-column", default="embedding",
                        help="Parquet column of --vectors")  # fmt: skip
    add_shard_options(source)


def _add_fit_supervision_options(fit: argparse.ArgumentParser) -> None:
    supervision = fit.add_argument_group("supervision (learned compressors)")
    supervision.add_argument("--pairs", default=None,
                             help="scored pairs: a table or an STS file")  # fmt: skip
    supervision.add_argument("--beir", default=None, help="BEIR folder (queries + qrels)")
    supervision.add_argument("--split", default="train", help="qrels split of --beir")
    supervision.add_argument("--queries", default=None, help="queries.jsonl (_id, text)")
    supervision.add_argument("--corpus", default=None, help="corpus.jsonl (_id, text, title)")
    supervision.add_argument("--qrels", default=None, help="qrels .tsv (query, doc, score)")


def _add_encode_parser(commands: Any) -> None:
    encode = commands.add_parser("encode", help="texts → vectors or codes with a model")
    encode.add_argument("model", help="model directory written by 'fit'")
    encode.add_argument("--input", required=True, help=".txt, .jsonl, .parquet, .csv, .tsv")
    add_text_column_argument(encode)
    _output_options(encode)
    encode.add_argument("--batch-size", type=positive_int, default=None)
    add_backend_argument(encode)


def _add_transform_parser(commands: Any) -> None:
    transform = commands.add_parser("transform", help="vectors → compressed vectors or codes")
    transform.add_argument("model", help="model directory (or a saved compressor)")
    transform.add_argument("--input", required=True, help="vectors: .npy or Parquet list column")
    transform.add_argument("--vector-column", default="embedding", help="Parquet column")
    _output_options(transform)


def _add_export_parser(commands: Any) -> None:
    export = commands.add_parser(
        "export",
        help="write a model for sentence-transformers (or model2vec) to load",
        description="MODEL is a model directory written by 'fit' (it carries its layer cut, "
        "compressor and quantiser), or an encoder name or directory to cut with --layer/--dim.",
    )
    export.add_argument("model", help="model directory, or encoder name / path")
    export.add_argument("--format", default="sentence-transformers",
                        choices=("sentence-transformers", "model2vec", "onnx"),
                        help="onnx: the model directory again, in another folder, carrying "
                        "its transformer encoder as an ONNX graph (encode runs it without "
                        "torch)")  # fmt: skip
    export.add_argument(
        "--layer", type=positive_int, default=None, help="encoder only: keep blocks 1..L"
    )
    export.add_argument("--dim", type=positive_int, default=None, help="default output width")
    export.add_argument("--out", required=True, help="directory to write", type=non_blank)


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", required=True, help=".npy or .parquet file to write", type=non_blank
    )
    add_overwrite_argument(parser)
    parser.add_argument(
        "--dim", type=positive_int, default=None, help="output width (default: full)"
    )
    parser.add_argument("--precision", type=precision_name, default=None,
                        help=precision_help_text("codes to write (default: the model's "
                                                 "own precision)"))  # fmt: skip
    parser.add_argument("--normalize", action="store_true", default=None,
                        help="L2-normalise float vectors")  # fmt: skip


# ---- fit -------------------------------------------------------------------------------------


def run_fit(args: argparse.Namespace) -> int:
    from demitasse.data import load_embeddings, read_texts
    from demitasse.model import CompressedModel, check_model_target

    if (args.texts is None) == (args.vectors is None):
        raise DemitasseError("give --texts (with --model) or --vectors, one of the two")
    if args.vectors is not None and args.layer is not None and args.model is None:
        raise DemitasseError("--layer needs --model: the encoder whose layer made --vectors")
    # Mistakes in the options and the output fail now, not after the encoder loads.
    spec = _compressor_spec(args.compressor, args.dim)
    check_model_target(args.out, inputs=_fit_inputs(args))
    if args.vectors is None and (args.sample is not None or args.engine != "local"):
        raise DemitasseError("--sample and --engine apply to --vectors")
    if args.onnx and args.vectors is not None and args.model is None:
        raise DemitasseError("--onnx writes the encoder's graph; a vectors-only model has none")
    if args.vectors is not None and wants_shards(args):
        model = fit_from_shards(args, spec, _supervision(args))
        return _saved(model, args, args.data_label or Path(str(args.vectors)).name)
    texts_or_vectors: Any
    if args.texts is not None:
        texts_or_vectors = read_texts(args.texts, column=args.text_column)
    else:
        texts_or_vectors = load_embeddings(args.vectors, column=args.vector_column)
    supervision = _supervision(args)
    from demitasse.encoders import DEFAULT_MODEL

    # With --vectors, --model names the encoder that made them (so the model can also embed
    # texts, be evaluated and exported); without it the model is vectors-only.
    encoder = args.model if args.vectors is not None else (args.model or DEFAULT_MODEL)
    model = CompressedModel(
        encoder, layer=args.layer, precision=args.precision, normalize=args.normalize,
        batch_size=args.batch_size, backend=args.backend,
    )  # fmt: skip
    width = texts_or_vectors.shape[1] if args.vectors is not None else model.load_encoder().dim
    model.compressor = None if spec is None else spec.build(width, args.dim)
    if args.onnx:
        _wants_graph(model, True)  # a static encoder fails now, not after the fit
    label = args.data_label or Path(args.texts or args.vectors).name
    if args.texts is not None:
        model.fit(texts_or_vectors, data_label=label, **supervision)
    else:
        model.fit(vectors=texts_or_vectors, data_label=label, **supervision)
    return _saved(model, args, label)


def _fit_inputs(args: argparse.Namespace) -> list[str]:
    """Every path ``fit`` reads: the encoder, the texts or vectors (a glob's shards, which no
    single path names), the supervision files."""
    import glob

    from demitasse.model_files import model_inputs

    vectors = [] if args.vectors is None else [str(args.vectors)]
    if vectors and glob.has_magic(vectors[0]):
        vectors = glob.glob(vectors[0])  # noqa: PTH207  (as vector_shards expands it)
    given = (args.texts, args.pairs, args.beir, args.queries, args.corpus, args.qrels)
    return [*model_inputs(args.model), *vectors, *(path for path in given if path)]


def _saved(model: CompressedModel, args: argparse.Namespace, label: str) -> int:
    onnx = _wants_graph(model, getattr(args, "onnx", None))
    path = model.save(args.out, onnx=onnx)
    info = model.fit_info or {}
    graph = ""
    if onnx:
        size = sum(f.stat().st_size for f in (path / "encoder").iterdir()) / 1e6
        graph = f"; its encoder as an ONNX graph in {path / 'encoder'} ({size:.0f} MB)"
    print(
        f"saved {model!r} to {args.out}: {model.recipe.input_dim} → {model.output_dim} dims, "
        f"precisions {', '.join(model.precisions)}, fitted on {info.get('n_samples')} "
        f"{info.get('source')} of {label} in {info.get('seconds', 0):.1f} s{graph}"
    )
    return 0


def _wants_graph(model: CompressedModel, asked: bool | None) -> bool:
    """Whether ``fit`` writes the encoder's ONNX graph: ``--onnx`` (a one-line error where it
    cannot), ``--no-onnx``, or by default for a transformer encoder where onnx is installed
    (the ``train`` extra; said in one line where it is not)."""
    if asked is False:
        return False
    if model.recipe.encoder is not None:
        model.load_encoder()  # its kind is known once it loads (fit loads it anyway)
    kind = model.recipe.encoder_kind
    if kind != "transformer":
        if asked:
            raise DemitasseError(f"--onnx writes a transformer encoder's graph; this model's "
                                 f"encoder is {kind or 'none (vectors only)'}")  # fmt: skip
        return False
    from demitasse.encoders.backends import check_installed

    try:
        check_installed("onnx")
    except DemitasseError as exc:
        if asked:
            raise
        print(f"note: no ONNX graph written ({exc}); encode will need torch", file=sys.stderr)
        return False
    return True


def _compressor_spec(name: str, dim: int | None) -> CompressorSpec | None:
    """The one compressor ``--compressor`` names (None for ``none``), checked with ``--dim``."""
    from demitasse.cli.specs import parse_compressor_specs

    specs = parse_compressor_specs(name)
    if len(specs) != 1:
        raise DemitasseError("--compressor takes one compressor, e.g. pca or pca:whiten=true")
    if specs[0].method is None:
        if dim is not None:
            raise DemitasseError("--dim needs a compressor (--compressor truncate, pca, ...)")
        return None
    return specs[0]


def _supervision(args: argparse.Namespace) -> dict[str, Any]:
    from demitasse.data import load_beir, load_retrieval, load_sts_path

    supervision: dict[str, Any] = {}
    retrieval_files = (args.queries, args.corpus, args.qrels)
    wants_texts = args.pairs or args.beir or any(retrieval_files)
    if wants_texts and args.vectors is not None and args.model is None:
        raise DemitasseError(
            "supervision files hold texts, and a vectors-only model has no encoder to embed "
            "them; name the encoder that made --vectors with --model"
        )
    if args.pairs:
        pairs = load_sts_path(args.pairs)
        supervision.update(pairs=(pairs.sentences1, pairs.sentences2), scores=pairs.scores)
    if args.beir and any(retrieval_files):
        raise DemitasseError("give --beir or --queries/--corpus/--qrels, not both")
    if any(retrieval_files) and not all(retrieval_files):
        raise DemitasseError("--queries, --corpus and --qrels go together")
    dataset = None
    if args.beir:
        dataset = load_beir(args.beir, split=args.split)
    elif all(retrieval_files):
        dataset = load_retrieval(args.corpus, args.queries, args.qrels)
    if dataset is not None:
        supervision.update(_relevant_pairs(dataset))
    return supervision


def _relevant_pairs(dataset: BeirDataset) -> dict[str, Any]:
    """Every judged-relevant (query, document) pair, with its grade."""
    query_text = dict(zip(dataset.query_ids, dataset.query_texts, strict=True))
    doc_text = dict(zip(dataset.corpus_ids, dataset.corpus_texts, strict=True))
    queries, documents, grades = [], [], []
    for query_id, judged in dataset.qrels.items():
        for doc_id, grade in judged.items():
            if grade > 0:
                queries.append(query_text[query_id])
                documents.append(doc_text[doc_id])
                grades.append(float(grade))
    if not queries:
        raise DataError(f"{dataset.name}: no relevant (score > 0) query-document pairs")
    return {"queries": queries, "documents": documents, "relevance": grades}


# ---- encode / transform ----------------------------------------------------------------------


def run_encode(args: argparse.Namespace) -> int:
    from demitasse.data import check_embeddings_target, read_texts
    from demitasse.model import open_model
    from demitasse.model_files import model_inputs

    # A refused output name must not cost an encoding run.
    inputs = (args.input, *model_inputs(args.model))
    check_embeddings_target(args.out, overwrite=args.overwrite, inputs=inputs)
    model = open_model(args.model, backend=args.backend)  # through the embedding cache
    model.bytes_per_vector(args.dim, args.precision)  # bad dim / precision: fail before work
    texts = read_texts(args.input, column=args.text_column, aligned=True)
    if args.batch_size is not None:
        model.settings.batch_size = args.batch_size
    codes = model.encode(texts, dim=args.dim, precision=args.precision, normalize=args.normalize)
    return _write(model, codes, args)


def run_transform(args: argparse.Namespace) -> int:
    from demitasse.data import check_embeddings_target, load_embeddings
    from demitasse.model import open_model
    from demitasse.model_files import model_inputs

    inputs = (args.input, *model_inputs(args.model))
    check_embeddings_target(args.out, overwrite=args.overwrite, inputs=inputs)
    model = open_model(args.model, cache=False)
    model.bytes_per_vector(args.dim, args.precision)
    vectors = load_embeddings(args.input, column=args.vector_column)
    codes = model.transform(
        vectors, dim=args.dim, precision=args.precision, normalize=args.normalize
    )
    return _write(model, codes, args)


def _write(model: CompressedModel, codes: Any, args: argparse.Namespace) -> int:
    from demitasse.data import save_embeddings

    precision = args.precision or model.recipe.precision
    provenance = {
        "model_dir": str(Path(args.model).resolve()),
        "model": model.recipe.name,
        "layer": model.recipe.layer,
        "method": model.recipe.compressor,
        "dim": args.dim or model.output_dim,
        "precision": precision,
        "backend": model.settings.backend,
        "fit": model.fit_info,
    }
    metadata = {"demitasse": json.dumps(provenance)}
    save_embeddings(args.out, codes, metadata=metadata, overwrite=args.overwrite)
    what = "float32 vectors" if codes.dtype == np.float32 else f"{precision} codes"
    shape = " × ".join(map(str, codes.shape))
    print(f"wrote {shape} {what} to {args.out}")
    return 0


# ---- export ----------------------------------------------------------------------------------


def run_export(args: argparse.Namespace) -> int:
    from demitasse.export import export_model, export_sentence_transformer
    from demitasse.io import check_not_input
    from demitasse.model import CompressedModel, is_model_dir
    from demitasse.model_files import model_inputs

    # As every command's output: never what it reads (``export M --format onnx --out M`` would
    # swap the user's model for a copy), the model's encoder folder included; before the load,
    # which writes the hashes of the files it reads.
    check_not_input(args.out, model_inputs(args.model))
    if args.format == "onnx" and not is_model_dir(args.model):
        raise DemitasseError("--format onnx takes a model directory written by 'fit'")
    if is_model_dir(args.model):
        if args.layer is not None:
            raise DemitasseError("--layer applies to an encoder; a model directory has its cut")
        model = CompressedModel.load(args.model, cache=False)
        out = export_model(model, args.out, format=args.format, dim=args.dim)
    elif args.format == "model2vec":
        from demitasse.export import export_model2vec

        out = export_model2vec(args.model, args.out)
    else:
        out = export_sentence_transformer(args.model, args.out, layer=args.layer, dim=args.dim)
    print(out, file=sys.stdout)
    return 0
