"""Every command with bad arguments: exit code 2, one line on stderr, nothing written.

The table has rows for every command of the parser (a new command without rows fails
:func:`test_every_command_has_rows`); bad numbers for every numeric flag and a bad value for
every flag with choices are generated from the parser itself. Every row must fail before any
model loads or any text is encoded: loading one fails the row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.cli.arguments import (
    backend_name,
    comma_list,
    non_blank,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
    precision_name,
)
from demitasse.cli.main import build_parser
from tests.helpers import build_tiny_model


def _commands() -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    return dict(subparsers.choices)


COMMANDS = _commands()

# Arguments that make each command otherwise valid, so a generated row has exactly one fault.
# Placeholders name files of the workspace fixture; {new} is a folder that must stay absent.
VALID = {
    "eval": ["--datasets", "{pairs}", "--fit-data", "{texts}", "--out", "{new}/results"],
    "report": ["{results}", "--out", "{new}/report"],
    "train": ["--model", "{tiny}", "--data", "stsb-train", "--out", "{new}/run"],
    "fit": ["--vectors", "{vectors}", "--compressor", "pca", "--out", "{new}/model"],
    "encode": ["{text_model}", "--input", "{texts}", "--out", "{new}/codes.npy"],
    "transform": ["{vector_model}", "--input", "{vectors}", "--out", "{new}/codes.npy"],
    "export": ["{tiny}", "--layer", "1", "--out", "{new}/export"],
    "distill-static": ["--corpus", "{texts}", "--teacher", "{tiny}", "--out", "{new}/static"],
    "demo": ["--model", "{tiny}", "--out", "{new}/demo"],
    "tune": [
        "--model",
        "{tiny}",
        "--corpus",
        "{texts}",
        "--min-retention",
        "0.9",
        "--out",
        "{new}/model",
    ],
    "serve": ["{text_model}", "--port", "0"],
    "index": ["{text_model}", "--input", "{texts}", "--db", "{new}/db"],
    "search": ["{text_model}", "--db", "{new}/db", "--query", "a cat"],
    "embed": ["{text_model}", "--input", "{texts}", "--out", "{new}/codes"],
    "recompress": ["{vector_model}", "--input", "{vectors}", "--out", "{new}/codes"],
    "cache": [],
}

# (command, arguments, a piece of the one-line message)
ROWS: list[tuple[str, list[str], str]] = [
    # eval
    ("eval", ["--datasets", "{pairs}"], "DEMITASSE_DATA"),
    ("eval", ["--data-dir", "{missing}"], "missing"),
    ("eval", ["--tasks", "sts,nope"], "unknown task 'nope'"),
    ("eval", ["--compressor", "svd"], "unknown compressor"),
    ("eval", ["--compressor", "pca:dim=4"], "--dim"),
    ("eval", ["--compressor", "pca:whiten=maybe"], "whiten"),
    ("eval", ["--dims", "0"], "--dims"),
    ("eval", ["--dims", "64,abc"], "--dims"),
    ("eval", ["--layers", "0"], "--layers"),
    ("eval", ["--precision", "int4"], "unknown precision"),
    ("eval", ["--beir", "{missing}"], "missing does not exist"),
    ("eval", ["--corpus", "{texts}"], "--corpus, --queries and --qrels go together"),
    ("eval", ["--rescore", "0"], "--rescore takes factors ≥ 1"),
    ("eval", ["--rescore", "4"], "--rescore applies to retrieval"),
    ("eval", ["--rescore-precision", "int8"], "--rescore-precision needs --rescore"),
    ("eval", ["--rotation", "itq"], "--rotation applies to binary codes"),
    ("eval", ["--out", "{notes}"], "refusing"),
    ("eval", ["--out", "{victim}"], "refusing to replace"),
    ("eval", ["--datasets", "{missing}.csv", "--data-dir", "{data}"], "missing.csv"),
    ("eval", ["--datasets", "{vectors}", "--data-dir", "{data}"], "v.npy"),
    (
        "eval",
        ["--datasets", "{pairs}", "--fit-data", "{missing}.txt", "--data-dir", "{data}"],
        "missing.txt",
    ),
    (
        "eval",
        ["--datasets", "{pairs}", "--fit-data", "{vectors}", "--data-dir", "{data}"],
        "v.npy",
    ),
    (
        "eval",
        ["--datasets", "{pairs}", "--fit-data", "{empty}", "--data-dir", "{data}"],
        "empty.txt",
    ),
    ("eval", ["--model", "{vector_model}", "--compressor", "pca"], "--compressor applies"),
    ("eval", ["--model", "{vector_model}", "--tasks", "efficiency"], "efficiency"),
    (
        "eval",
        [
            "--model",
            "{missing}",
            "--datasets",
            "{pairs}",
            "--fit-data",
            "{texts}",
            "--data-dir",
            "{data}",
        ],
        "missing",
    ),
    # report
    ("report", [], "required"),
    ("report", ["{results}"], "--out"),
    ("report", ["{missing}.json", "--out", "{new}/report"], "missing.json"),
    ("report", ["{vectors}", "--out", "{new}/report"], "v.npy"),
    ("report", ["{texts}", "--out", "{new}/report"], "texts.txt"),
    ("report", ["{bad_records}", "--out", "{new}/report"], "'dim'"),
    ("report", ["{no_records}", "--out", "{new}/report"], "no result records"),
    ("report", ["{results}", "--out", "{notes}"], "refusing"),
    ("report", ["{results}", "--out", "{victim}"], "refusing to replace"),
    # train
    ("train", [], "--out"),
    ("train", ["--out", "{new}/run", "--data", "nope"], "unknown training data nope"),
    ("train", ["--out", "{new}/run", "--data-dir", "{missing}"], "missing"),
    ("train", ["--out", "{new}/run", "--objective", "raw", "--exit-heads"], "--exit-heads"),
    ("train", ["--out", "{new}/run", "--matryoshka-dims", "64,abc"], "--matryoshka-dims"),
    ("train", ["--out", "{notes}"], "notes.txt"),
    ("train", ["--out", "{broken_run}"], "corrupt checkpoint"),
    # fit
    ("fit", [], "--out"),
    ("fit", ["--out", "{new}/model"], "--texts"),
    ("fit", ["--texts", "{texts}", "--vectors", "{vectors}", "--out", "{new}/model"], "one of"),
    ("fit", ["--vectors", "{missing}.npy", "--out", "{new}/model"], "missing.npy"),
    ("fit", ["--vectors", "{texts}", "--out", "{new}/model"], "texts.txt"),
    ("fit", ["--vectors", "{fake_npy}", "--out", "{new}/model"], "fake.npy"),
    ("fit", ["--vectors", "{nan_vectors}", "--out", "{new}/model"], "NaN"),
    ("fit", ["--vectors", "{vectors}", "--layer", "2", "--out", "{new}/model"], "--layer"),
    (
        "fit",
        ["--vectors", "{vectors}", "--pairs", "{pairs}", "--out", "{new}/model"],
        "vectors-only",
    ),
    ("fit", ["--vectors", "{vectors}", "--compressor", "svd", "--out", "{new}/model"], "svd"),
    (
        "fit",
        ["--vectors", "{vectors}", "--compressor", "pca:dim=4", "--out", "{new}/model"],
        "--dim",
    ),
    (
        "fit",
        ["--vectors", "{vectors}", "--compressor", "pca,truncate", "--out", "{new}/model"],
        "one compressor",
    ),
    ("fit", ["--vectors", "{vectors}", "--dim", "4", "--out", "{new}/model"], "--dim needs"),
    ("fit", ["--vectors", "{vectors}", "--out", "{notes}"], "refusing"),
    ("fit", ["--vectors", "{vectors}", "--out", "{victim}"], "refusing to replace"),
    (
        "fit",
        ["--model", "{tiny}", "--texts", "{missing}.txt", "--out", "{new}/model"],
        "missing.txt",
    ),
    ("fit", ["--model", "{tiny}", "--texts", "{vectors}", "--out", "{new}/model"], "v.npy"),
    ("fit", ["--model", "{tiny}", "--texts", "{empty}", "--out", "{new}/model"], "empty.txt"),
    (
        "fit",
        ["--model", "{tiny}", "--texts", "{texts}", "--compressor", "svd", "--out", "{new}/model"],
        "svd",
    ),
    ("fit", ["--model", "{tiny}", "--texts", "{texts}", "--out", "{victim}"], "refusing"),
    (
        "fit",
        [
            "--model",
            "{tiny}",
            "--texts",
            "{texts}",
            "--compressor",
            "adaptor",
            "--pairs",
            "{missing}.csv",
            "--out",
            "{new}/model",
        ],
        "missing.csv",
    ),
    (
        "fit",
        [
            "--model",
            "{tiny}",
            "--texts",
            "{texts}",
            "--compressor",
            "adaptor",
            "--queries",
            "{texts}",
            "--out",
            "{new}/model",
        ],
        "go together",
    ),
    (
        "fit",
        [
            "--model",
            "{tiny}",
            "--texts",
            "{texts}",
            "--compressor",
            "adaptor",
            "--beir",
            "{missing}",
            "--out",
            "{new}/model",
        ],
        "missing",
    ),
    # encode
    ("encode", [], "required"),
    ("encode", ["{text_model}", "--input", "{texts}"], "--out"),
    ("encode", ["{missing}", "--input", "{texts}", "--out", "{new}/o.npy"], "missing"),
    ("encode", ["{notes}", "--input", "{texts}", "--out", "{new}/o.npy"], "notes.txt"),
    (
        "encode",
        ["{text_model}", "--input", "{missing}.txt", "--out", "{new}/o.npy"],
        "missing.txt",
    ),
    ("encode", ["{text_model}", "--input", "{vectors}", "--out", "{new}/o.npy"], "v.npy"),
    ("encode", ["{text_model}", "--input", "{empty}", "--out", "{new}/o.npy"], "empty.txt"),
    (
        "encode",
        ["{text_model}", "--input", "{texts}", "--out", "{new}/o.csv"],
        "unsupported output type",
    ),
    ("encode", ["{text_model}", "--input", "{texts}", "--out", "{victim}"], "victim"),
    ("encode", ["{text_model}", "--input", "{texts}", "--out", "{folder_npy}"], "directory"),
    # A column names a part of a table; a .txt (one text a line) has none.
    (
        "encode",
        ["{text_model}", "--input", "{texts}", "--text-column", "body", "--out", "{new}/o.npy"],
        "texts.txt is a text file (one text a line): it has no column",
    ),
    (
        "fit",
        [
            "--model",
            "{tiny}",
            "--texts",
            "{texts}",
            "--text-column",
            "body",
            "--out",
            "{new}/model",
        ],
        "texts.txt is a text file (one text a line): it has no column",
    ),
    ("encode", ["{text_model}", "--input", "{texts}", "--out", "{link_npy}"], "symbolic link"),
    (
        "encode",
        ["{text_model}", "--input", "{texts}", "--out", "{new}/o.npy", "--dim", "9"],
        "dim 9 is not available",
    ),
    (
        "encode",
        ["{text_model}", "--input", "{texts}", "--out", "{new}/o.npy", "--precision", "int8"],
        "not available",
    ),
    (
        "encode",
        ["{vector_model}", "--input", "{texts}", "--out", "{new}/o.npy"],
        "vectors-only",
    ),
    # transform
    ("transform", [], "required"),
    ("transform", ["{missing}", "--input", "{vectors}", "--out", "{new}/o.npy"], "missing"),
    (
        "transform",
        ["{vector_model}", "--input", "{missing}.npy", "--out", "{new}/o.npy"],
        "missing.npy",
    ),
    (
        "transform",
        ["{vector_model}", "--input", "{texts}", "--out", "{new}/o.npy"],
        "texts.txt",
    ),
    (
        "transform",
        ["{vector_model}", "--input", "{narrow}", "--out", "{new}/o.npy"],
        "3 dimensions",
    ),
    (
        "transform",
        ["{vector_model}", "--input", "{nan_vectors}", "--out", "{new}/o.npy"],
        "NaN",
    ),
    (
        "transform",
        ["{vector_model}", "--input", "{vectors}", "--out", "{new}/o.txt"],
        "unsupported output type",
    ),
    (
        "transform",
        ["{vector_model}", "--input", "{vectors}", "--out", "{folder_npy}"],
        "directory",
    ),
    (
        "transform",
        ["{vector_model}", "--input", "{vectors}", "--out", "{new}/o.npy", "--dim", "9"],
        "dim 9 is not available",
    ),
    (
        "transform",
        [
            "{vector_model}",
            "--input",
            "{vectors}",
            "--out",
            "{new}/o.npy",
            "--precision",
            "int8",
        ],
        "not available",
    ),
    (
        "fit",
        ["--vectors", "{vectors}", "--compressor", "pca", "--backend", "onnx", "--out", "{new}/m"],
        "the onnx backend needs an encoder",
    ),
    # export
    ("export", [], "required"),
    ("export", ["{tiny}"], "--out"),
    ("export", ["{missing}", "--out", "{new}/export"], "missing"),
    ("export", ["{tiny}", "--layer", "1", "--out", "{victim}"], "refusing to replace"),
    ("export", ["{tiny}", "--layer", "1", "--out", "{notes}"], "refusing"),
    ("export", ["{tiny}", "--format", "model2vec", "--out", "{new}/export"], "tiny"),
    ("export", ["{vector_model}", "--out", "{new}/export"], "vectors-only"),
    ("export", ["{text_model}", "--layer", "1", "--out", "{new}/export"], "--layer"),
    ("export", ["{text_model}", "--dim", "9", "--out", "{new}/export"], "not available"),
    ("export", ["{text_model}", "--format", "model2vec", "--out", "{new}/export"], "model2vec"),
    ("export", ["{text_model}", "--out", "{victim}"], "refusing to replace"),
    # distill-static
    ("distill-static", [], "required"),
    ("distill-static", ["--out", "{new}/static"], "--corpus"),
    ("distill-static", ["--corpus", "{missing}.txt", "--out", "{new}/static"], "missing.txt"),
    ("distill-static", ["--corpus", "{vectors}", "--out", "{new}/static"], "v.npy"),
    ("distill-static", ["--corpus", "{empty_folder}", "--out", "{new}/static"], "no .txt"),
    ("distill-static", ["--corpus", "{texts}", "--out", "{new}/static", "--batch-size", "0"], "0"),
    ("distill-static", ["--corpus", "{texts}", "--out", "{notes}"], "refusing"),
    ("distill-static", ["--corpus", "{texts}", "--out", "{victim}"], "refusing to replace"),
    (
        "distill-static",
        ["--corpus", "{texts}", "--out", "{new}/static", "--model2vec", "{victim}"],
        "refusing to replace",
    ),
    (
        "distill-static",
        ["--corpus", "{texts}", "--teacher", "{missing}", "--out", "{new}/static"],
        "missing",
    ),
    # tune
    ("tune", [], "--out"),
    ("tune", ["--out", "{new}/m", "--min-retention", "0.9"], "give the data to tune on"),
    ("tune", ["--corpus", "{texts}", "--out", "{new}/m"], "nothing to choose by"),
    ("tune", ["--corpus", "{texts}", "--min-retention", "1.5", "--out", "{new}/m"], "(0, 1]"),
    ("tune", ["--corpus", "{missing}.txt", "--max-bytes", "8", "--out", "{new}/m"], "missing"),
    ("tune", ["--corpus", "{empty}", "--max-bytes", "8", "--out", "{new}/m"], "empty.txt"),
    ("tune", ["--corpus", "{vectors}", "--max-bytes", "8", "--out", "{new}/m"], "v.npy"),
    ("tune", ["--queries", "{texts}", "--max-bytes", "8", "--out", "{new}/m"], "--corpus"),
    (
        "tune",
        ["--corpus", "{texts}", "--qrels", "{texts}", "--max-bytes", "8", "--out", "{new}/m"],
        "give all three",
    ),
    (
        "tune",
        ["--beir", "{missing}", "--corpus", "{texts}", "--max-bytes", "8", "--out", "{new}/m"],
        "--beir",
    ),
    ("tune", ["--beir", "{missing}", "--max-bytes", "8", "--out", "{new}/m"], "missing"),
    ("tune", ["--pairs", "{texts}", "--max-bytes", "8", "--out", "{new}/m"], "texts.txt"),
    (
        "tune",
        ["--corpus", "{texts}", "--max-bytes", "8", "--compressors", "pca2", "--out", "{new}/m"],
        "unknown tune method 'pca2'",
    ),
    (
        "tune",
        ["--corpus", "{texts}", "--max-bytes", "8", "--backends", "onnx,trt", "--out", "{new}/m"],
        "unknown backend 'trt'",
    ),
    (
        "tune",
        ["--corpus", "{texts}", "--max-bytes", "8", "--budget", "disk", "--out", "{new}/m"],
        "--budget must be total or memory",
    ),
    (
        "tune",
        ["--corpus", "{texts}", "--max-bytes", "8", "--codes", "rq8,int8", "--out", "{new}/m"],
        "--codes takes codebook codes",
    ),
    ("tune", ["--corpus", "{texts}", "--max-bytes", "8", "--out", "{victim}"], "refusing"),
    ("tune", ["--corpus", "{texts}", "--max-bytes", "8", "--out", "{notes}"], "refusing"),
    (
        "tune",
        ["--corpus", "{texts}", "--max-bytes", "8", "--out", "{new}/m", "--work-dir", "{victim}"],
        "thesis.tex",
    ),
    (
        "tune",
        ["--corpus", "{texts}", "--max-bytes", "8", "--out", "{new}/m", "--work-dir", "{notes}"],
        "not a folder",
    ),
    # demo
    ("demo", ["--out", "{new}/demo"], "DEMITASSE_DATA"),
    ("demo", ["--data-dir", "{missing}", "--out", "{new}/demo"], "missing"),
    ("demo", ["--out", "{notes}"], "refusing"),
    ("demo", ["--out", "{victim}"], "refusing to replace"),
    # serve
    ("serve", ["{text_model}", "--host", "256.0.0.1"], "cannot listen on 256.0.0.1"),
    ("serve", ["{vector_model}", "--port", "0"], "vectors-only model"),
    # index, search
    ("index", ["{text_model}", "--input", "{texts}"], "--db"),
    ("index", ["{text_model}", "--input", "{missing}.jsonl", "--db", "{new}/db"], "not found"),
    ("index", ["{text_model}", "--input", "{empty}", "--db", "{new}/db"], "no text found"),
    ("index", ["{text_model}", "--input", "{vectors}", "--db", "{new}/db"], "unsupported file"),
    ("index", ["{text_model}", "--input", "{texts}", "--db", "{notes}"], "not a directory"),
    ("index", ["{missing}", "--input", "{texts}", "--db", "{new}/db"], "missing"),
    (
        "index",
        ["{text_model}", "--input", "{texts}", "--db", "{new}/db", "--vectors", "{missing}.npy"],
        "missing.npy: file not found",
    ),
    (
        "index",
        ["{text_model}", "--input", "{texts}", "--db", "{new}/db", "--vectors", "{narrow}"],
        "vectors 3 wide, but",
    ),
    ("search", ["{text_model}", "--db", "{new}/db"], "--query"),
    ("search", ["{text_model}", "--db", "{new}/db", "--query", "x"], "no table 'documents'"),
    ("search", ["{text_model}", "--db", "{new}/db", "--query", " "], "--query 1 is empty"),
    ("search", ["{text_model}", "--db", "{notes}", "--query", "x"], "not a directory"),
    ("search", ["{text_model}", "--db", "{root}", "--table", "", "--query", "x"], "table name"),
    # embed, recompress (more in tests/bulk)
    ("embed", ["{text_model}", "--input", "{missing}/*.txt", "--out", "{new}/c"], "matches no"),
    ("embed", ["{text_model}", "--input", "{pairs}", "--out", "{new}/c"], "unsupported input"),
    ("embed", ["{vector_model}", "--input", "{texts}", "--out", "{new}/c"], "vectors-only"),
    ("embed", ["{text_model}", "--input", "{texts}", "--out", "{notes}"], "not a directory"),
    ("embed", ["{text_model}", "--input", "{texts}", "--out", "{victim}"], "holds no demitasse"),
    ("recompress", ["{vector_model}", "--input", "{vectors}", "--out", "{new}/c"], "unsupported"),
    # cache
    ("cache", ["now"], "unrecognized arguments"),
]

NUMBER_TYPES = {
    positive_int: ["0", "-1", "1.5", "abc", ""],
    non_negative_int: ["-1", "1.5", "1e3", "abc"],
    positive_float: ["0", "-1e-9", "nan", "inf", "1e999", "abc"],
    non_negative_float: ["-1", "nan", "-inf", "abc"],
    backend_name: ["tensorrt", "ONNX", "onnx-fp16", ""],
    precision_name: ["int4", "pq0x", "pq0", "PQ8", ""],
    comma_list: ["", " ", ",", " , "],
    non_blank: ["", "  "],
    port_number: ["-1", "65536", "70000", "abc"],
}


def _generated_rows() -> list[tuple[str, list[str], str]]:
    """An unknown flag for every command, bad numbers for every numeric flag, a bad value for
    every flag with choices: each added to otherwise valid arguments."""
    rows = []
    for command, parser in COMMANDS.items():
        valid = VALID[command]
        rows.append((command, [*valid, "--no-such-flag"], "unrecognized arguments"))
        for action in parser._actions:
            if not action.option_strings:
                continue
            flag = action.option_strings[0]
            if action.type in NUMBER_TYPES:
                rows += [(command, [*valid, flag, v], flag) for v in NUMBER_TYPES[action.type]]
            elif action.type is not None:
                raise AssertionError(f"{command} {flag}: add bad values for its type")
            if action.choices:
                rows.append((command, [*valid, flag, "no-such-choice"], "invalid choice"))
    return rows


ALL_ROWS = ROWS + _generated_rows()


def test_every_command_has_rows() -> None:
    written = {command for command, _, _ in ROWS}
    assert set(COMMANDS) - written == set(), "commands without bad-argument rows"
    assert set(VALID) == set(COMMANDS)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from demitasse.evaluation.records import ResultRecord, write_records

    root = tmp_path_factory.mktemp("workspace")
    tiny = build_tiny_model(root / "tiny")
    rng = np.random.default_rng(0)
    (root / "texts.txt").write_text(
        "a man plays the guitar\na dog is running\nthe cat sits\na girl eats\nthe boy reads\n"
    )
    (root / "pairs.csv").write_text("sentence1,sentence2,score\na man,a dog,1\nthe cat,a cat,4\n")
    (root / "empty.txt").write_text("\n\n")
    (root / "notes.txt").write_text("mine")
    (root / "fake.npy").write_text("not numpy")
    np.save(root / "v.npy", rng.standard_normal((40, 8)).astype(np.float32))
    np.save(root / "narrow.npy", rng.standard_normal((40, 3)).astype(np.float32))
    nan = rng.standard_normal((40, 8))
    nan[3, 1] = np.nan
    np.save(root / "nan.npy", nan)
    (root / "victim").mkdir()
    (root / "victim" / "thesis.tex").write_text("precious")
    (root / "folder.npy").mkdir()
    (root / "link.npy").symlink_to("notes.txt")
    (root / "empty-folder").mkdir()
    record = ResultRecord("m", 1, "pca", 8, "float32", "sts", "STS12", "spearman", 70.0)
    write_records(root / "results.json", [record])
    (root / "bad.json").write_text(json.dumps([record.to_dict() | {"dim": "eight"}]))
    (root / "none.json").write_text("[]")
    (root / "broken-run" / "checkpoint").mkdir(parents=True)
    (root / "broken-run" / "checkpoint" / "state.json").write_text('{"step": "x"}')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMITASSE_CACHE", str(root / "cache"))
        fit = ["fit", "--compressor", "pca", "--dim", "4"]
        assert main([*fit, "--vectors", str(root / "v.npy"), "--out", str(root / "vm")]) == 0
        assert main([*fit, "--model", str(tiny), "--texts", str(root / "texts.txt"),
                     "--out", str(root / "tm")]) == 0  # fmt: skip
    names = {
        "tiny": tiny, "texts": "texts.txt", "pairs": "pairs.csv", "empty": "empty.txt",
        "notes": "notes.txt", "fake_npy": "fake.npy", "vectors": "v.npy",
        "narrow": "narrow.npy", "nan_vectors": "nan.npy", "victim": "victim",
        "folder_npy": "folder.npy", "link_npy": "link.npy", "empty_folder": "empty-folder",
        "results": "results.json", "bad_records": "bad.json", "no_records": "none.json",
        "broken_run": "broken-run", "vector_model": "vm", "text_model": "tm",
        "missing": "missing", "new": "new", "root": ".",
    }  # fmt: skip
    return {key: str(root / name) for key, name in names.items()}


class ModelLoaded(BaseException):
    """Raised where a model would load: no bad-argument row may get that far."""


@pytest.fixture
def no_model_loads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from demitasse.encoders.transformer import TransformerEncoder

    def refuse(*_: object, **__: object) -> None:
        raise ModelLoaded("a model was loaded or texts encoded before the mistake was found")

    monkeypatch.setattr(SentenceTransformer, "__init__", refuse)
    monkeypatch.setattr(TransformerEncoder, "encode_layers", refuse)
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("DEMITASSE_DATA", raising=False)
    monkeypatch.chdir(tmp_path)  # eval and demo default to an output folder in the cwd


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("command", "arguments", "needle"),
    ALL_ROWS,
    ids=[f"{c} {' '.join(a)}"[:90] for c, a, _ in ALL_ROWS],
)
def test_bad_arguments_fail_in_one_line(
    command: str,
    arguments: list[str],
    needle: str,
    workspace: dict[str, str],
    no_model_loads: None,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    places = dict(workspace)
    if any("{data}" in a for a in arguments):
        places["data"] = str(request.getfixturevalue("data_dir"))
    argv = [command, *(a.format(**places) for a in arguments)]
    root = Path(workspace["root"])
    before = _tree(root)
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("demitasse: error:"), err
    assert needle in err, err
    assert _tree(root) == before  # nothing written, nothing left behind
    assert not list(tmp_path.iterdir())  # no cache, no default output folder
