"""A model's documents in a LanceDB table (embedded, on disk, no server), searched the way
the model searches them in memory.

A table holds, per document, its insertion ``row``, ``id``, optionally its ``text``, the
first-stage ``codes`` at the model's width and precision (packed bits, int8 codes or float32
vectors) and, when the model rescores, the ``rescore`` vectors beside them (the encoder's full
output as int8 or float32). The schema metadata keeps the model's provenance: a table is only
appended to, and only searched, with a model whose provenance is equal.

Writing: one :meth:`LanceStore.add` is one Lance commit. Documents are encoded and streamed to
LanceDB batch by batch, and the version that makes them visible is committed after the last
batch, so an interrupted or failed run leaves the table as it was (a table the run created is
dropped again; after a hard kill it remains, empty). Nothing is half-written; run the command
again to resume (the embedding cache makes re-encoding cheap), or use ``skip_existing`` to add
only the ids a table lacks.

Searching: binary codes are searched by LanceDB itself (``distance_type("hamming")`` on the
fixed-size uint8 column, flat and exact: any ANN index on the column is bypassed). LanceDB's
vector search takes no int8 query vectors, and its float cosine differs from demitasse's in
rounding, so int8 and float32 codes are read with one scan and searched by
:class:`~demitasse.search.QuantizedIndex`. Either way the candidates are rescored by
``QuantizedIndex`` with the stored rescoring vectors, so hits and scores equal those of
:meth:`CompressedModel.search <demitasse.model.CompressedModel.search>` over the same
documents in memory. Queries are texts only: they go through the model, never around it.
"""

from __future__ import annotations

import logging
import re
import shutil
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from demitasse.data import check_texts
from demitasse.errors import DataError, DemitasseError, one_line
from demitasse.io import atomic_write_json
from demitasse.pipeline import RescoreStore, search_prepared
from demitasse.progress import tracked
from demitasse.provenance import ProvenanceError, check_provenance
from demitasse.search import QuantizedIndex, check_k, rescore_depth
from demitasse.store._layout import (
    CODES,
    ID,
    RESCORE,
    ROW,
    TEXT,
    Layout,
    fixed_size_list,
    layout_for,
    matrix,
    read_layout,
)

if TYPE_CHECKING:
    from demitasse.model import CompressedModel

logger = logging.getLogger(__name__)

DEFAULT_TABLE = "documents"
#: Written into a database folder when ``index`` creates it: tables go only into a folder that
#: is new, empty, or a database demitasse created (earlier ones: holding only its tables).
DATABASE_MARKER = ".demitasse-database.json"
#: LanceDB's own rule for table names, checked before anything is written; no leading dot,
#: which would name a hidden folder (or "..").
TABLE_NAME = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_\-.]*")
#: Extra documents the first-stage query of binary codes fetches beyond its depth, to see
#: every document tied with the last candidate.
TIE_MARGIN = 64


@dataclass(frozen=True)
class Hit:
    """One search result: the document's id, its score (rescoring similarity when the model
    rescores, else the first stage's: agreeing bits or cosine) and its text when asked for."""

    id: str
    score: float
    text: str | None = None


def require_lancedb() -> Any:
    # lancedb is the optional "vectordb" extra; the rest of demitasse works without it.
    try:
        import lancedb
    except ImportError:
        raise DemitasseError(
            "vector database search needs lancedb: pip install 'demitasse[vectordb]'"
        ) from None
    return lancedb


