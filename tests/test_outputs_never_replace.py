"""Issue #49, "Outputs never replace what the user wrote": items 4, 9 and the last part of 8.

- 4: a folder output replaces an earlier one only when every file in it is one demitasse wrote
  there (its marker lists each with its size and SHA-256); a file output is never one of the
  command's inputs and replaces an existing file only with ``--overwrite``; ``index`` writes
  only into a new or empty folder or a database demitasse created.
- 9: what a killed run (``kill -9``) left beside an output is removed by the next run on it.
- 8: an error names the user's target, never a hidden temporary (``.dt-…``).

Each test failed on the code the issue was filed against. Every refusal is exit code 2 and one
line on stderr, and leaves every file as it was.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.io import MARKER, STALE_SECONDS, atomic_directory
from tests.conftest import REPO
from tests.helpers import SCORED_PAIRS as PAIRS
from tests.helpers import write_cli_inputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    found = write_cli_inputs(tmp_path_factory.mktemp("inputs"))
    root = found["root"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMITASSE_CACHE", str(root / "cache"))
        fit = ["fit", "--model", str(found["tiny"]), "--texts", str(found["texts"]), "--no-onnx"]
        assert main([*fit, "--compressor", "pca", "--out", str(root / "text-model")]) == 0
    return {**found, "text-model": root / "text-model"}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, files: dict[str, Path]) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(files["root"] / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """Run ``argv``: exit code 2, one line on stderr holding every needle, no temporary named."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert len(err.splitlines()) == 1 and err.startswith("demitasse: error:"), err
    assert all(needle in err for needle in needles), (needles, err)
    assert ".dt-" not in err, err
    return err.strip()


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".dt-*"))


# ---- 4. a folder is replaced only when every file in it is demitasse's -----------------------


def _folder_command(name: str, files: dict[str, Path], data_dir: Path) -> list[str]:
    if name == "fit":
        return ["fit", "--vectors", str(files["vectors"]), "--compressor", "pca", "--dim", "4"]
    if name == "export":
        return ["export", str(files["tiny"]), "--layer", "1"]
    return ["eval", "--model", str(files["tiny"]), "--datasets", str(files["pairs"]),
            "--fit-data", str(files["texts"]), "--data-dir", str(data_dir)]  # fmt: skip


