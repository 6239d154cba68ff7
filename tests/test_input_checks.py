"""#49 items 7 and 8: inputs checked alike by every command, and no noise on the way.

- Vectors are floats: integer vectors (int8 codes, packed bits, any integer dtype) are refused
  in one line by every reader of vectors (``.npy``, Parquet, shards, bulk, the Python API),
  never read as floats.
- Texts are strings: ``index`` refuses a number in the text field as ``fit``, ``encode`` and
  ``embed`` do, with the same words.
- Ids are unique: ``embed`` and ``recompress`` refuse a repeated id, naming both records, also
  across files and after ``--resume``.
- No noise: vectors with inf fail without numpy's overflow warnings, ``export`` calls no
  deprecated sentence-transformers method, and the learned compressors hand torch no read-only
  array (torch warns about those).
- One refusal per kind of input: a column named twice (CSV, TSV as Parquet), an input without
  a record (``embed`` and ``recompress`` as ``encode``), an empty comma-separated list flag
  and an empty ``serve --name`` are refused in one line, never taken for "not given".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse import CompressedModel
from demitasse.bulk import DemitasseRecompressor, load_manifest
from demitasse.cli.main import main
from demitasse.compress import MCR2, SMEC, MatryoshkaAdaptor, TrainingSettings
from demitasse.data import load_embeddings, read_documents, read_texts
from demitasse.errors import DataError, DemitasseError
from tests.conftest import REPO
from tests.helpers import build_tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WIDTH = 16
NOT_FLOATS = "values, not float vectors"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _vectors(n: int = 120, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, WIDTH)).astype(np.float32)


def _parquet(path: Path, vectors: np.ndarray, ids: list[str] | None = None) -> Path:
    values = pa.array(np.ascontiguousarray(vectors).reshape(-1))
    columns: dict[str, Any] = {
        "embedding": pa.FixedSizeListArray.from_arrays(values, vectors.shape[1])
    }
    if ids is not None:
        columns["id"] = ids
    pq.write_table(pa.table(columns), path, row_group_size=40)
    return path


@pytest.fixture(scope="module")
def vectors_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vectors-only PCA model of 16-wide vectors: transform and recompress need no encoder."""
    model = CompressedModel(None, compressor="pca", dim=8)
    model.fit(vectors=_vectors(), data_label="synthetic")
    return model.save(tmp_path_factory.mktemp("vectors-model") / "model")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=2)


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """Run ``argv`` with every warning an error: exit 2 and exactly one line on stderr."""
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert len(err.splitlines()) == 1 and err.startswith("demitasse: error:"), err
    for needle in needles:
        assert needle in err, err
    return err.strip()


# ---- vectors are floats --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int64"])
def test_integer_vectors_are_refused_by_the_file_readers(dtype: str, tmp_path: Path) -> None:
    codes = (_vectors() * 40).astype(dtype)
    np.save(tmp_path / "v.npy", codes)
    with pytest.raises(DataError, match=rf"v\.npy: {dtype} {NOT_FLOATS}"):
        load_embeddings(tmp_path / "v.npy")
    _parquet(tmp_path / "v.parquet", codes)
    with pytest.raises(DataError, match=rf"v\.parquet: column 'embedding': {dtype} {NOT_FLOATS}"):
        load_embeddings(tmp_path / "v.parquet")
    for floats in ("float16", "float32", "float64"):  # every float width is still read
        np.save(tmp_path / "f.npy", _vectors().astype(floats))
        assert load_embeddings(tmp_path / "f.npy").dtype == floats