class LanceStore:
    """The table ``table`` of the LanceDB database at ``db`` (a directory, created on the first
    :meth:`add`). A store opens its table once and searches that version and what it adds
    itself: open a new store to see what another process added since."""

    def __init__(self, db: str | Path, table: str = DEFAULT_TABLE) -> None:
        if not isinstance(table, str) or not TABLE_NAME.fullmatch(table):
            raise DataError(f"table name must be letters, digits, '_', '-' and '.' (not first), "
                            f"got {table!r}")  # fmt: skip
        self.db = Path(db).expanduser()
        if self.db.exists() and not self.db.is_dir():
            raise DataError(f"{self.db} is not a directory (a LanceDB database is one)")
        self.table = table
        self.where = f"table {table!r} in {self.db}"
        self._scanned: tuple[int, QuantizedIndex, np.ndarray, np.ndarray] | None = None
        # The table as first opened: reopening costs more than a search of a small table.
        self._opened: tuple[Any, Layout] | None = None
        # Models already checked against the table, with what they were checked in: hashing a
        # model's fitted state costs milliseconds, too much for every query.
        self._checked: weakref.WeakKeyDictionary[CompressedModel, tuple] = (
            weakref.WeakKeyDictionary()
        )

    # ---- the table ----------------------------------------------------------------------------

    def _connect(self) -> Any:
        try:
            return require_lancedb().connect(str(self.db))
        except (OSError, ValueError, RuntimeError) as exc:
            raise DataError(
                f"cannot open the LanceDB database {self.db}: {one_line(exc)}"
            ) from None

    def exists(self) -> bool:
        return self.db.is_dir() and self.table in _table_names(self._connect())

    def check_writable(self) -> None:
        """Refuse, in one line, to write into a folder that is not a database demitasse
        created: a model directory, or the user's files, are no place for a LanceDB table."""
        if not self.db.is_dir() or (self.db / DATABASE_MARKER).is_file():
            return
        for entry in sorted(self.db.iterdir()):
            if not (entry.is_dir() and not entry.is_symlink() and entry.suffix == ".lance"):
                break
            try:  # a table of an earlier demitasse, which wrote no marker
                read_layout(self._connect().open_table(entry.stem).schema, self.where)
            except (OSError, ValueError, RuntimeError, DemitasseError):
                break
        else:
            return
        raise DataError(
            f"refusing to write a LanceDB table into {self.db}: it holds {entry.name!r}, which "
            "is not from a database demitasse created; choose a new or empty folder"
        )

    def _open(self, *, fresh: bool = False) -> tuple[Any, Layout]:
        if self._opened is not None and not fresh:
            return self._opened
        if not self.exists():
            raise DataError(f"no {self.where}; write it first with 'demitasse index'")
        try:
            table = self._connect().open_table(self.table)
        except (OSError, ValueError, RuntimeError) as exc:
            raise DataError(f"cannot open {self.where}: {one_line(exc)}") from None
        self._opened = (table, read_layout(table.schema, self.where))
        return self._opened

    def provenance(self) -> dict[str, Any]:
        """The provenance of the model whose documents the table holds."""
        return dict(self._open()[1].provenance)

    def __len__(self) -> int:
        return int(self._open()[0].count_rows())

    def _check_model(self, model: CompressedModel, layout: Layout) -> None:
        """Refuse, in one line, a model whose output differs from the table's documents (a
        model is checked again once it was refitted or its settings changed)."""
        state = _model_state(model, layout)
        checked = self._checked.get(model)
        if (
            checked is not None
            and all(a is b for a, b in zip(checked[:-1], state[:-1], strict=True))
            and checked[-1] == state[-1]
        ):
            return
        try:
            current = model.provenance(layout.dim, layout.precision)
        except DemitasseError as exc:  # the model has no such width or precision
            raise ProvenanceError(
                f"{self.where} holds vectors of a different model ({one_line(exc)})"
            ) from None
        check_provenance(layout.provenance, current, self.where)
        self._checked[model] = state

    # ---- writing ------------------------------------------------------------------------------

    def add(
        self,
        model: CompressedModel,
        ids: Sequence[str],
        texts: Sequence[str],
        *,
        dim: int | None = None,
        precision: str | None = None,
        store_text: bool = True,
        skip_existing: bool = False,
        batch_size: int = 1024,
        vectors: Any = None,
    ) -> int:
        """Encode ``texts`` with ``model`` and add them under ``ids``, in one commit; returns
        the number of documents added. ``vectors``: the encoder's output for the texts,
        computed already (rows aligned with ``ids``, as wide as the model's input), taken
        instead of encoding them.

        A new table takes the model's codes at ``dim`` and ``precision`` (default: its width
        and fitted precision), its rescoring vectors when it rescores, and the texts unless
        ``store_text=False``. An existing table is only appended to by a model of equal
        provenance; ids it already holds are refused, or left out with ``skip_existing``.
        """
        ids, texts = _check_documents(ids, texts)
        batch_size = check_k(batch_size)
        if model.recipe.encoder is None:
            raise DataError("a vectors-only model has no encoder to turn texts into vectors")
        if vectors is not None:
            vectors = _check_vectors(model, vectors, len(ids))
        self.check_writable()
        created, new_database = not self.exists(), not self.db.exists()
        if created:  # a bad width or precision is refused before anything is written
            layout = layout_for(model, dim, precision, with_text=store_text)
        connection = self._connect()
        self._mark_database()
        if created:
            table, start = self._create(connection, layout, new_database), 0
        else:
            table, layout = self._open(fresh=True)
            self._check_append(model, layout, dim, precision, store_text)
            given = ids
            ids, texts, start = _new_documents(table, ids, texts, skip_existing, self.where)
            vectors = _rows_of(vectors, given, ids)
        if not ids:
            logger.info("%s already holds every document", self.where)
            return 0
        batches = _BatchStream(model, layout, ids, texts, start, batch_size, vectors)
        self._opened = self._scanned = None
        try:
            table.add(pa.RecordBatchReader.from_batches(layout.schema(), iter(batches)))
        except BaseException as exc:
            if created:
                connection.drop_table(self.table)
            # LanceDB turns an exception raised while it reads the batches (an encoding error,
            # Ctrl-C) into a RuntimeError: raise the original.
            if batches.failure is not None and exc is not batches.failure:
                raise batches.failure from None
            raise
        return len(ids)

    def _mark_database(self) -> None:
        if not (self.db / DATABASE_MARKER).is_file():
            created_by = {"kind": "LanceDB database", "created by": "demitasse index"}
            atomic_write_json(self.db / DATABASE_MARKER, created_by)

    def _create(self, connection: Any, layout: Layout, new_database: bool) -> Any:
        try:
            return connection.create_table(self.table, schema=layout.schema())
        except (OSError, ValueError, RuntimeError) as exc:
            if new_database:  # nothing of the user's is in it: a refusal leaves nothing
                shutil.rmtree(self.db, ignore_errors=True)
            raise DataError(f"cannot create {self.where}: {one_line(exc)}") from None

    def _check_append(
        self,
        model: CompressedModel,
        layout: Layout,
        dim: int | None,
        precision: str | None,
        store_text: bool,
    ) -> None:
        self._check_model(model, layout)
        held_by_table = (("dim", dim, layout.dim), ("precision", precision, layout.precision))
        for name, asked, held in held_by_table:
            if asked is not None and asked != held:
                raise DataError(f"{self.where} holds {name} {held}, not {asked}")
        if store_text != layout.with_text:
            keeps = "keeps" if layout.with_text else "does not keep"
            raise DataError(f"{self.where} {keeps} the texts; add documents the same way")

    # ---- searching ----------------------------------------------------------------------------

    def search(
        self,
        model: CompressedModel,
        queries: Sequence[str],
        k: int = 10,
        *,
        rescore_factor: float | None = None,
        with_text: bool = False,
    ) -> list[list[Hit]]:
        """The top ``k`` documents for each query text, best first (equal scores: the earlier
        added first), encoded and searched as ``model`` searches; ``rescore_factor`` overrides
        the model's rescoring factor F (the first stage returns ``k·F`` candidates)."""
        if isinstance(queries, np.ndarray):
            raise DataError(
                "queries must be texts: the model encodes them as it encoded the documents"
            )
        queries = check_texts(queries, "queries")
        if not queries:
            raise DataError("no queries to search")
        k = check_k(k)
        table, layout = self._open()
        self._check_model(model, layout)
        n_rows = int(table.count_rows())
        if n_rows == 0:
            raise DataError(f"{self.where} holds no documents")
        factor = _factor(model, rescore_factor)
        first_stage, rescore_queries = model.search_queries(queries, dim=layout.dim)
        if layout.precision == "binary":
            found = self._search_binary(table, layout, model, first_stage, rescore_queries,
                                        k, factor, n_rows)  # fmt: skip
        else:
            found = self._search_scanned(table, layout, model, first_stage, rescore_queries,
                                         k, factor)  # fmt: skip
        texts = _texts_of(table, found) if with_text and layout.with_text else {}
        return [
            [Hit(doc_id, float(score), texts.get(row)) for row, doc_id, score in hits]
            for hits in found
        ]

    def _search_binary(
        self,
        table: Any,
        layout: Layout,
        model: CompressedModel,
        first_stage: np.ndarray,
        rescore_queries: np.ndarray | None,
        k: int,
        factor: float | None,
        n_rows: int,
    ) -> list[list[tuple[int, str, float]]]:
        quantizer = model.stages(layout.dim, layout.precision).quantizer
        depth = min(n_rows, k)
        if factor is not None and rescore_queries is not None:
            depth = rescore_depth(k, factor, n_rows)
        columns = layout.search_columns
        found = []
        for i, code in enumerate(quantizer.quantize(first_stage)):
            candidates = _hamming_candidates(table, code, depth, n_rows, columns)
            index = _index_of(candidates, layout, model)
            one = slice(i, i + 1)
            which = None if rescore_queries is None else rescore_queries[one]
            scores, rows = search_prepared(index, first_stage[one], which, k, factor)
            found.append(_hits(candidates[ROW], candidates[ID], scores[0], rows[0]))
        return found

    def _search_scanned(
        self,
        table: Any,
        layout: Layout,
        model: CompressedModel,
        first_stage: np.ndarray,
        rescore_queries: np.ndarray | None,
        k: int,
        factor: float | None,
    ) -> list[list[tuple[int, str, float]]]:
        version = int(table.version)
        if self._scanned is None or self._scanned[0] != version:
            scanned = _scan(table, layout.search_columns)
            self._scanned = (version, _index_of(scanned, layout, model), *_row_ids(scanned))
        _, index, rows_of, ids_of = self._scanned
        scores, rows = search_prepared(index, first_stage, rescore_queries, k, factor)
        return [_hits(rows_of, ids_of, s, r) for s, r in zip(scores, rows, strict=True)]


