"""``embed`` (text corpora → sharded codes) and ``recompress`` (stored vectors → sharded codes):
the bulk, resumable counterparts of ``encode`` and ``transform``, which work in memory on one
file. ``recompress`` is not called ``transform``: that name is the in-memory command's."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from demitasse.cli.arguments import (
    add_text_column_argument,
    non_blank,
    positive_int,
    precision_help_text,
    precision_name,
)
from demitasse.errors import DataError


def add_bulk_parsers(commands: Any) -> None:  # argparse's subparsers action
    embed = commands.add_parser(
        "embed",
        help="texts (globs of .parquet/.jsonl/.txt[.gz]) → sharded Parquet codes, resumable",
    )
    embed.add_argument("model", help="model directory written by 'fit'")
    embed.add_argument(
        "--input",
        required=True,
        help="glob of .parquet, .jsonl(.gz) or .txt(.gz) files, e.g. 'dir/*.jsonl'",
    )
    add_text_column_argument(embed)
    embed.add_argument(
        "--id-column",
        default=None,
        help="id column (default: ids '<file>:<line>' or '<file>:<row>')",
        type=non_blank,
    )
    _common(embed)
    recompress = commands.add_parser(
        "recompress",
        help="stored vectors (globs of .parquet) → sharded codes of a model, resumable",
    )
    recompress.add_argument("model", help="model directory (a vectors-only model will do)")
    recompress.add_argument("--input", required=True, help="glob of .parquet files of vectors")
    recompress.add_argument("--vector-column", default="embedding", help="list column of vectors")
    recompress.add_argument(
        "--id-column",
        default=None,
        help="id column (default: 'id' when the files have one, else ids '<file>:<row>')",
        type=non_blank,
    )
    _common(recompress)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", required=True, help="output directory (shards + manifest.json)", type=non_blank
    )
    parser.add_argument("--resume", action="store_true", help="complete an interrupted run")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress (a bar, or a line every 30 s)"
    )
    parser.add_argument("--engine", choices=("local", "ray"), default="local")
    parser.add_argument("--dim", type=positive_int, default=None, help="default: the model's")
    parser.add_argument(
        "--precision",
        type=precision_name,
        default=None,
        help=precision_help_text("codes to write (default: the model's)"),
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=1024,
        help="records converted and written at a time (memory is bounded by it)",
    )
    parser.add_argument(
        "--shard-rows",
        type=positive_int,
        default=100_000,
        help="records per output shard (the unit of resumption)",
    )
    parser.add_argument(
        "--on-error",
        choices=("stop", "skip"),
        default="stop",
        help="a shard that cannot be read: stop (exit 2), or skip it and record "
        "it in manifest.json",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch threads (local) or per Ray actor (default: torch's; ray: 1)",
    )
    parser.add_argument(
        "--concurrency", type=positive_int, default=1, help="--engine ray: model actors"
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="--engine ray: a cluster to join (default: $RAY_ADDRESS or a local Ray)",
    )


def run_bulk_command(args: argparse.Namespace) -> int:
    from demitasse.bulk import (
        EMBED,
        RECOMPRESS,
        BulkJob,
        Columns,
        RayOptions,
        expand_inputs,
        run_bulk,
    )

    embed = args.command == "embed"
    if embed:
        inputs = expand_inputs(args.input, ("text", "jsonl", "parquet"))
        text_file = next((source for source in inputs if source.kind == "text"), None)
        if args.text_column is not None and text_file is not None:
            raise DataError(
                f"{text_file.path} is a text file (one text a line): --text-column applies to "
                "Parquet and JSON Lines inputs"
            )
        columns = Columns(args.text_column or "text", args.id_column, "texts")
    else:
        inputs = expand_inputs(args.input, ("parquet",))
        given = args.id_column is not None
        # Without --id-column, an "id" column names the rows unless it holds the vectors.
        ids = args.id_column or (None if args.vector_column == "id" else "id")
        columns = Columns(args.vector_column, ids, "vectors", id_required=given)
    job = BulkJob(
        command=EMBED if embed else RECOMPRESS,
        model=args.model,
        inputs=inputs,
        out=Path(args.out),
        columns=columns,
        dim=args.dim,
        precision=args.precision,
        shard_rows=args.shard_rows,
        batch_size=args.batch_size,
        on_error=args.on_error,
    )
    ray = RayOptions(
        address=args.ray_address, concurrency=args.concurrency, threads=args.threads or 1
    )
    manifest = run_bulk(
        job, resume=args.resume, engine=args.engine, ray=ray, threads=args.threads,
        progress=not args.quiet,
    )  # fmt: skip
    _report(manifest, args.out)
    return 0


def _report(manifest: Any, out: str) -> None:
    rows = sum(s["rows"] for s in manifest.shards)
    empty = sum(s.get("empty_texts", 0) for s in manifest.shards)
    print(f"{rows} rows in {len(manifest.shards)} shards under {out} (manifest.json)")
    if empty:
        print(
            f"demitasse: warning: {empty} empty texts were embedded as empty strings",
            file=sys.stderr,
        )
    skipped = [e for e in manifest.errors if e.get("skipped")]
    if skipped:
        print(
            f"demitasse: warning: {len(skipped)} shards could not be read and were skipped "
            f"(first: {skipped[0]['error']}); see {out}/manifest.json",
            file=sys.stderr,
        )