def test_integer_vectors_end_transform_fit_and_recompress_in_one_line(
    vectors_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    codes = (_vectors() * 40).astype(np.int8)
    np.save(tmp_path / "codes.npy", codes)
    (tmp_path / "shards").mkdir()
    _parquet(tmp_path / "shards" / "codes.parquet", codes, [f"v{i}" for i in range(len(codes))])
    parquet = str(tmp_path / "shards" / "codes.parquet")
    model, out = str(vectors_model), tmp_path / "out"
    for source in (str(tmp_path / "codes.npy"), parquet):
        _fails(capsys, ["transform", model, "--input", source, "--out", f"{out}.npy"],
               f"int8 {NOT_FLOATS}")  # fmt: skip
        _fails(capsys, ["fit", "--vectors", source, "--compressor", "pca", "--dim", "4",
                        "--out", str(out)], f"int8 {NOT_FLOATS}")  # fmt: skip
    _fails(capsys, ["fit", "--vectors", f"{tmp_path}/shards/*.parquet", "--compressor", "pca",
                    "--dim", "4", "--out", str(out)], f"int8 {NOT_FLOATS}")  # fmt: skip
    _fails(capsys, ["recompress", model, "--input", parquet, "--out", str(out), "--quiet"],
           f"codes.parquet: column 'embedding': int8 {NOT_FLOATS}")  # fmt: skip
    assert not Path(f"{out}.npy").exists()
    manifest = load_manifest(out)
    assert manifest is not None and not manifest.shards and not manifest.complete


def test_the_python_api_refuses_integer_vectors(vectors_model: Path) -> None:
    model = CompressedModel.load(vectors_model)
    integers = np.arange(3 * WIDTH).reshape(3, WIDTH)
    with pytest.raises(DataError, match=f"vectors: int64 {NOT_FLOATS}"):
        model.transform(integers)
    with pytest.raises(DataError, match=f"vectors: int8 {NOT_FLOATS}"):
        CompressedModel(None, compressor="pca", dim=4).fit(vectors=integers.astype(np.int8))
    with pytest.raises(DataError, match=NOT_FLOATS):
        model.search_index(integers)
    actor = DemitasseRecompressor(str(vectors_model))
    rows = np.empty(3, dtype=object)
    rows[:] = list(integers.astype(np.int8))
    for column in (integers.astype(np.int8), rows):  # a 2-D array, or Ray's array of rows
        with pytest.raises(DataError, match=f"batch column 'embedding': int8 {NOT_FLOATS}"):
            actor({"embedding": column})
    halves = _vectors(3).astype(np.float16)  # floats of any width are vectors
    np.testing.assert_array_equal(model.transform(halves), model.transform(halves.astype("f4")))


# ---- texts are strings ---------------------------------------------------------------------


def test_index_refuses_a_number_as_text_as_fit_encode_and_embed_do(
    encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"_id": "a", "text": "a man"}\n{"_id": "b", "text": 7}\n', encoding="utf-8")
    refusal = f"{docs}:2: 'text' holds int, not a string"
    with pytest.raises(DataError, match=r"docs\.jsonl:2: 'text' holds int, not a string"):
        read_documents(docs)
    _fails(capsys, ["index", str(encoder), "--input", str(docs), "--db", str(tmp_path / "db")],
           refusal)  # fmt: skip
    assert not (tmp_path / "db").exists()
    # The same words from every reader of texts (their place: "line 2" or ":2").
    same = f"{docs}: line 2: 'text' holds int, not a string"
    _fails(capsys, ["fit", "--model", str(encoder), "--texts", str(docs), "--out",
                    str(tmp_path / "m")], same)  # fmt: skip
    _fails(capsys, ["encode", str(encoder), "--input", str(docs), "--out",
                    str(tmp_path / "e.npy")], same)  # fmt: skip
    _fails(capsys, ["embed", str(encoder), "--input", str(docs), "--out", str(tmp_path / "o"),
                    "--quiet"], "line 2: 'text' holds int, not a string")  # fmt: skip


def test_table_documents_refuse_numbers_as_text_or_title_but_take_integer_ids(
    tmp_path: Path,
) -> None:
    table = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": [1, 2], "text": [3, 4]}), table)
    with pytest.raises(DataError, match=r"docs\.parquet: row 0: 'text' holds int, not a string"):
        read_documents(table)
    titled = tmp_path / "titled.jsonl"
    titled.write_text('{"_id": 1, "title": 5, "text": "a man"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"titled\.jsonl:1: 'title' holds int, not a string"):
        read_documents(titled)
    titled.write_text('{"_id": 1, "title": "Men", "text": "a man"}\n', encoding="utf-8")
    assert read_documents(titled) == (["1"], ["Men a man"])
    with pytest.raises(DataError, match=r"docs\.parquet: row 0: 'text' holds int, not a string"):
        read_texts(table)


# ---- ids are unique ------------------------------------------------------------------------


def _recompress(model: Path, inputs: str, out: Path, *extra: str) -> list[str]:
    return ["recompress", str(model), "--input", inputs, "--out", str(out), "--shard-rows",
            "32", "--batch-size", "10", "--quiet", *extra]  # fmt: skip


def test_recompress_refuses_a_repeated_id_naming_both_rows_also_after_resume(
    vectors_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [f"v{i}" for i in range(120)]
    ids[70] = "v3"  # shard 2 (rows 64-95) repeats an id of shard 0
    source = _parquet(tmp_path / "v.parquet", _vectors(), ids)
    out = tmp_path / "out"
    refusal = f"{source}: row 70: duplicate id 'v3' (first on row 3)"
    _fails(capsys, _recompress(vectors_model, str(source), out), refusal)
    manifest = load_manifest(out)
    assert manifest is not None and [s["shard"] for s in manifest.shards] == [0, 1]
    # A resumed run counts the ids of the shards already written: the same refusal.
    _fails(capsys, _recompress(vectors_model, str(source), out, "--resume"), refusal)
    # --on-error skip is for shards that cannot be read, not for a repeated id.
    _fails(capsys, _recompress(vectors_model, str(source), tmp_path / "skip", "--on-error",
                               "skip"), refusal)  # fmt: skip


def test_a_repeated_id_across_files_names_both_files(
    vectors_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _parquet(tmp_path / "a.parquet", _vectors(50), [f"a{i}" for i in range(50)])
    _parquet(tmp_path / "b.parquet", _vectors(50, 1), [f"b{i}" for i in range(2)] + ["a45"] * 48)
    argv = _recompress(vectors_model, f"{tmp_path}/*.parquet", tmp_path / "out")
    _fails(capsys, argv, f"{tmp_path}/b.parquet: row 2: duplicate id 'a45' (first on "
                         f"{tmp_path}/a.parquet: row 45)")  # fmt: skip


def test_embed_refuses_a_repeated_id_naming_both_lines(
    encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ['{"id": "x", "text": "a man"}', "", '{"id": "y", "text": "a dog"}',
             '{"id": "x", "text": "a cat"}']  # fmt: skip
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["embed", str(encoder), "--input", str(corpus), "--id-column", "id", "--out",
            str(tmp_path / "out"), "--quiet"]  # fmt: skip
    _fails(capsys, argv, f"{corpus}:4: duplicate id 'x' (first on line 1)")
    # Without --id-column the ids are positions, which cannot repeat.
    assert main([*argv[:4], "--out", str(tmp_path / "positional"), "--quiet"]) == 0


def test_ids_that_only_share_a_hash_never_stop_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every id hashed alike: only a real repeat is refused, after reading the earlier id."""
    import demitasse.bulk.ids as ids_module
    from demitasse.bulk.ids import DuplicateIdError, SeenIds

    written: dict[tuple[int, int], str] = {}
    seen = SeenIds(lambda f, r: written[f, r], lambda f, r: (f"f{f}", ("row", r)))
    monkeypatch.setattr(ids_module, "hash", lambda value: 7, raising=False)
    for shard in range(6):
        names = [f"id{shard}-{i}" for i in range(5)]
        seen.add(names, 0, 5 * shard)
        written.update({(0, 5 * shard + i): name for i, name in enumerate(names)})
        seen.close_shard()
    assert len(seen) == 30
    with pytest.raises(
        DuplicateIdError, match=r"f0: row 31: duplicate id 'id2-3' \(first on row 13\)"
    ):
        seen.add(["new", "id2-3"], 0, 30)


def test_many_shards_of_ids_merge_without_loss() -> None:
    from demitasse.bulk.ids import DuplicateIdError, SeenIds

    seen = SeenIds(lambda f, r: f"{f}-{r}", lambda f, r: (f"f{f}", ("row", r)))
    for file in range(3):
        for shard in range(40):
            first = 25 * shard
            seen.add([f"{file}-{first + i}" for i in range(25)], file, first)
            seen.close_shard()
    assert len(seen) == 3000 and len(seen._runs) <= 12  # merged as they grew
    with pytest.raises(
        DuplicateIdError, match=r"f2: row 1000: duplicate id '1-617' \(first on f1: row 617\)"
    ):
        seen.add(["1-617"], 2, 1000)


# ---- no noise ------------------------------------------------------------------------------


def test_vectors_with_inf_fail_in_one_line_without_numpy_warnings(
    vectors_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = _vectors()
    x[5, :2] = [np.inf, -np.inf]  # one row: its sum is NaN ("invalid value" in numpy)
    x[9, :] = 3e38  # finite, but its sum overflows float32
    np.save(tmp_path / "inf.npy", x)
    model = CompressedModel.load(vectors_model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match="vectors row 5 contains NaN or inf"):
            model.transform(x)
        with pytest.raises(DataError, match="vectors row 5 contains NaN or inf"):
            CompressedModel(None, compressor="pca", dim=4).fit(vectors=x)
    _fails(capsys, ["transform", str(vectors_model), "--input", str(tmp_path / "inf.npy"),
                    "--out", str(tmp_path / "o.npy")], "row 5 contains NaN or inf")  # fmt: skip
    wide = _vectors().astype(np.float64)
    wide[4, 3] = 1e300  # no float32 holds it: named, not cast to inf with a warning
    _parquet(tmp_path / "wide.parquet", wide)
    too_large = "wide.parquet: column 'embedding': row 4 holds a value too large for float32"
    _fails(capsys, ["transform", str(vectors_model), "--input", str(tmp_path / "wide.parquet"),
                    "--out", str(tmp_path / "o.npy")], too_large)  # fmt: skip


def test_export_calls_no_deprecated_sentence_transformers_method(
    encoder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sentence-transformers >= 6.2 logs "The `tokenize` method is deprecated" once a process:
    a spy sees the call whichever test made the process log it first."""
    modules = pytest.importorskip("sentence_transformers.base.modules.input_module")
    if not hasattr(modules.InputModule, "preprocess"):
        pytest.skip("this sentence-transformers has tokenize only")
    calls: list[Any] = []
    real = modules.InputModule.tokenize

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(modules.InputModule, "tokenize", spy)
    capsys.readouterr()
    assert main(["export", str(encoder), "--out", str(tmp_path / "export")]) == 0
    assert not calls
    assert "deprecated" not in capsys.readouterr().err
    assert (tmp_path / "export" / "onnx" / "model.onnx").is_file()


FAST = TrainingSettings(max_epochs=2, batch_size=64, device="cpu", progress=False)
LEARNED = {
    "adaptor": lambda: MatryoshkaAdaptor(dim=8, min_dim=4, hidden_dim=16, training=FAST),
    "smec": lambda: SMEC(dim=8, min_dim=4, hidden_dim=16, training=FAST),
    "mcr2": lambda: MCR2(dim=4, n_clusters=2, hidden_dim=16, training=FAST),
}


@pytest.mark.parametrize("method", sorted(LEARNED))
def test_learned_compressors_hand_torch_no_read_only_array_and_fit_alike(
    method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch warns (once a process) when given a read-only array, as a memory-mapped .npy is:
    a spy refuses one, and the fit on the memory map equals the fit on a writable copy."""
    import torch

    x = _vectors(200)
    np.save(tmp_path / "x.npy", x)
    mapped = load_embeddings(tmp_path / "x.npy")
    assert not mapped.flags.writeable
    from_numpy, as_tensor = torch.from_numpy, torch.as_tensor

    def writable_only(real: Any) -> Any:
        def convert(data: Any, *args: Any, **kwargs: Any) -> Any:
            assert not isinstance(data, np.ndarray) or data.flags.writeable, "read-only array"
            return real(data, *args, **kwargs)

        return convert

    monkeypatch.setattr(torch, "from_numpy", writable_only(from_numpy))
    monkeypatch.setattr(torch, "as_tensor", writable_only(as_tensor))
    on_map = LEARNED[method]().fit(mapped)
    codes = on_map.transform(mapped)
    monkeypatch.undo()
    on_copy = LEARNED[method]().fit(np.array(x))
    assert on_map._state().keys() == on_copy._state().keys()
    for key, value in on_map._state().items():
        np.testing.assert_array_equal(value, on_copy._state()[key], err_msg=key)
    np.testing.assert_array_equal(codes, on_copy.transform(np.array(x)))


def test_an_adaptor_fit_on_a_npy_file_prints_no_warning(tmp_path: Path) -> None:
    """The command line in a fresh process, where torch's warning would show (once)."""
    np.save(tmp_path / "x.npy", _vectors(200))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1",
               DEMITASSE_CACHE=str(tmp_path / "cache"))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "demitasse", "fit", "--vectors", str(tmp_path / "x.npy"),
         "--compressor", "adaptor", "--dim", "4", "--out", str(tmp_path / "m")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr.lower(), done.stderr
    assert json.loads((tmp_path / "m" / "config.json").read_text())["compressor"] == "compressor"


# ---- one refusal per kind of input (the edge probe's findings) -----------------------------


def _two_text_columns(path: Path) -> Path:
    """A table whose header names the text column twice (CSV, TSV or Parquet)."""
    if path.suffix == ".parquet":
        schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("text", pa.string())])
        columns = [pa.array(["a", "b"]), pa.array(["a man", "a dog"]), pa.array(["x", "y"])]
        pq.write_table(pa.Table.from_arrays(columns, schema=schema), path)
        return path
    sep = "\t" if path.suffix == ".tsv" else ","
    lines = [["id", "text", "text"], ["a", "a man", "x"], ["b", "a dog", "y"]]
    path.write_text("".join(sep.join(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet"])
def test_a_column_named_twice_is_refused_in_every_table_format_alike(
    suffix: str, encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CSV and TSV headers are checked as Parquet schemas are: two columns of the name asked
    for are refused (neither is the one meant), by every reader of texts and documents."""
    table = _two_text_columns(tmp_path / f"docs{suffix}")
    refusal = f"docs{suffix}: 2 columns are named 'text'; rename all but one"
    for read in (read_texts, read_documents):
        with pytest.raises(DataError, match=re.escape(refusal)):
            read(table)
    assert read_texts(table, column="id") == ["a", "b"]  # only the columns read are checked
    _fails(capsys, ["encode", str(encoder), "--input", str(table), "--out",
                    str(tmp_path / "e.npy")], refusal)  # fmt: skip
    _fails(capsys, ["index", str(encoder), "--input", str(table), "--db", str(tmp_path / "db")],
           refusal)  # fmt: skip
    assert not (tmp_path / "e.npy").exists() and not (tmp_path / "db").exists()


def test_bulk_commands_refuse_a_parquet_column_named_twice(
    encoder: Path, vectors_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _two_text_columns(tmp_path / "docs.parquet")
    _fails(capsys, ["embed", str(encoder), "--input", str(table), "--out", str(tmp_path / "o"),
                    "--quiet"], "docs.parquet: 2 columns are named 'text'")  # fmt: skip
    values = pa.FixedSizeListArray.from_arrays(pa.array(_vectors(4).reshape(-1)), WIDTH)
    schema = pa.schema([("embedding", values.type), ("id", pa.string()), ("id", pa.string())])
    ids = pa.array(["a", "b", "c", "d"])
    pq.write_table(pa.Table.from_arrays([values, ids, ids], schema=schema), tmp_path / "v.parquet")
    _fails(capsys, _recompress(vectors_model, str(tmp_path / "v.parquet"), tmp_path / "r"),
           "v.parquet: 2 columns are named 'id'")  # fmt: skip


def test_embed_and_recompress_refuse_inputs_without_a_record_before_writing(
    encoder: Path, vectors_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In encode's words ("file is empty", "no text found"), before any output is made; a
    glob where only some files are empty is read as it is."""
    folder = tmp_path.resolve()
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blank.jsonl").write_text("\n  \n", encoding="utf-8")
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), folder / "none.parquet")
    out = folder / "out"
    for name, refusal in [("empty.txt", "file is empty"), ("blank.jsonl", "file is empty"),
                          ("none.parquet", "no text found")]:  # fmt: skip
        said = _fails(capsys, ["encode", str(encoder), "--input", str(folder / name), "--out",
                               str(folder / "e.npy")], f"{folder / name}: {refusal}")  # fmt: skip
        argv = ["embed", str(encoder), "--input", str(folder / name), "--out", str(out)]
        assert _fails(capsys, [*argv, "--quiet"]) == said  # the same line, word for word
        assert not out.exists()
    (folder / "all-empty").mkdir()
    (folder / "all-empty" / "a.txt").write_bytes(b"")
    (folder / "all-empty" / "b.jsonl").write_text("\n", encoding="utf-8")
    glob = str(folder / "all-empty" / "*")
    _fails(capsys, ["embed", str(encoder), "--input", glob, "--out", str(out), "--quiet"],
           "no text found: the 2 input files", "are all empty")  # fmt: skip
    assert not out.exists()
    (folder / "all-empty" / "c.txt").write_text("a man\na dog\n", encoding="utf-8")
    assert main(["embed", str(encoder), "--input", glob, "--out", str(out), "--quiet"]) == 0
    assert "2 rows in 1 shards" in capsys.readouterr().out
    # A resumed run whose input has since been emptied: refused, the manifest untouched.
    manifest = (out / "manifest.json").read_bytes()
    (folder / "all-empty" / "c.txt").write_bytes(b"")
    _fails(capsys, ["embed", str(encoder), "--input", glob, "--out", str(out), "--resume",
                    "--quiet"], "no text found")  # fmt: skip
    assert (out / "manifest.json").read_bytes() == manifest
    values = pa.array([], pa.list_(pa.float32(), WIDTH))
    pq.write_table(pa.table({"embedding": values}), folder / "none-v.parquet")
    _fails(capsys, _recompress(vectors_model, str(folder / "none-v.parquet"), folder / "r"),
           f"{folder / 'none-v.parquet'}: no vectors found")  # fmt: skip
    assert not (folder / "r").exists()


@pytest.mark.parametrize(
    ("command", "flag"),
    [("eval", "--dims"), ("eval", "--tasks"), ("eval", "--layers"), ("eval", "--compressor"),
     ("eval", "--precision"), ("eval", "--datasets"), ("eval", "--beir"), ("eval", "--rescore"),
     ("train", "--data"), ("train", "--matryoshka-dims"), ("tune", "--compressors"),
     ("tune", "--codes"), ("tune", "--backends")],
)  # fmt: skip
def test_an_empty_list_flag_is_refused_never_read_as_not_given(
    command: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--dims ''`` once ran with the default widths: every comma-separated flag shares one
    check, which refuses a list with no item."""
    for empty in ("", " ", ",", " , "):
        _fails(capsys, [command, flag, empty, "--out", str(tmp_path / "out")],
               f"argument {flag}: is empty")  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_the_shared_list_parser_refuses_an_empty_list() -> None:
    from demitasse.cli.specs import parse_int_list

    assert parse_int_list("64,,32,", "--dims") == [64, 32]  # blank items are skipped
    with pytest.raises(DemitasseError, match="--dims is empty"):
        parse_int_list(" , ", "--dims")


def test_serve_refuses_an_empty_model_name(
    encoder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Clients name the model in every request and find it in /v1/models: an empty name
    cannot be sent by OpenAI's clients, so it is refused, on the command line and in the
    library, before a port is taken or the model loads."""
    pytest.importorskip("fastapi")
    from demitasse.serve import ServeSettings

    for name in ("", "   "):
        _fails(capsys, ["serve", str(encoder), "--port", "0", "--name", name],
               "argument --name: is empty")  # fmt: skip
        with pytest.raises(DemitasseError, match="the model name is empty"):
            ServeSettings(name=name)
    assert ServeSettings(name="tiny").name == "tiny"


def test_an_input_that_is_a_symlink_loop_is_one_line(tmp_path: Path) -> None:
    """Path.resolve raises RuntimeError on a symlink loop (Python < 3.13): embed and
    recompress, which expand --input as a glob, refuse it in one line."""
    from demitasse.bulk.sources import expand_inputs

    (tmp_path / "loop.txt").symlink_to("loop.txt")
    with pytest.raises(DataError, match="Symlink loop"):
        expand_inputs(str(tmp_path / "loop.txt"), ("text",))