# ---- helpers -------------------------------------------------------------------------------


class _BatchStream:
    """The documents as Arrow record batches, encoded batch by batch with progress; the first
    exception raised while encoding is kept in ``failure``."""

    def __init__(
        self,
        model: CompressedModel,
        layout: Layout,
        ids: list[str],
        texts: list[str],
        start: int,
        batch_size: int,
        vectors: np.ndarray | None = None,
    ) -> None:
        self.model, self.layout, self.ids, self.texts = model, layout, ids, texts
        self.start, self.batch_size, self.vectors = start, batch_size, vectors
        self.failure: BaseException | None = None

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._batches()
        except BaseException as exc:
            self.failure = exc
            raise

    def _batches(self) -> Iterator[pa.RecordBatch]:
        schema, layout, model = self.layout.schema(), self.layout, self.model
        starts = range(0, len(self.ids), self.batch_size)
        for begin in tracked(starts, "index", unit="batches", enabled=len(starts) >= 2):
            end = begin + self.batch_size
            texts = self.texts[begin:end]
            from demitasse.model import encoder_vectors

            if self.vectors is None:
                vectors = encoder_vectors(model, texts)
            else:
                vectors = np.asarray(self.vectors[begin:end], dtype=np.float32)
            columns: dict[str, Any] = {
                ROW: pa.array(np.arange(self.start + begin, self.start + begin + len(texts))),
                ID: pa.array(self.ids[begin:end], pa.string()),
            }
            if layout.with_text:
                columns[TEXT] = pa.array(texts, pa.string())
            codes = model.transform(vectors, dim=layout.dim, precision=layout.precision)
            columns[CODES] = fixed_size_list(codes)
            if layout.rescore_dtype is not None:
                columns[RESCORE] = fixed_size_list(_rescore_store(model).keep(vectors))
            yield pa.record_batch([columns[name] for name in schema.names], schema=schema)