@pytest.mark.parametrize("command", ["fit", "export", "eval"])
def test_4_a_folder_holding_a_file_demitasse_did_not_write_is_refused(
    command: str,
    files: dict[str, Path],
    data_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = _folder_command(command, files, data_dir)
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 0
    kind = json.loads((out / MARKER).read_text())["kind"]
    # The user's file beside the output, one inside a folder of it, a file changed since, and
    # a folder of the user's files with a forged marker (as an earlier demitasse wrote it).
    added, nested, changed, forged = (tmp_path / name for name in ("a", "b", "c", "d"))
    for copy in (added, nested, changed):
        shutil.copytree(out, copy)
    (added / "notes.txt").write_text("mine")
    inner = next(p for p in sorted(nested.rglob("*")) if p.is_dir())
    (inner / "figure.png").write_bytes(b"\x89PNG mine")
    edited = next(p for p in sorted(changed.rglob("*")) if p.is_file() and p.name != MARKER)
    edited.write_bytes(edited.read_bytes() + b" ")
    forged.mkdir()
    (forged / "thesis.tex").write_text("precious")
    (forged / MARKER).write_text(json.dumps({"kind": kind, "complete": True}))
    before = _tree(tmp_path)
    _fails(capsys, [*argv, "--out", str(added)], "refusing to replace", "notes.txt")
    _fails(capsys, [*argv, "--out", str(nested)], "refusing to replace", "figure.png")
    _fails(capsys, [*argv, "--out", str(changed)], "refusing to replace", edited.name)
    _fails(capsys, [*argv, "--out", str(forged)], "refusing to replace", "thesis.tex")
    assert _tree(tmp_path) == before
    # The earlier output as demitasse wrote it is replaced, and the new one is complete.
    assert main([*argv, "--out", str(out)]) == 0
    assert json.loads((out / MARKER).read_text())["kind"] == kind
    assert not _temporaries(tmp_path)


def test_4_tune_refuses_a_model_folder_holding_the_users_files(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers import write_beir

    model = tmp_path / "model"
    shutil.copytree(files["pca"], model)
    (model / "notes.txt").write_text("mine")
    forged = tmp_path / "forged"
    forged.mkdir()
    (forged / "weights.bin").write_bytes(b"\0" * 8)
    (forged / MARKER).write_text(json.dumps({"kind": "model", "complete": True}))
    beir = write_beir(tmp_path / "beir")
    before = _tree(tmp_path)
    tune = ["tune", "--model", str(files["tiny"]), "--beir", str(beir), "--min-retention", "0.9"]
    _fails(capsys, [*tune, "--out", str(model)], "refusing to replace", "notes.txt")
    _fails(capsys, [*tune, "--out", str(forged)], "refusing to replace", "weights.bin")
    assert _tree(tmp_path) == before


def test_4_a_report_written_into_an_evaluation_keeps_it_replaceable(
    files: dict[str, Path], data_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    argv = [*_folder_command("eval", files, data_dir), "--out", str(out)]
    assert main(argv) == 0
    # The report folder is an output of its own (its own marker): replaced by 'report', and
    # still demitasse's when the evaluation is run again.
    assert main(["report", str(out), "--out", str(out / "report"), "--title", "again"]) == 0
    assert main(argv) == 0
    assert not _temporaries(tmp_path)


# ---- 4. a file output is never an input, and replaces a file only with --overwrite -----------


def test_4_a_file_output_never_replaces_an_input_of_its_command(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    vectors = tmp_path / "v.npy"
    shutil.copy(files["vectors"], vectors)
    (tmp_path / "hard.npy").hardlink_to(vectors)
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": [a for a, _, _ in PAIRS]}), table)
    model = tmp_path / "model"
    shutil.copytree(files["text-model"], model)
    before = _tree(tmp_path)
    transform = ["transform", str(files["pca"]), "--input", str(vectors), "--out"]
    for flags in ([], ["--overwrite"]):
        _fails(capsys, [*transform, str(vectors), *flags], "is the input", str(vectors))
        _fails(capsys, [*transform, str(tmp_path / "hard.npy"), *flags], "is the input")
        _fails(capsys, [*transform, f"{tmp_path}/x/../v.npy", *flags], "is the input")
        encode = ["encode", str(model), "--input", str(table), *flags, "--out"]
        _fails(capsys, [*encode, str(table)], "is the input", str(table))
        # Nor inside an input folder: the model directory.
        _fails(capsys, [*encode, str(model / "codes.npy")], "is inside the input", str(model))
    assert _tree(tmp_path) == before
    assert not (tmp_path / "x").exists()


def test_4_an_existing_file_is_replaced_only_with_overwrite(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    codes, vectors = tmp_path / "codes.parquet", tmp_path / "vectors.npy"
    codes.write_bytes(b"the user's table")
    vectors.write_bytes(b"the user's array")
    transform = ["transform", str(files["pca"]), "--input", str(files["vectors"]), "--out"]
    encode = ["encode", str(files["text-model"]), "--input", str(files["texts"]), "--out"]
    _fails(capsys, [*transform, str(codes)], "refusing to replace", "--overwrite")
    _fails(capsys, [*encode, str(vectors)], "refusing to replace", "--overwrite")
    assert codes.read_bytes() == b"the user's table"
    assert vectors.read_bytes() == b"the user's array"
    assert main([*transform, str(codes), "--overwrite"]) == 0
    assert main([*encode, str(vectors), "--overwrite"]) == 0
    assert np.load(vectors).shape[0] == 2 * len(PAIRS)
    # One rule, whoever wrote the file: demitasse's own output too.
    _fails(capsys, [*encode, str(vectors)], "--overwrite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.parquet", "vectors.npy"]


# ---- 4. a folder output is never an input either: export -----------------------------------


def test_4_export_never_replaces_the_model_or_encoder_it_reads(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A model directory without its graph: ``export --format onnx`` would write it beside the
    # parts, so that writing the model over itself replaced the user's folder with a copy.
    model = tmp_path / "model"
    shutil.copytree(files["text-model"], model)
    (tmp_path / "link").symlink_to(model)
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    onnx = ["export", str(model), "--format", "onnx", "--out"]
    for out in (str(model), f"{model}/", "model", "./model/", f"{tmp_path}/x/../model", "link"):
        _fails(capsys, [*onnx, out], "refusing to write", "is the input", str(model))
        _fails(capsys, ["export", "model/", "--out", out], "is the input", "model/")
    _fails(capsys, [*onnx, "model/with-graph"], "is inside the input", str(model))
    assert _tree(tmp_path) == before
    assert not (tmp_path / "x").exists()
    # Nor the encoder the model reads: here an earlier export, which an export may replace.
    encoder, fitted = tmp_path / "encoder", tmp_path / "fitted"
    assert main(["export", str(files["tiny"]), "--layer", "1", "--out", str(encoder)]) == 0
    fit = ["fit", "--model", str(encoder), "--texts", str(files["texts"]), "--no-onnx"]
    assert main([*fit, "--out", str(fitted)]) == 0
    before = _tree(tmp_path)
    _fails(capsys, ["export", str(fitted), "--out", str(encoder)], "is the input", "encoder")
    _fails(capsys, ["export", str(encoder), "--out", str(tmp_path)], "holds the input")
    assert _tree(tmp_path) == before


# ---- 4. one rule for every command: no output is, holds or lies inside one of its inputs -----

#: An output is each of these to an input: the input itself, its folder, a path inside it.
RELATIONS = {"is": "is", "holds": "holds", "inside": "is inside"}
FOLDER, FILE = ("is", "holds", "inside"), ("is", "holds")
#: Folders an output may lie inside: results a report renders, the shared data folder.
MAY_NEST = ("is", "holds")
#: A file output cannot hold a folder (it is refused as a folder, whatever it holds), and one
#: named as a folder input is refused for its missing suffix: inside a folder, or a file itself.
IN_FOLDER, AS_FILE = ("inside",), ("is",)
_TUNE = "tune --model @encoder --min-retention 0.9"
_STATIC = "distill-static --corpus @texts --teacher @encoder"
#: (command line, the input it is checked against, how the output under test stands to it):
#: ``@name`` is that input (each in a folder of its own), ``@out`` the output under test and
#: ``@new`` a fresh folder for a command's other output.
OUTPUT_CASES = [
    *[("fit --model @encoder --texts @texts --no-onnx --out @out", name, relations)
      for name, relations in (("encoder", FOLDER), ("texts", FILE))],
    ("fit --vectors @vectors --compressor pca --dim 4 --out @out", "vectors", FILE),
    ("fit --vectors @shards --compressor pca --dim 4 --out @out", "shards", FOLDER),
    ("fit --vectors @shards/*.parquet --compressor pca --dim 4 --out @out", "shard", FILE),
    ("fit --model @encoder --texts @texts --pairs @pairs --out @out", "pairs", FILE),
    ("fit --model @encoder --texts @texts --beir @beir --out @out", "beir", FOLDER),
    *[("fit --model @encoder --texts @texts --corpus @corpus --queries @queries "
       "--qrels @qrels --out @out", name, FILE) for name in ("corpus", "queries", "qrels")],
    *[("eval --model @model --out @out", name, FOLDER) for name in ("model", "encoder")],
    *[("eval --model @encoder --fit-data @texts --datasets @pairs --out @out", name, relations)
      for name, relations in (("encoder", FOLDER), ("texts", FILE), ("pairs", FILE))],
    *[("eval --model @model --beir @beir --vectors @vectors --out @out", name, relations)
      for name, relations in (("beir", FOLDER), ("vectors", FILE))],
    *[("eval --model @model --corpus @corpus --queries @queries --qrels @qrels --out @out",
       name, FILE) for name in ("corpus", "queries", "qrels")],
    # Inside the shared data folder a results folder may go: its data sets are named files.
    ("eval --model @model --data-dir @data --out @out", "data", MAY_NEST),
    # A report may be written inside the results it renders (eval puts its own there).
    ("report @results --out @out", "results", MAY_NEST),
    ("report @results_json --out @out", "results_json", FILE),
    *[("demo --model @encoder --data-dir @data --out @out", name, relations)
      for name, relations in (("encoder", FOLDER), ("data", MAY_NEST))],
    *[(f"{_TUNE} --beir @beir {out}", name, FOLDER) for name in ("encoder", "beir")
      for out in ("--out @out", "--out @new --work-dir @out")],
    *[(f"{_TUNE} --corpus @corpus --queries @queries --qrels @qrels --out @out", name, FILE)
      for name in ("corpus", "queries", "qrels")],
    *[(f"{_TUNE} --pairs @pairs --static @static --out @out", name, relations)
      for name, relations in (("pairs", FILE), ("static", FOLDER))],
    *[("train --model @encoder --data-dir @data --out @out", name, relations)
      for name, relations in (("encoder", FOLDER), ("data", MAY_NEST))],
    ("train --model @encoder --exit-heads --frozen-encoder --distil 8 --texts @texts --out @out",
     "texts", FILE),
    *[(f"{_STATIC} {out}", name, relations)
      for name, relations in (("texts", FILE), ("encoder", FOLDER))
      for out in ("--out @out", "--out @new --model2vec @out", "--out @new --work-dir @out")],
    *[("export @model --out @out", name, FOLDER) for name in ("model", "encoder")],
    ("export @encoder --layer 1 --out @out", "encoder", FOLDER),
    *[("encode @model --input @table --out @out", name, relations)
      for name, relations in (("model", IN_FOLDER), ("encoder", IN_FOLDER), ("table", AS_FILE))],
    *[("transform @compressor --input @vectors --out @out", name, relations)
      for name, relations in (("compressor", IN_FOLDER), ("vectors", AS_FILE))],
    *[("transform @model --input @vectors --out @out", name, IN_FOLDER)
      for name in ("model", "encoder")],
    *[("embed @model --input @texts --out @out", name, relations)
      for name, relations in (("model", FOLDER), ("encoder", FOLDER), ("texts", FILE))],
    *[("recompress @model --input @shards/*.parquet --out @out", name, relations)
      for name, relations in (("model", FOLDER), ("shard", FILE))],
    *[("index @model --input @texts --db @out", name, relations)
      for name, relations in (("model", FOLDER), ("encoder", FOLDER), ("texts", FILE))],
    ("index @model --input @texts --vectors @vectors --db @out", "vectors", FILE),
]  # fmt: skip


def _digests(folder: Path) -> dict[str, str | None]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }  # fmt: skip


@pytest.fixture(scope="module")
def inputs(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every kind of input a command reads, each alone in a folder of its own (which holds it
    and nothing else), and a model whose local encoder folder is one of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.helpers import write_beir

    home = tmp_path_factory.mktemp("homes")
    found = {name: home / name / name for name in ("encoder", "shards", "static", "data")}
    shutil.copytree(files["tiny"], found["encoder"])
    found["shard"] = found["shards"] / "part-0.parquet"
    found["shards"].mkdir(parents=True)
    vectors = np.load(files["vectors"])
    pq.write_table(pa.table({"embedding": list(vectors)}), found["shard"])
    for name in ("static", "data"):
        found[name].mkdir(parents=True)
        (found[name] / "kept.txt").write_text("the user's")
    beir = write_beir(home / "beir" / "beir")
    for name, source in (("texts", files["texts"]), ("pairs", files["pairs"]),
                         ("vectors", files["vectors"]), ("corpus", beir / "corpus.jsonl"),
                         ("queries", beir / "queries.jsonl"),
                         ("qrels", beir / "qrels" / "test.tsv")):  # fmt: skip
        found[name] = home / name / source.name
        found[name].parent.mkdir()
        shutil.copy(source, found[name])
    found["table"] = home / "table" / "texts.parquet"
    found["table"].parent.mkdir()
    pq.write_table(pa.table({"text": [a for a, _, _ in PAIRS]}), found["table"])
    found["compressor"] = home / "compressor" / "pca"
    shutil.copytree(files["pca"], found["compressor"])
    found["results"] = home / "results" / "results"
    found["results"].mkdir(parents=True)
    found["results_json"] = found["results"] / "results.json"
    found["results_json"].write_text("[]")
    found["model"] = home / "model" / "model"
    fit = ["fit", "--model", str(found["encoder"]), "--texts", str(files["texts"]), "--no-onnx"]
    with pytest.MonkeyPatch.context() as patch:  # before the tests' own isolation
        patch.setenv("DEMITASSE_CACHE", str(files["root"] / "cache"))
        assert main([*fit, "--compressor", "pca", "--out", str(found["model"])]) == 0
    return {"home": home, "beir": beir, **found}


@pytest.mark.parametrize(
    ("command", "name", "relation"),
    [
        (command, name, relation)
        for command, name, relations in OUTPUT_CASES
        for relation in relations
    ],
)
def test_4_no_output_is_holds_or_lies_inside_an_input_of_its_command(
    command: str,
    name: str,
    relation: str,
    inputs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    given = inputs[name]
    suffix = "codes.npy" if command.split()[0] in ("encode", "transform") else "out"
    out = {"is": given, "holds": given.parent, "inside": given / suffix}[relation]
    paths = {**{key: str(path) for key, path in inputs.items()}, "out": str(out),
             "new": str(tmp_path / "new")}  # fmt: skip
    argv = [re.sub(r"@(\w+)", lambda m: paths[m[1]], word) for word in command.split()]
    before = _digests(inputs["home"])
    # Refused at once, before any model loads or data are read: the one rule, in one line
    # that names the input, whatever else the command would have said of that output.
    _fails(capsys, argv, f"it {RELATIONS[relation]} the input", given.name)
    assert _digests(inputs["home"]) == before
    assert not list(tmp_path.iterdir())


def test_4_every_output_flag_of_every_command_is_in_the_table() -> None:
    from demitasse.cli.main import build_parser
    from tests.test_vocabulary import _subparsers

    outputs = {"--out", "--db", "--work-dir", "--model2vec"}
    written = {
        (command, flag)
        for command, parser in _subparsers(build_parser()).items()
        for action in parser._actions
        for flag in set(action.option_strings) & outputs
    }
    tested = {(line.split()[0], flag) for line, _, _ in OUTPUT_CASES
              for flag in outputs if f"{flag} @out" in line}  # fmt: skip
    written.discard(("search", "--db"))  # read, never written
    assert written == tested, sorted(written ^ tested)


def test_4_eval_never_replaces_a_results_folder_holding_its_model(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An evaluation's folder into which the user put the model it evaluates: the model's own
    # marker makes it demitasse's, so the folder passed as a replaceable output.
    results = tmp_path / "results"
    with atomic_directory(results, kind="evaluation results") as tmp:
        (tmp / "results.json").write_text("[]")
    shutil.copytree(files["text-model"], results / "model")
    before = _tree(tmp_path)
    evaluate = ["eval", "--model", str(results / "model"), "--out", str(results)]
    _fails(capsys, evaluate, "holds the input", str(results / "model"))
    assert _tree(tmp_path) == before


def test_4_the_library_never_saves_a_model_into_its_own_encoder_folder(
    files: dict[str, Path],
) -> None:
    # The CLI's rule holds for CompressedModel.save too: a model saved inside (or as) its
    # encoder's folder would change the encoder's files, and with them its fingerprint.
    from demitasse import CompressedModel
    from demitasse.errors import DemitasseError

    model = CompressedModel.load(files["text-model"])
    encoder = files["tiny"]
    before = _tree(encoder)
    for target in (encoder / "demitasse-model", encoder):
        with pytest.raises(DemitasseError, match="input") as refused:
            model.save(target)
        assert str(encoder) in str(refused.value)
    assert _tree(encoder) == before
    elsewhere = model.save(files["root"] / "saved-elsewhere")  # the rule refuses nothing else
    assert CompressedModel.load(elsewhere).config() == model.config()


def test_4_outputs_of_one_command_are_apart(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The last output written would be refused (or replace the first) once the work is done.
    model = str(tmp_path / "m")
    tune = ["tune", "--model", str(files["tiny"]), "--pairs", str(files["pairs"]),
            "--min-retention", "0.9", "--out", model]  # fmt: skip
    _fails(capsys, [*tune, "--work-dir", model], "--work-dir", "is --out")
    _fails(capsys, [*tune, "--work-dir", f"{model}/work"], "is inside --out")
    static = ["distill-static", "--corpus", str(files["texts"]), "--teacher", str(files["tiny"]),
              "--out", model]  # fmt: skip
    _fails(capsys, [*static, "--model2vec", model], "--model2vec", "is --out")
    _fails(capsys, [*static, "--work-dir", str(tmp_path)], "--work-dir", "holds --out")
    assert not list(tmp_path.iterdir())


# ---- 4. index writes only into a database demitasse created ----------------------------------


def test_4_index_writes_only_into_a_new_folder_or_a_demitasse_database(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("lancedb")
    from demitasse.model import is_model_dir

    model = tmp_path / "model"
    shutil.copytree(files["text-model"], model)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    index = ["index", str(files["text-model"]), "--input", str(files["texts"]), "--db"]
    _fails(capsys, [*index, str(model)], "refusing to write a LanceDB table", str(model))
    _fails(capsys, [*index, str(mine)], "refusing to write a LanceDB table", "notes.txt")
    assert _tree(tmp_path) == before
    assert is_model_dir(model)
    from demitasse.store.lance import DATABASE_MARKER

    # A new folder, an empty one, and the database demitasse created there, again.
    (tmp_path / "empty").mkdir()
    for db in (tmp_path / "new", tmp_path / "empty"):
        assert main([*index, str(db)]) == 0
        assert (db / DATABASE_MARKER).is_file()
        assert main([*index, str(db), "--skip-existing"]) == 0
    # A database an earlier demitasse created (no marker, only its tables) is demitasse's too.
    (tmp_path / "new" / DATABASE_MARKER).unlink()
    assert main([*index, str(tmp_path / "new"), "--skip-existing"]) == 0


# ---- 9. what a killed run left is removed by the next run on the same target ----------------

WRITER = r"""
import sys, time
from pathlib import Path
from demitasse.io import atomic_directory, atomic_path

target = Path(sys.argv[1])
if sys.argv[2] == "folder":
    with atomic_directory(target, kind="sentence-transformers export") as tmp:
        (tmp / "model.safetensors").write_bytes(b"\0" * (1 << 20))
        print("writing", flush=True)
        time.sleep(120)
else:
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"\0" * (1 << 20))
        print("writing", flush=True)
        time.sleep(120)
"""


def _writer(target: Path, what: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), what], stdout=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    return writer


def _killed(target: Path, what: str) -> list[str]:
    """The temporaries a ``kill -9`` of a run writing ``target`` leaves beside it."""
    writer = _writer(target, what)
    writer.kill()
    writer.wait(timeout=60)
    left = _temporaries(target.parent)
    assert left, "the killed writer left nothing: the test would prove nothing"
    return left


def test_9_the_next_run_removes_what_a_killed_run_left(
    files: dict[str, Path], tmp_path: Path
) -> None:
    export = tmp_path / "export"
    _killed(export, "folder")
    assert main(["export", str(files["tiny"]), "--layer", "1", "--out", str(export)]) == 0
    assert not _temporaries(tmp_path) and (export / MARKER).is_file()
    codes = tmp_path / "codes.npy"
    _killed(codes, "file")
    transform = ["transform", str(files["pca"]), "--input", str(files["vectors"])]
    assert main([*transform, "--out", str(codes)]) == 0
    assert not _temporaries(tmp_path) and np.load(codes).shape == (60, 6)


def test_9_a_run_still_writing_the_same_target_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "export"
    writer = _writer(target, "folder")
    try:
        (writing,) = _temporaries(tmp_path)
        with atomic_directory(target, kind="sentence-transformers export") as tmp:
            (tmp / "model.safetensors").write_bytes(b"mine")
        assert writing in _temporaries(tmp_path)  # the other run's temporary is still there
    finally:
        writer.kill()
        writer.wait(timeout=60)


_KILLED_MID_SWAP = r"""
import os, signal, sys
from pathlib import Path
from demitasse.io import atomic_directory

rename = Path.replace
def rename_then_die(self, destination):
    moved = rename(self, destination)
    os.kill(os.getpid(), signal.SIGKILL)  # the old output is aside, the new one not yet in
Path.replace = rename_then_die
with atomic_directory(Path(sys.argv[1]), kind="test output") as tmp:
    (tmp / "data.txt").write_text("new")
"""


def test_9_an_output_a_killed_swap_moved_aside_comes_back(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with atomic_directory(target, kind="test output") as tmp:
        (tmp / "data.txt").write_text("old")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_SWAP, str(target)], env=env,
                            check=False, timeout=60)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert not target.exists() and len(_temporaries(tmp_path)) == 2  # old aside, new beside
    with pytest.raises(ZeroDivisionError), atomic_directory(target, kind="test output"):
        raise ZeroDivisionError  # a run that fails: the earlier output is back all the same
    assert (target / "data.txt").read_text() == "old"
    assert not _temporaries(tmp_path)
    # An output a run killed while deleting it left aside (the swap was done) is half deleted:
    # it is removed, never put back.
    from demitasse.io import _MACHINE, _target_tag

    shutil.rmtree(target)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=60)
    half = tmp_path / f"{_target_tag(target)}-{gone.pid}-{_MACHINE}-abcdefgh.old"
    half.mkdir()
    (half / MARKER).write_text("{}")
    with atomic_directory(target, kind="test output") as tmp:
        (tmp / "data.txt").write_text("newest")
    assert (target / "data.txt").read_text() == "newest"
    assert not _temporaries(tmp_path)


def test_9_another_machines_temporary_is_kept_until_it_is_a_day_old(tmp_path: Path) -> None:
    from demitasse.io import _target_tag  # the names a run gives its temporaries

    target = tmp_path / "out"
    tag = _target_tag(target)
    elsewhere = tmp_path / f"{tag}-123-0badcafe-abcdefgh.tmp"  # another machine's, on a share
    earlier = tmp_path / f"{tag}qym9f3jz.tmp"  # an earlier demitasse's, which named no process
    for leftover in (elsewhere, earlier):
        leftover.mkdir()
        (leftover / "part").write_text("half")
    with atomic_directory(target, kind="test output") as tmp:
        (tmp / "data.txt").write_text("new")
    assert sorted(_temporaries(tmp_path)) == sorted([elsewhere.name, earlier.name])
    long_ago = time.time() - STALE_SECONDS - 60
    for path in (elsewhere, earlier, elsewhere / "part", earlier / "part"):
        os.utime(path, (long_ago, long_ago))
    with atomic_directory(target, kind="test output") as tmp:
        (tmp / "data.txt").write_text("newer")
    assert not _temporaries(tmp_path)


# ---- 8. errors name the user's target, never the hidden temporary ---------------------------


def _unwritable_folder(patch: pytest.MonkeyPatch) -> None:
    """mkstemp and mkdtemp as in a folder the user may not write to: the error they raise
    names the temporary they tried to make."""

    def refused(*_: object, dir: str, prefix: str, suffix: str, **__: object) -> object:
        name = Path(dir) / f"{prefix}c2a6b03f{suffix}"
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(name))

    patch.setattr(tempfile, "mkstemp", refused)
    patch.setattr(tempfile, "mkdtemp", refused)


def test_8_errors_name_the_target_not_the_temporary(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, codes = tmp_path / "model", tmp_path / "codes.npy"
    fit = ["fit", "--vectors", str(files["vectors"]), "--compressor", "pca", "--out", str(model)]
    transform = ["transform", str(files["pca"]), "--input", str(files["vectors"]), "--out",
                 str(codes)]  # fmt: skip
    with monkeypatch.context() as patch:
        _unwritable_folder(patch)
        _fails(capsys, fit, "Permission denied", str(model))
        _fails(capsys, transform, "Permission denied", str(codes))
    rename = Path.replace

    def swap_fails(self: Path, destination: str | Path) -> Path:
        if self.name.startswith(".dt-"):  # the finished temporary moving in: the disk says no
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self), str(destination))
        return rename(self, destination)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "replace", swap_fails)
        _fails(capsys, fit, "Input/output error", str(model))
        _fails(capsys, transform, "Input/output error", str(codes))
    write_text = Path.write_text

    def marker_fails(self: Path, *args: object, **kwargs: object) -> int:
        if self.name == MARKER:  # the disk fills up as the marker is written
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return write_text(self, *args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(Path, "write_text", marker_fails)
        _fails(capsys, fit, "No space left", str(model))
    assert not list(tmp_path.iterdir())
