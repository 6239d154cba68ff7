"""``demitasse index`` and ``demitasse search``: a model's documents in a LanceDB table, and
queries searched through the same model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from demitasse.cli.arguments import (
    add_text_column_argument,
    non_blank,
    positive_float,
    positive_int,
    precision_help_text,
    precision_name,
)
from demitasse.cli.given_vectors import (
    VectorsFile,
    add_vectors_arguments,
    given_vectors,
    saved_width,
)
from demitasse.errors import DataError

if TYPE_CHECKING:
    from demitasse.store import Hit

#: Characters of a document's text shown per hit by ``search`` without ``--json``.
SHOWN_CHARS = 80


def add_store_commands(commands: Any) -> None:  # argparse's subparsers action
    """Add ``index`` and ``search`` to the ``demitasse`` parser."""
    from demitasse.store.lance import DEFAULT_TABLE

    index = commands.add_parser(
        "index",
        help="encode documents with a model into a LanceDB table (codes + rescoring vectors)",
        description="Encode documents with a model and write them into a LanceDB table: ids, "
        "texts, the model's codes, its rescoring vectors and its provenance. One run is one "
        "commit: an interrupted run leaves the table as it was.",
    )
    index.add_argument("model", help="model directory written by 'fit' or 'tune'")
    index.add_argument("--input", required=True,
                       help="documents: BEIR .jsonl (_id, title, text), .parquet, .csv, .tsv "
                       "(id, text, optional title) or .txt (one per line)")  # fmt: skip
    index.add_argument("--db", required=True, help="LanceDB database directory")
    index.add_argument("--table", default=DEFAULT_TABLE, help=f"default {DEFAULT_TABLE}")
    index.add_argument(
        "--id-column", default=None, help="read ids from this column instead", type=non_blank
    )
    add_text_column_argument(index, default="title + text")
    index.add_argument("--dim", type=positive_int, default=None, help="default: the model's")
    index.add_argument("--precision", type=precision_name, default=None,
                       help=precision_help_text("codes of the index (default: the model's "
                                                "precision)"))  # fmt: skip
    index.add_argument("--no-text", action="store_true", help="do not keep the texts")
    index.add_argument("--skip-existing", action="store_true",
                       help="add only the ids the table does not hold yet")  # fmt: skip
    index.add_argument("--batch-size", type=positive_int, default=1024,
                       help="texts encoded and streamed to LanceDB at a time (all of them are "
                       "committed at once)")  # fmt: skip
    add_vectors_arguments(index, "--input")

    search = commands.add_parser(
        "search",
        help="search a LanceDB table written by 'index' with the same model",
        description="Encode queries with the model that indexed the table and search it, "
        "rescoring as the model does. A model of different provenance is refused.",
    )
    search.add_argument("model", help="the model directory the table was indexed with")
    search.add_argument("--db", required=True, help="LanceDB database directory")
    search.add_argument("--table", default=DEFAULT_TABLE, help=f"default {DEFAULT_TABLE}")
    search.add_argument("--query", action="append", required=True,
                        help="query text (repeat for several)")  # fmt: skip
    search.add_argument("--k", type=positive_int, default=10, help="hits per query")
    search.add_argument("--rescore", type=positive_float, default=None,
                        help="rescoring factor F (default: the model's)")  # fmt: skip
    search.add_argument("--json", action="store_true", help="print one JSON object per query")


def run_index(args: argparse.Namespace) -> int:
    from demitasse.io import check_not_input
    from demitasse.model import open_model
    from demitasse.model_files import model_inputs
    from demitasse.store import LanceStore

    # A database is appended to: it is an output, never one of the inputs, inside or holding
    # one; then only a folder demitasse created is written into (before any work).
    check_not_input(args.db, [*model_inputs(args.model), args.input, args.vectors])
    store = LanceStore(args.db, args.table)
    store.check_writable()
    ids, texts = _read_documents(args)
    # Given vectors are checked before the model loads (loading writes its files' hashes).
    given = VectorsFile(args.vectors, args.vector_column, len(ids), args.input)
    vectors = None
    if args.vectors is not None:
        vectors = given_vectors(given, saved_width(args.model), args.model)
    model = open_model(args.model)  # through the embedding cache
    if vectors is not None:
        given_vectors(given, model.recipe.input_dim, args.model, vectors)
    added = store.add(
        model,
        ids,
        texts,
        dim=args.dim,
        precision=args.precision,
        store_text=not args.no_text,
        skip_existing=args.skip_existing,
        batch_size=args.batch_size,
        vectors=vectors,
    )
    layout = store.provenance()
    print(
        f"added {added} documents to {store.where} ({len(store)} in all; "
        f"{layout['precision']} codes at {layout['dim']} dims)"
    )
    return 0


def _read_documents(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    from demitasse.data import read_documents, read_texts

    if args.id_column is None and args.text_column is None:
        return read_documents(args.input)
    texts = read_texts(args.input, column=args.text_column, aligned=True)
    ids = read_texts(args.input, column=args.id_column or "id", aligned=True)
    if not all(ids):
        raise DataError(f"{args.input}: a row has an empty id")
    return ids, texts


def run_search(args: argparse.Namespace) -> int:
    from demitasse.model import open_model
    from demitasse.store import LanceStore

    queries = _queries(args.query)
    store = LanceStore(args.db, args.table)
    store.provenance()  # a missing table fails before the model loads
    model = open_model(args.model, cache=False)
    results = store.search(model, queries, args.k, rescore_factor=args.rescore,
                           with_text=True)  # fmt: skip
    for query, hits in zip(queries, results, strict=True):
        if args.json:
            print(json.dumps({"query": query, "hits": [_as_dict(h) for h in hits]},
                             ensure_ascii=False))  # fmt: skip
        else:
            _print_hits(query, hits)
    return 0


def _queries(values: list[str]) -> list[str]:
    """The ``--query`` values under the Unicode policy: invalid UTF-8 bytes (which reach
    Python as surrogate escapes) become U+FFFD, with one warning, as in files."""
    from demitasse.data import Replacements

    empty = next((i for i, value in enumerate(values) if not value.strip()), None)
    if empty is not None:  # as the server refuses an empty input
        raise DataError(f"--query {empty + 1} is empty: a query needs some text")
    with Replacements("--query", "query") as replaced:
        return [replaced.argument(value, f"query {i + 1}") for i, value in enumerate(values)]


def _as_dict(hit: Hit) -> dict[str, Any]:
    found: dict[str, Any] = {"id": hit.id, "score": hit.score}
    if hit.text is not None:
        found["text"] = hit.text
    return found


def _print_hits(query: str, hits: list[Hit]) -> None:
    print(f"query: {query}")
    for rank, hit in enumerate(hits, 1):
        text = "" if hit.text is None else " ".join(hit.text.split())
        if len(text) > SHOWN_CHARS:
            text = text[: SHOWN_CHARS - 1] + "…"
        print(f"{rank:>4}  {hit.score:9.4f}  {hit.id}  {text}".rstrip())
    sys.stdout.flush()