def _model_state(model: CompressedModel, layout: Layout) -> tuple:
    """What a provenance check was made with: the model's fitted parts and settings, compared
    by identity (held, so that identity stays meaningful; a refit replaces ``fit_info``), and
    the table's provenance, compared by value."""
    return (model.fit_info, model.compressor, model.quantizer, model.recipe, layout.provenance)


def _table_names(connection: Any) -> list[str]:
    listed = connection.list_tables()
    return list(getattr(listed, "tables", listed))


def _check_vectors(model: CompressedModel, vectors: Any, rows: int) -> np.ndarray:
    """Vectors given for the documents: finite, one row per document, as wide as the
    model's input."""
    from demitasse.model_checks import check_vectors

    vectors = check_vectors(vectors, model.recipe.input_dim)
    if len(vectors) != rows:
        raise DataError(f"{len(vectors)} vectors for {rows} documents")
    return vectors


def _rows_of(vectors: np.ndarray | None, given: list[str], kept: list[str]) -> Any:
    """The rows of ``vectors`` (one per id ``given``) of the ids ``kept``."""
    if vectors is None or len(kept) == len(given):
        return vectors
    row_of = {doc_id: row for row, doc_id in enumerate(given)}
    return vectors[[row_of[doc_id] for doc_id in kept]]


def _check_documents(ids: Sequence[str], texts: Sequence[str]) -> tuple[list[str], list[str]]:
    ids, texts = check_texts(ids, "ids"), check_texts(texts, "texts")
    if len(ids) != len(texts):
        raise DataError(f"{len(ids)} ids for {len(texts)} texts")
    if not ids:
        raise DataError("no documents to add")
    seen: set[str] = set()
    for doc_id in ids:
        if not doc_id:
            raise DataError("ids must be non-empty strings")
        if doc_id in seen:
            raise DataError(f"duplicate id {doc_id!r}")
        seen.add(doc_id)
    return ids, texts


def _scan(table: Any, columns: list[str]) -> pa.Table:
    """The ``columns`` of every row, in insertion order."""
    rows = int(table.count_rows())
    scanned = table.search().select(columns).limit(max(rows, 1)).to_arrow()
    return scanned.sort_by(ROW)


