"""Property-based tests (Hypothesis): whatever bytes or JSON reach a loader, a saved-object
reader, the result-record reader, a spec parser or the command line, the outcome is a result
or one clean error (a :class:`DemitasseError` with a one-line message), never a traceback.

Every run is bounded and deterministic (``derandomize=True``, a fixed example count, no example
database); each bug these tests found is pinned by an ``@example``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import safetensors.numpy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from demitasse.cli import main
from demitasse.cli.specs import parse_compressor_specs, parse_int_list, parse_precisions
from demitasse.compress import (
    is_precision,
    load_compressor,
    load_quantizer,
    make_compressor,
    make_quantizer,
)
from demitasse.data import load_beir, load_embeddings, load_retrieval, load_scored_pairs, read_texts
from demitasse.errors import DemitasseError
from demitasse.evaluation.records import ResultRecord, read_records, write_records
from demitasse.model import CompressedModel, is_model_dir
from demitasse.report import render_report
from demitasse.static.model import StaticModel, is_static_model_dir

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: For the tests whose every example does real work (a report with figures, a command).
FEW = settings(FUZZ, max_examples=25)

WIDTH = 8  # of the synthetic embeddings the saved objects are fitted on


def check_message(message: str) -> None:
    """A clean error's message: something, on one line."""
    assert message.strip(), "empty error message"
    assert message.splitlines() == [message], f"not one line: {message!r}"


