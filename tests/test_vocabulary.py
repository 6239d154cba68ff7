"""One vocabulary for precisions and compressors: the quantiser and compressor registries (and
the presets of :mod:`demitasse.compress.vocabulary`) name them everywhere, the command line,
:class:`CompressedModel`, the sweeps, reports, shards, the server and the exporter alike."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from demitasse.bulk.shards import code_type
from demitasse.cli import main
from demitasse.cli.arguments import comma_list, precision_name
from demitasse.cli.main import build_parser
from demitasse.cli.specs import parse_compressor_specs, parse_precisions
from demitasse.compress import (
    check_precision,
    compressor_choices,
    compressor_names,
    is_precision,
    make_quantizer,
    precision_help,
    quantizer_names,
    resolve_compressor,
    resolve_precision,
    sort_precisions,
)
from demitasse.compress.base import built_compressor_names
from demitasse.errors import CompressorError, DemitasseError, ExportError
from demitasse.export.sentence_transformers import check_exportable
from demitasse.model import CompressedModel
from demitasse.report.tables import sort_configs
from demitasse.search import RESCORE_PRECISIONS
from demitasse.serve.protocol import is_encoding
from demitasse.tune.space import Configuration, SweepSpace
from tests.helpers import correlated

#: Fast codebooks for the tests: few k-means rounds on few rows.
QUICK = {"pq8": {"iterations": 3, "opq_iterations": 2}, "rq8": {"iterations": 3, "beam": 2}}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def _sized_name(family: str, size: int) -> str:
    return f"{family}{size}"


def _is_sized(family: str) -> bool:
    try:
        resolve_precision(family)
    except CompressorError:
        return True
    return False


# ---- the command line ------------------------------------------------------------------------


def test_every_precision_and_compressor_option_of_the_cli_comes_from_the_registries() -> None:
    seen = {"precision": 0, "compressor": 0}
    for command, parser in _subparsers(build_parser()).items():
        for action in parser._actions:
            flags = set(action.option_strings)
            if "--precision" in flags:
                seen["precision"] += 1
                assert action.choices is None, command
                # eval takes a comma-separated list (each name checked when it is parsed)
                assert action.type in (None, precision_name, comma_list), command
                assert precision_help() in (action.help or ""), command
            elif "--rescore-precision" in flags:
                assert action.choices is not None
                assert list(action.choices) == list(RESCORE_PRECISIONS)
                assert all(is_precision(p) for p in action.choices)
            elif "--compressor" in flags and command in ("fit", "eval"):
                seen["compressor"] += 1
                listed = (action.help or "").split(": ", 1)[1].split(";")[0].split(", ")
                assert listed == compressor_choices(), command
    # fit, encode, transform, eval, embed, recompress, index; fit and eval name compressors.
    assert seen == {"precision": 7, "compressor": 2}
    for name in compressor_choices():
        method, _ = resolve_compressor(name)
        assert method is None or method in compressor_names()


#: Names the commands once used for what now has one name each: an output path is --out, a
#: compressor --compressor (a list of them --compressors), a training objective --objective, a
#: Parquet column of vectors --vector-column, a cap on optimiser steps --max-steps.
RETIRED_FLAGS = {
    "--output", "--output-dir", "--out-dir", "--method", "--methods", "--column",
    "--model-dir", "--steps",
}  # fmt: skip


def test_the_commands_share_one_vocabulary_of_flags() -> None:
    flags: dict[str, set[str]] = {}
    for command, parser in _subparsers(build_parser()).items():
        for action in parser._actions:
            long_names = [o for o in action.option_strings if o.startswith("--")]
            # --x / --no-x (argparse.BooleanOptionalAction) is one flag with its negation.
            if isinstance(action, argparse.BooleanOptionalAction):
                long_names = [o for o in long_names if not o.startswith("--no-")]
            assert len(long_names) <= 1, f"{command}: one name a flag, not {long_names}"
            for name in long_names:
                flags.setdefault(name, set()).add(command)
    assert not RETIRED_FLAGS & set(flags), sorted(RETIRED_FLAGS & set(flags))
    writers = {"eval", "report", "train", "fit", "encode", "transform", "export", "embed",
               "recompress", "tune", "distill-static", "demo"}  # fmt: skip
    assert flags["--out"] == writers
    assert flags["--compressor"] == {"fit", "eval"} and flags["--compressors"] == {"tune"}
    assert flags["--objective"] == {"train"}
    assert flags["--vector-column"] == {"fit", "transform", "recompress", "index", "eval"}
    assert flags["--max-steps"] == {"train", "distill-static"}


def test_precision_names_round_trip_through_the_registry() -> None:
    assert quantizer_names() == ["binary", "float32", "int8", "pq", "rq"]
    for family in quantizer_names():
        if _is_sized(family):
            name = _sized_name(family, 8)
            cls, size = resolve_precision(name)
            assert cls.family == family and size == {cls.size_param: 8}
            assert make_quantizer(name).precision == name
            assert check_precision(_sized_name(family, 8).replace("8", "08")) == name
            assert f"{family}<" in precision_help()
        else:
            cls, size = resolve_precision(family)
            assert cls.family == family and size == {}
            assert make_quantizer(family).precision == family == check_precision(family)
            assert family in precision_help().split(", ")
    assert parse_precisions("float32, pq16,rq08") == ["float32", "pq16", "rq8"]
    for bad in ("pq0x", "int4", "float16", "PQ8", ""):
        assert not is_precision(bad)
    # A size out of range, or beyond int()'s digits: refused in one line too.
    for bad in ("pq0x", "pq0", "int4", "float16", "PQ8", "pq" + "9" * 5000, ""):
        with pytest.raises(CompressorError, match=r"precision|code_bytes") as caught:
            check_precision(bad)
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


@pytest.mark.parametrize(
    "argv",
    [
        ["encode", "no-such-model", "--input", "t.txt", "--out", "o.npy"],
        ["transform", "no-such-model", "--input", "v.npy", "--out", "o.npy"],
        ["fit", "--vectors", "v.npy", "--out", "m"],
        ["embed", "no-such-model", "--input", "t.txt", "--out", "o"],
        ["index", "no-such-model", "--input", "t.txt", "--db", "db"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_bad_precision_on_the_cli_is_one_line_and_exit_code_2(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main([*argv, "--precision", "pq0x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("demitasse: error:") and "\n" not in err, err
    assert "argument --precision: unknown precision 'pq0x'" in err and precision_help() in err
    assert not list(tmp_path.iterdir())  # refused before any work


def test_the_cli_fits_and_writes_product_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = correlated(n=300, d=24)
    np.save(tmp_path / "v.npy", vectors)
    fit = ["fit", "--vectors", str(tmp_path / "v.npy"), "--compressor", "pca", "--dim", "16"]
    assert main([*fit, "--precision", "pq8", "--out", str(tmp_path / "m")]) == 0
    assert "precisions float32, binary, pq8" in capsys.readouterr().out
    out = tmp_path / "codes.npy"
    argv = ["transform", str(tmp_path / "m"), "--input", str(tmp_path / "v.npy")]
    assert main([*argv, "--out", str(out), "--precision", "pq08"]) == 0
    codes = np.load(out)
    assert codes.dtype == np.uint8 and codes.shape == (300, 8)
    model = CompressedModel.load(tmp_path / "m")
    np.testing.assert_array_equal(codes, model.transform(vectors, precision="pq8"))


def test_compressor_names_are_the_same_for_the_cli_and_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = correlated(n=200, d=24)
    for name in compressor_choices():
        method, params = resolve_compressor(name)
        assert parse_compressor_specs(name)[0].method == method
        assert parse_compressor_specs(name)[0].params == params
    spec = parse_compressor_specs("pca-abtt")[0].build(input_dim=24, max_dim=8)
    model = CompressedModel(compressor="pca-abtt", dim=8).fit(vectors=vectors)
    assert model.compressor is not None and model.recipe.compressor == "pca"
    assert model.compressor.get_params() == spec.get_params()
    assert model.compressor.get_params()["abtt"] == 1  # max(1, 24 // 100)
    assert CompressedModel(compressor="none").compressor is None
    whitened = CompressedModel(compressor="pca-whiten", dim=8, compressor_params={"abtt": 2})
    assert whitened.compressor is not None
    assert whitened.compressor.get_params() | {"dim": 8} == {"dim": 8, "whiten": True, "abtt": 2}
    # A pooler is trained with its encoder, a built compressor and no estimator: named, it is
    # refused up front by both.
    assert "pooler" in built_compressor_names() and "pooler" not in compressor_choices()
    assert "pooler" not in compressor_names()
    with pytest.raises(CompressorError, match="not fitted on vectors"):
        CompressedModel(compressor="pooler", dim=8)
    with pytest.raises(DemitasseError, match="unknown compressor 'svd'"):
        CompressedModel(compressor="svd", dim=8)
    np.save(tmp_path / "v.npy", vectors)
    capsys.readouterr()
    argv = ["fit", "--vectors", str(tmp_path / "v.npy"), "--out", str(tmp_path / "m")]
    assert main([*argv, "--compressor", "pooler", "--dim", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not fitted on vectors" in err
    assert main([*argv, "--compressor", "pca-abtt", "--dim", "8"]) == 0
    saved = CompressedModel.load(tmp_path / "m").compressor
    assert saved is not None and saved.get_params() == spec.get_params()


# ---- the model -------------------------------------------------------------------------------


@pytest.mark.parametrize("compressor", [None, "pca"])
@pytest.mark.parametrize("precision", ["pq8", "rq8"])
def test_a_model_of_codebook_codes_fits_transforms_saves_and_loads_bit_identically(
    compressor: str | None, precision: str, tmp_path: Path
) -> None:
    vectors = correlated(n=300, d=24)
    dim = None if compressor is None else 16
    model = CompressedModel(
        compressor=compressor, dim=dim, precision=precision, quantizer_params=QUICK[precision]
    ).fit(vectors=vectors)
    assert model.precisions == ["float32", "binary", precision]
    codes = model.transform(vectors[:50], precision=precision)
    assert codes.dtype == np.uint8 and codes.shape == (50, 8)
    assert model.bytes_per_vector(precision=precision) == 8
    assert model.quantizer is not None and model.quantizer.n_features_in_ == (dim or 24)
    model.save(tmp_path / "m")
    loaded = CompressedModel.load(tmp_path / "m")
    assert loaded.recipe.precision == precision and loaded.precisions == model.precisions
    np.testing.assert_array_equal(loaded.transform(vectors[:50], precision=precision), codes)
    assert loaded.state_hash() == model.state_hash()
    for other in ("float32", "binary"):
        np.testing.assert_array_equal(
            loaded.transform(vectors[:5], precision=other),
            model.transform(vectors[:5], precision=other),
        )
    with pytest.raises(CompressorError, match="precision 'int8' is not available"):
        model.transform(vectors[:5], precision="int8")
    if compressor is not None:  # Matryoshka floats, but the codes take the full width only
        assert model.transform(vectors[:5], dim=8, precision="float32").shape == (5, 8)
        with pytest.raises(CompressorError, match=f"the {precision[:2]} codes"):
            model.transform(vectors[:5], dim=8, precision=precision)


def test_the_plain_precisions_behave_as_before() -> None:
    vectors = correlated(n=200, d=24)
    for precision, offered in (
        ("float32", ["float32", "binary"]),
        ("int8", ["float32", "int8", "binary"]),
        ("binary", ["float32", "binary"]),
    ):
        model = CompressedModel(compressor="pca", dim=8, precision=precision).fit(vectors=vectors)
        assert model.precisions == offered
        assert (model.quantizer is None) == (precision == "float32")
    rotated = CompressedModel(
        compressor="pca", dim=8, precision="binary", quantizer_params={"rotation": "itq"}
    ).fit(vectors=vectors)
    with pytest.raises(CompressorError, match="itq rotation of the binary codes spans all 8"):
        rotated.transform(vectors[:3], dim=4, precision="binary")


# ---- everything else that names precisions ---------------------------------------------------


def test_orderings_shards_sweeps_server_and_export_derive_from_the_registry() -> None:
    assert sort_precisions(["rq8", "int4", "pq16", "binary", "pq8", "int8", "float32"]) == [
        "float32", "int8", "binary", "pq8", "pq16", "rq8", "int4",
    ]  # fmt: skip
    keys = [("m", 1, "pca", 8, p) for p in ("pq8", "binary", "float32", "int8")]
    assert [k[4] for k in sort_configs(keys)] == ["float32", "int8", "binary", "pq8"]
    assert code_type(12, "float32") == pa.list_(pa.float32(), 12)
    assert code_type(12, "int8") == pa.list_(pa.int8(), 12)
    assert code_type(12, "binary") == pa.binary(2)
    assert code_type(12, "pq8") == pa.binary(8) and code_type(12, "rq16") == pa.binary(16)
    assert SweepSpace().precisions == ("float32", "int8", "binary")
    assert SweepSpace(precisions=("float32", "pq8")).precisions == ("float32", "pq8")
    assert Configuration("e", 1, "pca", 64, "pq16").index_bytes() == 16
    assert Configuration("e", 1, "pca", 64, "binary").index_bytes() == 8
    with pytest.raises(DemitasseError, match="unknown precision"):
        Configuration("e", 1, "pca", 64, "pq0x")
    assert [is_encoding(e) for e in ("float", "base64", "int8", "binary", "pq16")] == [True] * 5
    assert not any(is_encoding(e) for e in ("float32", "float16", "pq0x", "pq08", ["float"]))
    pq = make_quantizer("pq8", **QUICK["pq8"]).fit(correlated(n=300, d=16))
    with pytest.raises(ExportError, match="pq8 codes: sentence-transformers has no product"):
        check_exportable(pq)
    check_exportable(make_quantizer("binary"))