def _new_documents(
    table: Any, ids: list[str], texts: list[str], skip_existing: bool, where: str
) -> tuple[list[str], list[str], int]:
    """The documents ``table`` lacks, and the row number the first of them gets."""
    held = _scan(table, [ROW, ID])
    start = int(pc.max(held[ROW]).as_py()) + 1 if held.num_rows else 0
    present = set(held[ID].to_pylist())
    if not present.intersection(ids):
        return ids, texts, start
    if not skip_existing:
        example = next(doc_id for doc_id in ids if doc_id in present)
        raise DataError(
            f"{where} already holds id {example!r}; pass --skip-existing to add only new ids"
        )
    kept = [(i, t) for i, t in zip(ids, texts, strict=True) if i not in present]
    return [i for i, _ in kept], [t for _, t in kept], start


def _factor(model: CompressedModel, rescore_factor: float | None) -> float | None:
    if rescore_factor is None:
        return model.recipe.rescore_factor
    if model.rescoring is None:
        raise DataError(
            "this model does not rescore (its documents were indexed without rescoring vectors)"
        )
    return rescore_factor


def _hamming_candidates(
    table: Any, code: np.ndarray, depth: int, n_rows: int, columns: list[str]
) -> pa.Table:
    """Every document that can be among the ``depth`` nearest by Hamming distance, in row
    order: LanceDB's top ``depth`` and every document tied with the last of them (LanceDB
    breaks ties by its own row ids, in-memory search by insertion row). One query with a
    margin beyond ``depth`` nearly always shows where the ties end; else a second one fetches
    them."""

    def query() -> Any:
        return (
            table.search(code, vector_column_name=CODES)
            .distance_type("hamming")
            .bypass_vector_index()
            .select([*columns, "_distance"])
        )

    limit = min(n_rows, depth + max(TIE_MARGIN, depth // 4))
    found = query().limit(limit).to_arrow().sort_by("_distance")
    distances = found["_distance"].to_numpy()
    boundary = distances[depth - 1]
    if found.num_rows in (n_rows, 0) or found.num_rows < limit or distances[-1] > boundary:
        return found.slice(0, int(np.searchsorted(distances, boundary, side="right"))).sort_by(ROW)
    ties = query().distance_range(boundary, boundary + 1).limit(n_rows).to_arrow()
    closer = found.filter(pc.less(found["_distance"], boundary))
    return pa.concat_tables([closer, ties.select(closer.schema.names)]).sort_by(ROW)


def _index_of(found: pa.Table, layout: Layout, model: CompressedModel) -> QuantizedIndex:
    rescore_vectors = rescore_quantizer = None
    if layout.rescore_dtype is not None:
        rescore_vectors = matrix(found[RESCORE], layout.rescore_dtype)
        if layout.rescore_dtype == np.int8:
            rescore_quantizer = _rescore_store(model).quantizer
    return QuantizedIndex(
        matrix(found[CODES], layout.code_dtype),
        model.stages(layout.dim, layout.precision).quantizer,
        dim=layout.dim,
        rescore_vectors=rescore_vectors,
        rescore_quantizer=rescore_quantizer,
    )


def _rescore_store(model: CompressedModel) -> RescoreStore:
    """The model's rescoring store (how its documents' encoder output is kept)."""
    store = model.stages().rescore_store
    if store is None:
        raise DataError("this model does not rescore")
    return store


def _row_ids(found: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    return found[ROW].to_numpy(), np.asarray(found[ID].to_pylist(), dtype=object)


def _hits(
    rows_of: Any, ids_of: Any, scores: np.ndarray, rows: np.ndarray
) -> list[tuple[int, str, float]]:
    """``(table row, id, score)`` of each hit; ``rows`` index ``rows_of`` and ``ids_of``."""
    if isinstance(rows_of, pa.ChunkedArray):
        rows_of, ids_of = _row_ids(pa.table({ROW: rows_of, ID: ids_of}))
    return [(int(rows_of[r]), str(ids_of[r]), float(s)) for s, r in zip(scores, rows, strict=True)]


def _texts_of(table: Any, found: list[list[tuple[int, str, float]]]) -> dict[int, str]:
    rows = sorted({row for hits in found for row, _, _ in hits})
    if not rows:
        return {}
    listed = ", ".join(map(str, rows))
    texts = table.search().where(f"{ROW} IN ({listed})").select([ROW, TEXT]).limit(len(rows))
    result = texts.to_arrow()
    return dict(zip(result[ROW].to_pylist(), result[TEXT].to_pylist(), strict=True))