def clean(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call``'s result, or None when it raised a DemitasseError with a one-line message;
    any other exception escapes and fails the test."""
    try:
        return call(*args, **kwargs)
    except DemitasseError as exc:
        check_message(str(exc))
        return None


# ---- strategies -------------------------------------------------------------------------------

#: JSON can carry lone surrogates (``"\ud800"``), which are no text.
STRINGS = st.text(max_size=10) | st.sampled_from(["\ud800", "x\udfffy", "a\nb", ""])
NUMBERS = (
    st.integers()
    | st.sampled_from([10**400, -(10**400), 2**63, 2**64, 0, -1])
    | st.floats()  # NaN and ±inf included: written as the tokens NaN / Infinity
)
SCALARS = st.none() | st.booleans() | NUMBERS | STRINGS
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(STRINGS, inner, max_size=4),
    max_leaves=10,
)
#: JSON documents no encoder writes but a file can hold.
ODD_JSON = st.sampled_from(
    [
        "[" * 100_000,
        '{"a":' * 50_000,
        "1" * 5000,
        "[" + "9" * 5000 + "]",
        "1e400",
        "[-1e400]",
        "NaN",
        "-Infinity",
        '"\\ud800"',
        "\ufeff{}",
        "",
        "{} {}",
        "[1,]",
    ]
)


def to_json(value: Any) -> str:
    return json.dumps(value, allow_nan=True)  # NaN/Infinity tokens; surrogates as escapes


JSON_TEXTS = JSON_VALUES.map(to_json) | ODD_JSON
#: A JSON field holding text, mostly, or anything else.
TEXT_FIELDS = st.text(max_size=8).map(to_json) | JSON_TEXTS


def json_objects(
    fields: dict[str, st.SearchStrategy[str]],
    optional: dict[str, st.SearchStrategy[str]] | None = None,
) -> st.SearchStrategy[str]:
    """One JSON Lines record whose field values are JSON texts (valid or not), so that a value
    no encoder writes still reaches the code that reads the field."""
    return st.fixed_dictionaries(fields, optional=optional or {}).map(
        lambda items: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in items.items()) + "}"
    )


def json_lines(records: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """Mostly records, now and then a line of any JSON (or none)."""
    return st.lists(st.one_of(records, records, JSON_TEXTS), max_size=5)


BYTES = st.binary(max_size=300)


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    return path


# ---- 1. text and table loaders ----------------------------------------------------------------

TEXT_SUFFIXES = [".txt", ".jsonl", ".csv", ".tsv", ".parquet"]


@FUZZ
@given(
    suffix=st.sampled_from(TEXT_SUFFIXES),
    data=BYTES,
    gz=st.sampled_from([None, "raw", "gzip"]),  # no .gz / .gz of raw bytes / gzipped bytes
    aligned=st.booleans(),
    limit=st.none() | st.integers(-1, 3),
)
def test_read_texts_any_bytes(
    suffix: str, data: bytes, gz: str | None, aligned: bool, limit: int | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        name = "input" + suffix + (".gz" if gz else "")
        path = write(Path(tmp) / name, gzip.compress(data) if gz == "gzip" else data)
        texts = clean(read_texts, path, column="text", limit=limit, aligned=aligned)
        assert texts is None or all(isinstance(t, str) for t in texts)


@FUZZ
@given(
    lines=json_lines(json_objects({}, {"text": TEXT_FIELDS, "other": JSON_TEXTS})),
    newline=st.sampled_from(["\n", "\r\n"]),
    gz=st.booleans(),
    aligned=st.booleans(),
)
@example(lines=['{"text": ' + "[" * 100_000 + "}"], newline="\n", gz=False, aligned=False)
@example(lines=['{"text": ' + "1" * 5000 + "}"], newline="\n", gz=False, aligned=True)
def test_read_texts_json_lines(lines: list[str], newline: str, gz: bool, aligned: bool) -> None:
    raw = newline.join(lines).encode("utf-8", "surrogatepass")
    with tempfile.TemporaryDirectory() as tmp:
        path = write(
            Path(tmp) / ("t.jsonl.gz" if gz else "t.jsonl"), gzip.compress(raw) if gz else raw
        )
        texts = clean(read_texts, path, column="text", aligned=aligned)
        assert texts is None or all(isinstance(t, str) for t in texts)


CELLS = st.text(alphabet=st.sampled_from("ab ,\t\"'\n\r\x00é\u2028"), max_size=6)


def delimited(header: list[str], rows: list[list[str]], delimiter: str, newline: str) -> str:
    return newline.join(delimiter.join(fields) for fields in [header, *rows])


@FUZZ
@given(
    header=st.lists(st.sampled_from(["text", " text ", "other", "", '"text"']) | CELLS, max_size=4),
    rows=st.lists(st.lists(CELLS, max_size=4), max_size=5),
    suffix=st.sampled_from([".csv", ".tsv", ".csv.gz"]),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    aligned=st.booleans(),
)
def test_read_texts_delimited(
    header: list[str], rows: list[list[str]], suffix: str, newline: str, aligned: bool
) -> None:
    delimiter = "\t" if suffix == ".tsv" else ","
    raw = delimited(header, rows, delimiter, newline).encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = write(
            Path(tmp) / f"t{suffix}", gzip.compress(raw) if suffix.endswith(".gz") else raw
        )
        clean(read_texts, path, column="text", aligned=aligned)


def _timestamps() -> st.SearchStrategy[Any]:
    return st.lists(st.none() | st.integers(-(2**62), 2**62), max_size=4)


#: (arrow type, strategy for a column of Python values of that type), odd ones included.
FLOATS32 = st.floats(width=32) | st.none()
PARQUET_COLUMNS: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (pa.list_(pa.float32()), st.lists(st.lists(FLOATS32, max_size=4) | st.none(), max_size=5)),
    (pa.large_list(pa.float64()), st.lists(st.lists(st.floats(), max_size=3), max_size=4)),
    (pa.list_(pa.float32(), 3), st.lists(st.lists(FLOATS32, min_size=3, max_size=3), max_size=4)),
    (
        pa.list_(pa.int64()),
        st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3), max_size=4),
    ),
    (pa.list_(pa.uint8()), st.lists(st.lists(st.integers(0, 255), max_size=3), max_size=4)),
    (
        pa.list_(pa.float16()),
        st.lists(st.lists(st.floats(width=16).map(np.float16), max_size=3), max_size=4),
    ),
    (
        pa.list_(pa.list_(pa.float32())),
        st.lists(st.lists(st.lists(FLOATS32, max_size=2), max_size=2), max_size=3),
    ),
    (pa.list_(pa.string()), st.lists(st.lists(st.text(max_size=3), max_size=3), max_size=3)),
    (pa.list_(pa.bool_()), st.lists(st.lists(st.booleans(), max_size=3), max_size=3)),
    (pa.list_(pa.null()), st.lists(st.lists(st.none(), max_size=3), max_size=3)),
    (pa.string(), st.lists(st.text(max_size=5) | st.none(), max_size=5)),
    (pa.large_string(), st.lists(st.text(max_size=5), max_size=3)),
    (pa.binary(), st.lists(st.binary(max_size=5) | st.none(), max_size=4)),
    (pa.int64(), st.lists(st.integers(-(2**63), 2**63 - 1) | st.none(), max_size=4)),
    (pa.float64(), st.lists(st.floats() | st.none(), max_size=4)),
    (
        pa.struct([("a", pa.float32())]),
        st.lists(st.fixed_dictionaries({"a": FLOATS32}), max_size=3),
    ),
    (
        pa.map_(pa.string(), pa.float32()),
        st.lists(st.lists(st.tuples(st.text(max_size=2), FLOATS32), max_size=2), max_size=3),
    ),
    (pa.timestamp("ms"), _timestamps()),
    (pa.timestamp("ns"), _timestamps()),
    (pa.date64(), _timestamps()),
    (pa.dictionary(pa.int8(), pa.string()), st.lists(st.sampled_from(["a", "b"]), max_size=4)),
]


@st.composite
def parquet_tables(draw: st.DrawFn, names: list[str]) -> tuple[pa.Table, int]:
    """A table of 1-3 columns named from ``names`` (repeats allowed), of random types."""
    columns, labels = [], []
    rows = None
    for _ in range(draw(st.integers(1, 3))):
        kind, values = draw(st.sampled_from(PARQUET_COLUMNS))
        column = draw(values)
        if rows is not None:  # all columns of a table have one length
            column = (column * (rows + 1))[:rows] if column else [None] * rows
        rows = len(column)
        try:
            array = pa.array(column, type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # nulls where not allowed
            array = pa.nulls(rows, type=kind)
        columns.append(array)
        labels.append(draw(st.sampled_from(names)))
    return pa.Table.from_arrays(columns, names=labels), draw(st.integers(1, 3))


TWO_TEXT_COLUMNS = pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["text", "text"])


@FUZZ
@given(table=parquet_tables(["text", "other"]), aligned=st.booleans())
@example(table=(TWO_TEXT_COLUMNS, 1), aligned=False)
@example(table=(pa.table({"text": pa.array([1], pa.timestamp("ns"))}), 1), aligned=True)
@example(table=(pa.table({"text": pa.array([2**62], pa.timestamp("ms"))}), 1), aligned=True)
def test_read_texts_parquet(table: tuple[pa.Table, int], aligned: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.parquet"
        pq.write_table(table[0], path, row_group_size=table[1])
        clean(read_texts, path, column="text", aligned=aligned)


PAIR_COLUMNS = ["sentence1", "sentence2", "score"]


SCORES = (
    NUMBERS.map(to_json)
    | st.sampled_from(
        ['"1e400"', '"nan"', '"1_0"', '" 2 "', '"0x10"', "1" * 400, "1" * 5000, "true"]
    )
    | JSON_TEXTS
)


@FUZZ
@given(
    lines=json_lines(
        json_objects({"sentence1": TEXT_FIELDS, "sentence2": TEXT_FIELDS, "score": SCORES})
    ),
    rows=st.lists(
        st.lists(
            CELLS | st.sampled_from(["1e400", "nan", "1_0", "-0", "2.5", "1" * 400]), max_size=3
        ),
        max_size=4,
    ),
    header=st.lists(st.sampled_from(PAIR_COLUMNS), min_size=2, max_size=4),
    table=parquet_tables(PAIR_COLUMNS),
    kind=st.sampled_from(["jsonl", "csv", "tsv", "parquet"]),
)
@example(
    lines=['{"sentence1": "a", "sentence2": "b", "score": ' + "1" * 400 + "}"],
    rows=[], header=[], table=(pa.table({"x": [1]}), 1), kind="jsonl",
)  # fmt: skip
@example(
    lines=['{"sentence1": "a", "sentence2": "b", "score": ' + "1" * 5000 + "}"],
    rows=[], header=[], table=(pa.table({"x": [1]}), 1), kind="jsonl",
)  # fmt: skip
def test_load_scored_pairs(
    lines: list[str],
    rows: list[list[str]],
    header: list[str],
    table: tuple[pa.Table, int],
    kind: str,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"pairs.{kind}"
        if kind == "jsonl":
            write(path, "\n".join(lines))
        elif kind == "parquet":
            pq.write_table(table[0], path, row_group_size=table[1])
        else:
            write(path, delimited(header, rows, "\t" if kind == "tsv" else ",", "\n"))
        pairs = clean(load_scored_pairs, path)
        assert pairs is None or np.isfinite(pairs.scores).all()


# ---- embeddings ---------------------------------------------------------------------------------

# fmt: off
NPY_DESCR = ["'<f4'", "'>f8'", "'<f2'", "'<f16'", "'|i1'", "'<u8'", "'|b1'", "'<c8'", "'|O'",
             "'<U3'", "'|S2'", "'|V8'", "'<M8[D]'", "[('a', '<f4'), ('b', '<i4')]",
             "('<f4', (2,))", "'bogus'", "'0\\x01\\x0b'", "1", "None"]
NPY_DIMS = st.integers(-2, 4) | st.sampled_from([2**31, 2**47, 2**62, 2**63, 2**64, 10**19])
NPY_SHAPES = (
    st.lists(NPY_DIMS, max_size=4).map(lambda dims: repr(tuple(dims)))
    | st.sampled_from(["(1.5,)", "'x'", "(" * 200, "[2, 2]"])
)
NPY_DTYPES = (
    st.sampled_from(["<f4", ">f4", "<f2", "<f8", "longdouble", "<i8", "|u1", "|b1", "<c8", "<U2",
                     "|S2", "<M8[D]", "<m8[s]"]).map(np.dtype)
    | st.just(np.dtype([("a", "<f4"), ("b", "<i2")]))
)
# fmt: on


def npy_bytes(header: str, major: int = 1, data: bytes = b"", length_error: int = 0) -> bytes:
    """A ``.npy`` file: magic, version, header length, ``header`` (padded) and ``data``."""
    raw = header.encode("latin1")
    raw += b" " * (-(len(raw) + (12 if major > 1 else 10) + 1) % 64) + b"\n"
    length = struct.pack("<I" if major > 1 else "<H", len(raw) + length_error)
    return b"\x93NUMPY" + bytes([major, 0]) + length + raw + data


@st.composite
def npy_files(draw: st.DrawFn) -> bytes:
    """A ``.npy`` file with a well-formed or mangled header and any amount of data."""
    descr = draw(st.sampled_from(NPY_DESCR))
    fortran = draw(st.sampled_from(["False", "True", "1"]))
    header = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {draw(NPY_SHAPES)}, }}"
    return npy_bytes(
        draw(st.sampled_from([header, header, header[:-3], header + " junk"])),
        major=draw(st.sampled_from([1, 1, 2, 3, 9])),
        data=draw(st.binary(max_size=80)),
        length_error=draw(st.sampled_from([0, 0, 0, 5, -5])),
    )


def npy_header(descr: str, shape: str) -> str:
    return f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}"


@FUZZ
@given(
    data=npy_files() | BYTES.map(lambda b: b"\x93NUMPY" + b) | BYTES,
    array=hnp.arrays(NPY_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)),
    objects=st.lists(JSON_VALUES, max_size=3),
    kind=st.sampled_from(["bytes", "bytes", "array", "objects"]),
)
@example(data=b"\x93NUMPY\x01\x00\x01\x00{", array=np.zeros(1), objects=[], kind="bytes")
@example(
    data=npy_bytes(npy_header("'<f4'", "(10000, 231000000000000)")),
    array=np.zeros(1), objects=[], kind="bytes",
)  # fmt: skip
@example(
    data=npy_bytes(npy_header("'<f4'", "(10000000000000000000,)")),
    array=np.zeros(1), objects=[], kind="bytes",
)  # fmt: skip
@example(
    data=npy_bytes(npy_header("'0\\x01\\x0b'", "(2, 2)")),
    array=np.zeros(1),
    objects=[],
    kind="bytes",
)
@example(data=npy_bytes(npy_header("'<f4'", "(4, 2)")), array=np.zeros(1), objects=[], kind="bytes")
def test_load_embeddings_npy(data: bytes, array: np.ndarray, objects: list[Any], kind: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vectors.npy"
        if kind == "bytes":
            write(path, data)
        elif kind == "array":
            np.save(path, array)
        else:
            np.save(path, np.array([*objects, None], dtype=object), allow_pickle=True)
        matrix = clean(load_embeddings, path)
        if matrix is not None:
            assert matrix.ndim == 2 and matrix.size and matrix.dtype.kind in "fiu"
            del matrix  # release the memory map before the folder goes


@FUZZ
@given(
    table=parquet_tables(["embedding", "other"]),
    data=BYTES,
    kind=st.sampled_from(["table", "table", "bytes"]),
)
@example(
    table=(pa.Table.from_arrays([pa.array([[1.0]])] * 2, names=["embedding"] * 2), 1),
    data=b"",
    kind="table",
)
def test_load_embeddings_parquet(table: tuple[pa.Table, int], data: bytes, kind: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vectors.parquet"
        if kind == "table":
            pq.write_table(table[0], path, row_group_size=table[1])
        else:
            write(path, data)
        matrix = clean(load_embeddings, path)
        assert matrix is None or (matrix.ndim == 2 and matrix.size and matrix.dtype == np.float32)


# ---- retrieval --------------------------------------------------------------------------------

IDS = st.sampled_from(["d1", "d2", "q1", "q2", "1", " d1", ""]).map(to_json) | st.just("3")
ID_RECORDS = json_objects(
    {"_id": IDS | JSON_TEXTS, "text": TEXT_FIELDS}, {"title": TEXT_FIELDS | st.just("null")}
)
# fmt: off
QREL_FIELDS = st.sampled_from(["q1", "q2", "d1", "d2", "query-id", "corpus-id", "score", "1", "0",
                               "-2", "1.5", "x", "", "9" * 5000])
# fmt: on


@FUZZ
@given(
    corpus=json_lines(ID_RECORDS),
    queries=json_lines(ID_RECORDS),
    qrels=st.lists(
        st.lists(QREL_FIELDS, max_size=4)
        | st.tuples(
            st.sampled_from(["q1", "q2", "0", "query-id"]),
            st.sampled_from(["d1", "d2", "1", "corpus-id"]),
            st.sampled_from(["1", "2", "0", "-1", "1.5", "x", "score", "٣", "9" * 5000]),
        ).map(list),
        max_size=5,
    ),
    separator=st.sampled_from(["\t", " ", ",", "\t\t"]),
    newline=st.sampled_from(["\n", "\r\n"]),
    odd=st.sampled_from([None, "corpus", "queries", "qrels"]),
    junk=BYTES | ODD_JSON.map(str.encode),
    beir=st.booleans(),
    split=st.sampled_from(["test", "dev", "../test", "te\x00st"]),
)
@example(
    corpus=['{"_id": ' + "[" * 100_000 + "}"], queries=[], qrels=[], separator="\t",
    newline="\n", odd=None, junk=b"", beir=False, split="test",
)  # fmt: skip
@example(
    corpus=['{"_id": "d1", "text": "a"}'], queries=['{"_id": "q1", "text": ' + "1" * 5000 + "}"],
    qrels=[], separator="\t", newline="\n", odd=None, junk=b"", beir=True, split="test",
)  # fmt: skip
def test_load_retrieval(
    corpus: list[str],
    queries: list[str],
    qrels: list[list[str]],
    separator: str,
    newline: str,
    odd: str | None,
    junk: bytes,
    beir: bool,
    split: str,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "scifact"
        (folder / "qrels").mkdir(parents=True)
        files = {
            "corpus": write(folder / "corpus.jsonl", newline.join(corpus)),
            "queries": write(folder / "queries.jsonl", newline.join(queries)),
            "qrels": write(
                folder / "qrels" / "test.tsv",
                newline.join(separator.join(fields) for fields in qrels),
            ),
        }
        if odd is not None:
            write(files[odd], junk)
        if beir:
            dataset = clean(load_beir, folder, split=split)
        else:
            dataset = clean(load_retrieval, files["corpus"], files["queries"], files["qrels"])
        if dataset is not None:
            assert set(dataset.qrels) <= set(dataset.query_ids)


# ---- 2. saved compressors, quantizers and models ----------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Saved objects made on synthetic vectors: a PCA compressor, an int8 quantizer, a
    vectors-only model (PCA + int8), one with truncation and a static model."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    root = tmp_path_factory.mktemp("saved")
    X = np.random.default_rng(0).standard_normal((40, WIDTH)).astype(np.float32)  # noqa: N806
    make_compressor("pca", dim=4).fit(X).save(root / "pca")
    make_quantizer("int8").fit(X).save(root / "int8")
    CompressedModel(compressor="pca", dim=4, precision="int8").fit(vectors=X).save(root / "model")
    CompressedModel(compressor="truncate", dim=4).fit(vectors=X).save(root / "truncated")
    vocab = {"[UNK]": 0, "a": 1, "b": 2, "c": 3}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    StaticModel(np.eye(len(vocab), WIDTH, dtype=np.float32), tokenizer).save(root / "static")
    return root


# fmt: off
#: The keys of each kind of config.json ("a.b": key b of object a).
CONFIG_KEYS = {
    "pca": ["kind", "method", "version", "demitasse_version", "params", "params.dim",
            "params.whiten", "params.abtt", "input_dim", "output_dim", "matryoshka", "fit_data",
            "n_fit_samples", "learned", "learned.total_variance_"],
    "truncate": ["kind", "method", "version", "demitasse_version", "params", "params.dim",
                 "input_dim", "output_dim", "matryoshka", "fit_data", "n_fit_samples", "learned"],
    "int8": ["kind", "precision", "version", "demitasse_version", "params", "params.calibration",
             "params.percentile", "input_dim", "n_fit_samples", "learned"],
    "model": ["kind", "format_version", "demitasse_version", "encoder", "layer", "input_dim",
              "compressor", "method", "precision", "quantizer", "normalize", "batch_size",
              "backend", "output_dim", "matryoshka", "precisions", "fit", "fit.source",
              "fit.n_samples", "rescore", "graph", "part_hashes"],
    "static": ["method", "version", "demitasse_version", "name", "dim", "vocabulary_size",
               "normalize", "metadata"],
}
#: target → (saved folder, the config.json to change in it, its keys, how the folder is loaded)
CONFIG_FILES = {
    "pca": ("pca", "pca", "pca", "compressor"),
    "int8": ("int8", "int8", "int8", "quantizer"),
    "model": ("model", "model", "model", "model"),
    "model/compressor": ("model", "model/compressor", "pca", "model"),
    "model/quantizer": ("model", "model/quantizer", "int8", "model"),
    "truncated": ("truncated", "truncated", "model", "model"),
    "truncated/compressor": ("truncated", "truncated/compressor", "truncate", "model"),
    "static": ("static", "static", "static", "static"),
}
# fmt: on
MUTATIONS = [(target, key) for target, spec in CONFIG_FILES.items() for key in CONFIG_KEYS[spec[2]]]


def test_config_keys_are_the_saved_ones(saved: Path) -> None:
    """The key lists name every key the saved objects write (guards against drift)."""
    for _, config_dir, keys, _ in CONFIG_FILES.values():
        config = json.loads((saved / config_dir / "config.json").read_text())
        assert {k for k in CONFIG_KEYS[keys] if "." not in k} == set(config), config_dir


def use(kind: str, folder: Path) -> None:
    """Load the saved object in ``folder`` as a ``kind``, then use it on finite input: each
    step must succeed or fail cleanly."""
    X = np.random.default_rng(1).standard_normal((5, WIDTH)).astype(np.float32)  # noqa: N806
    assert isinstance(is_model_dir(folder), bool)
    assert isinstance(is_static_model_dir(folder), bool)
    model = None
    if kind == "compressor":
        compressor = clean(load_compressor, folder)
        if compressor is not None:
            width = compressor.n_features_in_ if compressor.n_features_in_ <= 64 else WIDTH
            clean(compressor.transform, np.ones((3, width), np.float32))
            clean(compressor.transform, X, dim=1)
        model = clean(CompressedModel.load, folder, cache=False)  # a bare compressor is a model
    elif kind == "quantizer":
        quantizer = clean(load_quantizer, folder)
        if quantizer is not None:
            codes = clean(quantizer.quantize, X)
            if codes is not None:
                clean(quantizer.similarity, codes, codes)
    elif kind == "static":
        static = clean(StaticModel.load, folder)
        if static is not None:
            clean(static.encode, ["a b c", "", "zzz"])
    else:
        model = clean(CompressedModel.load, folder, cache=False)
    if model is not None:
        width = model.recipe.input_dim if 0 < model.recipe.input_dim <= 64 else WIDTH
        vectors = np.ones((3, width), np.float32)
        for precision in ("float32", "int8", "binary"):
            clean(model.transform, vectors, precision=precision)
        clean(model.transform, vectors, dim=1)
        clean(model.bytes_per_vector, 2, "int8")


def load_changed(saved: Path, target: str, change: Callable[[Path], None]) -> None:
    """Copy the saved ``target``, ``change`` the copy's folder holding the config.json, then
    load and use the copy."""
    folder, config_dir, _, kind = CONFIG_FILES[target]
    with tempfile.TemporaryDirectory() as tmp:
        copy = shutil.copytree(saved / folder, Path(tmp) / folder)
        change(Path(tmp) / config_dir)
        use(kind, copy)


def changed_config(key: str, value: Any, delete: bool) -> Callable[[Path], None]:
    def change(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        *parents, last = key.split(".")
        inner = config
        for parent in parents:
            inner = inner[parent]
        if delete:
            del inner[last]
        else:
            inner[last] = value
        write(folder / "config.json", to_json(config))

    return change


@FUZZ
@given(
    mutation=st.sampled_from(MUTATIONS),
    value=JSON_VALUES,
    delete=st.sampled_from([False, False, False, True]),
)
@example(mutation=("static", "metadata"), value="a", delete=False)
def test_saved_config_with_one_field_changed(
    saved: Path, mutation: tuple[str, str], value: Any, delete: bool
) -> None:
    target, key = mutation
    load_changed(saved, target, changed_config(key, value, delete))


SAFETENSORS_DTYPES = ["F32", "F64", "F16", "BF16", "I8", "U8", "I64", "BOOL", "F8_E4M3", "C64", "X"]


@st.composite
def safetensors_files(draw: st.DrawFn) -> bytes:
    """A safetensors file with a random (valid or not) header and any amount of data."""
    tensors = {}
    for name in draw(
        st.lists(
            st.sampled_from(
                ["mean_", "components_", "explained_variance_", "lo_", "hi_", "vectors", "x"]
            ),
            max_size=3,
        )
    ):
        shape = draw(st.lists(st.integers(-1, 5) | st.just(2**40), max_size=3))
        start = draw(st.integers(0, 64))
        tensors[name] = {
            "dtype": draw(st.sampled_from(SAFETENSORS_DTYPES)),
            "shape": shape,
            "data_offsets": [start, start + draw(st.integers(-4, 64))],
        }
    header = draw(st.sampled_from([json.dumps(tensors), json.dumps(tensors)[:-1], "[]"]))
    raw = header.encode()
    size = struct.pack("<Q", len(raw) + draw(st.sampled_from([0, 0, 3, 2**40])))
    return size + raw + draw(st.binary(max_size=100))


STATE_NAMES = ["mean_", "components_", "explained_variance_", "lo_", "hi_", "vectors", "x"]
#: Loadable states with the expected names (or not) and any shape and dtype.
STATES = st.dictionaries(
    st.sampled_from(STATE_NAMES),
    hnp.arrays(
        st.sampled_from(["<f2", "<f4", "<f8", "|i1", "|u1", "<i8", "|b1"]).map(np.dtype),
        st.sampled_from([(), (4,), (8,), (4, 8), (8, 4), (4, 4), (2, 2, 2), (0, 8)]),
    ),
    max_size=3,
).map(safetensors.numpy.save)
EMPTY_STATE = safetensors.numpy.save({})
#: A bare truncation that claims 10**12 dimensions: nothing in its state says otherwise.
HUGE_TRUNCATION = {
    "kind": "compressor", "method": "truncate", "version": 1, "params": {"dim": None},
    "input_dim": 10**12, "output_dim": 10**12, "fit_data": None, "n_fit_samples": 2,
}  # fmt: skip
CONFIG_SHAPES = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["compressor", "quantizer", "demitasse-model"]),
        "method": st.sampled_from(["pca", "truncate", "random", "static", "x"]),
    },
    optional=dict.fromkeys(
        ["version", "precision", "format_version", "params", "input_dim", "output_dim",
         "fit_data", "n_fit_samples", "learned", "compressor", "quantizer", "fit", "normalize",
         "batch_size", "dim", "vocabulary_size", "name"],
        JSON_VALUES,
    ),
)  # fmt: skip


@FUZZ
@given(
    target=st.sampled_from(list(CONFIG_FILES)),
    config=CONFIG_SHAPES.map(to_json) | JSON_TEXTS | BYTES,
    state=st.none() | BYTES | STATES | safetensors_files(),
)
@example(target="pca", config="[" * 100_000, state=None)
@example(target="model", config="{" * 100_000, state=None)
@example(target="pca", config=to_json(HUGE_TRUNCATION), state=EMPTY_STATE)
def test_saved_config_any_json(
    saved: Path, target: str, config: str | bytes, state: bytes | None
) -> None:
    def change(folder: Path) -> None:
        write(folder / "config.json", config)
        if state is not None:
            write(folder / "state.safetensors", state)

    load_changed(saved, target, change)


@FUZZ
@given(target=st.sampled_from(list(CONFIG_FILES)), state=BYTES | STATES | safetensors_files())
def test_saved_state_any_bytes(saved: Path, target: str, state: bytes) -> None:
    load_changed(saved, target, lambda folder: write(folder / "state.safetensors", state))


@FUZZ
@given(
    config=JSON_TEXTS | BYTES, kind=st.sampled_from(["compressor", "quantizer", "model", "static"])
)
@example(config="[" * 100_000, kind="compressor")
@example(config="[" * 100_000, kind="static")
def test_save_over_a_folder_with_any_config(saved: Path, config: str | bytes, kind: str) -> None:
    """Saving into a folder that holds some config.json but no marker of a finished save is
    refused in one line, whatever the config says."""
    load, name = {
        "compressor": (load_compressor, "pca"),
        "quantizer": (load_quantizer, "int8"),
        "model": (CompressedModel.load, "model"),
        "static": (StaticModel.load, "static"),
    }[kind]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "out"
        folder.mkdir()
        write(folder / "config.json", config)
        with pytest.raises(DemitasseError, match="refusing to replace") as caught:
            load(saved / name).save(folder)
        check_message(str(caught.value))


# ---- 3. result records and reports ------------------------------------------------------------

TASKS = ["sts", "classification", "retrieval", "clustering", "translation", "efficiency"]
METRICS = ["spearman", "accuracy", "ndcg@10", "v_measure", "sentences_per_s", "queries_per_s",
           "vectors_per_s", "latency_p50_ms", "index_bytes"]  # fmt: skip
#: Names as a report shows them: mostly ordinary, now and then anything (TeX, a lone surrogate).
ODD_NAMES = st.sampled_from(["$}$", "$\\frac$", "$x$", "a\nb", "", "<b>&amp;", "|", "\\"])


def names(*usual: str) -> st.SearchStrategy[str]:
    ordinary = st.sampled_from(usual)
    return st.one_of(ordinary, ordinary, ordinary, ODD_NAMES, st.text(max_size=6))


def mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(usual, usual, usual, usual, odd)


#: JSON values that a strict reader accepts (finite, no huge integers, no lone surrogates).
PLAIN_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**9), 10**9)
    | st.floats(-1e9, 1e9)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
RECORDS = st.fixed_dictionaries(
    {
        "model": names("m", "n"),
        "method": names("none", "pca", "truncate"),
        "dim": st.sampled_from([1, 2, 4, 8, 384, 10**12]),
        "task": names(*TASKS),
        "dataset": names("STS12", "SciFact"),
        "metric": names(*METRICS),
        "score": mostly(
            st.floats(-1, 100),
            st.none() | st.floats(-1e30, 1e30) | st.integers(-(10**20), 10**20),
        ),
    },
    optional={
        "layer": mostly(st.none() | st.integers(1, 12), st.integers(0, 10**6)),
        "precision": names("float32", "int8", "binary"),
        "bytes_per_vector": st.none() | st.integers(0, 10**12),
        "fit_data": st.none() | st.text(max_size=6),
        "machine": st.text(max_size=6),
        "extra": st.dictionaries(
            st.sampled_from(["seed", "undefined", "model_dir", "score_std", "n_texts"]),
            PLAIN_JSON,
            max_size=3,
        ),
        "unknown": PLAIN_JSON,
    },
)
PLAIN_RECORD = {"model": "m", "method": "pca", "dim": 4, "task": "sts", "dataset": "STS12",
                "metric": "spearman", "score": 0.5}  # fmt: skip


@FUZZ
@given(content=JSON_TEXTS | BYTES, as_folder=st.booleans())
def test_read_records_any_json(content: str | bytes, as_folder: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp) / "results.json", content)
        records = clean(read_records, Path(tmp) if as_folder else Path(tmp) / "results.json")
        assert records is None or all(isinstance(r, ResultRecord) for r in records)


@pytest.mark.filterwarnings("ignore:Glyph")  # characters the font lacks are drawn as boxes
@FEW
@given(records=st.lists(RECORDS, min_size=1, max_size=4))
@example(records=[PLAIN_RECORD | {"dataset": "$}$"}])
@example(records=[PLAIN_RECORD | {"method": "$\\frac$"}])
@example(records=[PLAIN_RECORD | {"model": "\ud800"}])
@example(records=[PLAIN_RECORD | {"task": "\udfff"}])
@example(records=[PLAIN_RECORD | {"score": -1e308}, PLAIN_RECORD | {"dim": 2, "score": 1e308}])
@example(
    records=[PLAIN_RECORD | {"metric": "accuracy", "bytes_per_vector": 4}, PLAIN_RECORD]
)  # sizes only on records of another metric than the headline
def test_read_records_and_render_report(records: list[dict[str, Any]]) -> None:
    """Records that read_records accepts make a report, and can be written back."""
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp) / "results.json", to_json(records))
        accepted = clean(read_records, Path(tmp) / "results.json")
        if accepted is not None:
            render_report(accepted, Path(tmp) / "report")
            write_records(Path(tmp) / "again.json", accepted)
            assert len(read_records(Path(tmp) / "again.json")) == len(accepted)


# ---- 4. command-line specs --------------------------------------------------------------------

SPEC_NAMES = [
    "none",
    "truncate",
    "pca",
    "pca-whiten",
    "pca-abtt",
    "random",
    "adaptor",
    "smec",
    "mcr2",
    "isomap",
    "lle",
    "pooler",
]
SPEC_KEYS = [
    "whiten",
    "abtt",
    "seed",
    "dim",
    "n_neighbors",
    "reg",
    "hidden_dim",
    "device",
    "learning_rate",
    "validation_fraction",
    "activation",
    "topk",
    "min_dim",
    "x",
    "",
]
SPEC_VALUES = st.sampled_from(
    [
        "true",
        "False",
        "0",
        "-1",
        "3",
        "1e400",
        "nan",
        "inf",
        "auto",
        "cpu",
        "cuda",
        "0.5",
        "9" * 5000,
        "",
    ]
) | st.text(max_size=4)
SPEC_OPTIONS = st.builds(
    "{}{}{}".format, st.sampled_from(SPEC_KEYS), st.sampled_from(["=", "", "=="]), SPEC_VALUES
)
SPECS = st.builds(
    lambda name, options: ":".join([name, *options]),
    st.sampled_from(SPEC_NAMES),
    st.lists(SPEC_OPTIONS, max_size=3),
)


@FUZZ
@given(text=st.lists(SPECS | st.text(max_size=6), max_size=3).map(",".join) | st.text())
def test_parse_compressor_specs(text: str) -> None:
    specs = clean(parse_compressor_specs, text)
    assert specs is None or len(specs) >= 1


@FUZZ
@given(
    text=st.lists(
        st.integers() | st.sampled_from(["", " ", "1_0", "٣", "9" * 5000, "x"]), max_size=4
    ).map(lambda items: ",".join(map(str, items)))
    | st.text()
)
def test_parse_int_list(text: str) -> None:
    values = clean(parse_int_list, text, "--dims")
    assert values is None or all(isinstance(v, int) and v >= 1 for v in values)


@FUZZ
@given(
    text=st.lists(
        st.sampled_from(["float32", "int8", "binary", " int8 ", "INT8", ""]) | st.text(max_size=5),
        max_size=4,
    ).map(",".join)
    | st.text()
)
def test_parse_precisions(text: str) -> None:
    values = clean(parse_precisions, text)
    assert values is None or all(is_precision(v) for v in values)


# ---- 5. the command line ----------------------------------------------------------------------

#: Placeholders the test turns into files in a fresh folder (see ``_workspace``).
MODELS = st.sampled_from(["@model", "@pca", "@missing", "@vectors", "@emptydir"])
VECTORS = st.sampled_from(
    ["@vectors", "@narrow", "@f16", "@int", "@parquet", "@junk", "@missing", "@emptydir", "@texts"]
)
OUTPUTS = st.sampled_from(
    ["@out.npy", "@out.parquet", "@out.txt", "@emptydir", "@model", "@newdir/x.npy", "@vectors/x"]
)
WORDS = st.text(max_size=6) | st.sampled_from(["0", "1", "3", "-2", "1e9", "nan", "int8", "x\ny"])
DIMS = st.sampled_from(["1", "2", "4", "8", "0", "-1", "99", "x", "9" * 5000])
PRECISIONS = st.sampled_from(["float32", "int8", "binary", "int4"])


def options(*pairs: tuple[str, st.SearchStrategy[str] | None]) -> st.SearchStrategy[list[str]]:
    """Some of the flags, in any order; a flag with a strategy takes a value from it."""
    one = st.sampled_from(pairs).flatmap(
        lambda pair: st.just([pair[0]]) if pair[1] is None else pair[1].map(lambda v: [pair[0], v])
    )
    return st.lists(one, max_size=4).map(lambda parts: [token for part in parts for token in part])


COMMANDS = st.one_of(
    st.tuples(
        st.just(["transform"]),
        MODELS.map(lambda m: [m]),
        st.tuples(VECTORS, OUTPUTS).map(lambda io: ["--input", io[0], "--out", io[1]]),
        options(
            ("--dim", DIMS),
            ("--precision", PRECISIONS),
            ("--vector-column", WORDS),
            ("--normalize", None),
            ("--input", VECTORS),
        ),
    ),
    st.tuples(
        st.just(["encode"]),
        MODELS.map(lambda m: [m]),
        st.tuples(VECTORS, OUTPUTS).map(lambda io: ["--input", io[0], "--out", io[1]]),
        options(
            ("--dim", DIMS),
            ("--precision", PRECISIONS),
            ("--text-column", WORDS),
            ("--batch-size", DIMS),
        ),
    ),
    st.tuples(
        st.just(["fit", "--vectors"]),
        VECTORS.map(lambda v: [v]),
        OUTPUTS.map(lambda o: ["--out", o]),
        options(
            (
                "--compressor",
                st.sampled_from(
                    [
                        "none",
                        "pca",
                        "truncate",
                        "random",
                        "pca:whiten=true",
                        "pca:abtt=9",
                        "pca,pca",
                        "x",
                    ]
                ),
            ),
            ("--dim", DIMS),
            ("--precision", PRECISIONS),
            ("--normalize", None),
            ("--vector-column", WORDS),
            ("--fit-data", WORDS),
            ("--pairs", VECTORS),
            ("--texts", st.sampled_from(["@missing", "@emptydir"])),
            ("--queries", VECTORS),
            ("--beir", VECTORS),
            ("--batch-size", DIMS),
        ),
    ),
    st.tuples(
        st.just(["eval"]),
        options(
            ("--model", MODELS),
            ("--compressor", SPECS),
            ("--dims", DIMS),
            ("--precision", PRECISIONS),
            ("--layers", WORDS),
            ("--tasks", WORDS),
            ("--fit-data", WORDS),
            ("--limit", DIMS),
            ("--out", OUTPUTS),
        ),
        st.just([]),
        st.just(["--data-dir", "@missing"]),  # last: never reaches data or an encoder
    ),
    st.tuples(
        st.just(["report"]),
        st.lists(
            st.sampled_from(["@records", "@junk", "@missing", "@emptydir", "@badrecords"]),
            min_size=1,
            max_size=2,
        ),
        OUTPUTS.map(lambda o: ["--out", o]),
        options(("--title", WORDS)),
    ),
).map(lambda parts: [token for part in parts for token in part])


@FEW
@given(
    argv=COMMANDS,
    junk=st.lists(
        st.tuples(st.integers(0, 20), WORDS | st.sampled_from(["--", "-h", "--x"])), max_size=1
    ),
)
@example(argv=["transform", "@model", "--input", "@vectors", "--out", "@out.npy"], junk=[])
@example(
    argv=["transform", "@model", "--input", "@vectors", "--out", "@out.npy"], junk=[(2, "\x0c")]
)
@example(argv=["transform", "@model", "--input", "@vectors", "--out", "@out.npy"], junk=[(2, "\r")])
@example(argv=["transform", "no\nmodel", "--input", "@vectors", "--out", "@out.npy"], junk=[])
@example(argv=["report", "@records", "--out", "@newdir/r", "--title", "$}$\r"], junk=[])
def test_cli(
    saved: Path, capsys: pytest.CaptureFixture[str], argv: list[str], junk: list[tuple[int, str]]
) -> None:
    for index, token in junk:
        argv = [*argv[:index], token, *argv[index:]]
    with tempfile.TemporaryDirectory() as tmp:
        argv = [_workspace(Path(tmp), saved, token) for token in argv]
        capsys.readouterr()
        code = main(argv)
        err = capsys.readouterr().err
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        # One error line, after any one-line warnings.
        lines = err.splitlines()
        assert lines and lines[-1].startswith("demitasse: error:"), (argv, err)
        assert all(line.startswith("demitasse: warning:") for line in lines[:-1]), (argv, err)
        assert err == "\n".join(lines) + "\n", (argv, err)  # no stray line breaks


SUFFIXES = {
    "vectors": ".npy",
    "narrow": ".npy",
    "f16": ".npy",
    "int": ".npy",
    "junk": ".npy",
    "parquet": ".parquet",
    "texts": ".txt",
    "records": ".json",
    "badrecords": ".json",
}


def _workspace(root: Path, saved: Path, token: str) -> str:
    """The file a placeholder stands for, made on first use; other tokens stay as they are."""
    if not token.startswith("@"):
        return token
    name, _, rest = token[1:].partition("/")
    path = root / (name + SUFFIXES.get(name, ""))  # loaders go by the suffix
    rng = np.random.default_rng(2)
    if not path.exists():
        if name in ("model", "pca"):
            shutil.copytree(saved / name, path)
        elif name == "vectors":
            np.save(path, rng.standard_normal((20, WIDTH)).astype(np.float32))
        elif name == "narrow":
            np.save(path, rng.standard_normal((20, 3)).astype(np.float32))
        elif name == "f16":
            np.save(path, rng.standard_normal((20, WIDTH)).astype(">f2"))
        elif name == "int":
            np.save(path, rng.integers(-(2**62), 2**62, (20, WIDTH)))
        elif name == "parquet":
            flat = pa.array(rng.standard_normal(20 * WIDTH).astype(np.float32))
            table = pa.table({"embedding": pa.FixedSizeListArray.from_arrays(flat, WIDTH)})
            pq.write_table(table, path)
        elif name == "junk":
            write(path, b"\x93NUMPY\x01\x00junk")
        elif name == "texts":
            write(path, "a b\nc\n")
        elif name == "emptydir":
            path.mkdir()
        elif name == "records":
            record = {
                "model": "m",
                "method": "pca",
                "dim": 4,
                "task": "sts",
                "dataset": "STS12",
                "metric": "spearman",
                "score": 0.5,
            }
            write(path, to_json([record, record | {"dim": 2, "score": 0.4}]))
        elif name == "badrecords":
            write(path, to_json([{"model": "m"}]))
    return str(path / rest if rest else path)
