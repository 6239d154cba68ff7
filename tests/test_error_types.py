"""Errors name the kind of mistake (:mod:`demitasse.errors`): an unknown name, a parameter out
of range, a part used before it is fitted, a damaged save, input of the wrong width. Each is a
one-line DemitasseError (the command line's exit code 2) and keeps the types callers caught
before: CompressorError, DataError, ValueError, and scikit-learn's NotFittedError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import demitasse
from demitasse.cli import main
from demitasse.compress import (
    PCA,
    Pooler,
    compressor_choices,
    compressor_names,
    load_compressor,
    load_quantizer,
    make_compressor,
    make_quantizer,
)
from demitasse.compress.base import built_compressor_names
from demitasse.compress.vocabulary import check_precision, resolve_compressor
from demitasse.encoders.cache import content_hash
from demitasse.errors import (
    CompressorError,
    DataError,
    DemitasseError,
    IncompatibleInputError,
    NotFittedError,
    ParameterError,
    SavedStateError,
    UnknownCompressionNameError,
    UnknownNameError,
)
from demitasse.model import CompressedModel
from demitasse.search import exact_search
from tests.helpers import correlated

X = correlated(n=200, d=24)


def one_line(info: pytest.ExceptionInfo[BaseException]) -> None:
    assert isinstance(info.value, DemitasseError)  # the CLI's exit code 2
    assert "\n" not in str(info.value)


def test_the_kinds_keep_the_types_callers_caught_before() -> None:
    for kind in (ParameterError, NotFittedError, SavedStateError, IncompatibleInputError):
        assert issubclass(kind, CompressorError) and issubclass(kind, ValueError)
    assert issubclass(UnknownNameError, DemitasseError) and issubclass(UnknownNameError, ValueError)
    assert issubclass(UnknownCompressionNameError, UnknownNameError)
    assert issubclass(UnknownCompressionNameError, CompressorError)
    assert issubclass(IncompatibleInputError, DataError)
    assert issubclass(NotFittedError, AttributeError)  # as scikit-learn's
    for name in (
        "UnknownNameError",
        "UnknownCompressionNameError",
        "ParameterError",
        "NotFittedError",
        "SavedStateError",
        "IncompatibleInputError",
    ):
        assert name in demitasse.__all__ and getattr(demitasse, name).__name__ == name


# ---- unknown names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: make_quantizer("int4"),
        lambda: check_precision("pq0x"),
        lambda: make_quantizer(8),
        lambda: make_compressor("svd"),
        lambda: resolve_compressor("svd"),
    ],
    ids=["precision", "sized precision", "not a name", "compressor", "compressor by name"],
)
def test_an_unknown_precision_or_compressor_is_an_unknown_name(call) -> None:
    with pytest.raises(UnknownCompressionNameError, match=r"precision|compressor") as info:
        call()
    assert isinstance(info.value, UnknownNameError) and isinstance(info.value, CompressorError)
    one_line(info)


def test_other_unknown_names() -> None:
    floats = np.zeros((2, 8), np.float32)
    with pytest.raises(UnknownNameError, match="unknown search metric 'dot'") as info:
        exact_search(floats, floats, metric="dot")
    one_line(info)


# ---- hyperparameters -------------------------------------------------------------------------


def test_a_parameter_out_of_range_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match="'dim' parameter of PCA") as info:
        make_compressor("pca", dim=0)
    one_line(info)
    with pytest.raises(ParameterError, match="percentile"):
        make_quantizer("int8", percentile=40)
    with pytest.raises(ParameterError, match="code_bytes"):
        check_precision("pq0")  # a known family, a size out of range
    with pytest.raises(ParameterError, match="unknown fit argument"):
        PCA(dim=4).fit(X, pairs=[(0, 1)])
    pca = PCA(dim=4).fit(X)
    with pytest.raises(ParameterError, match="dim 5 > 4"):
        pca.transform(X, dim=5)


def test_a_parameter_error_is_scikit_learns_too() -> None:
    from sklearn.utils._param_validation import InvalidParameterError

    with pytest.raises(InvalidParameterError):
        make_compressor("pca", abtt=-1)


# ---- used before fit -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: PCA(dim=4).transform(X),
        lambda: PCA(dim=4).save("never-written"),
        lambda: make_quantizer("int8").quantize(X),
        lambda: make_quantizer("int8").save("never-written"),
        lambda: make_quantizer("pq4").score(X[:2], np.zeros((3, 4), np.uint8)),
    ],
    ids=["transform", "save", "quantize", "save a quantizer", "codebook codes"],
)
def test_an_unfitted_part_raises_not_fitted(call) -> None:
    from sklearn.exceptions import NotFittedError as ScikitLearnNotFittedError

    with pytest.raises(NotFittedError, match=r"not fitted|unfitted") as info:
        call()
    assert isinstance(info.value, ScikitLearnNotFittedError)  # what scikit-learn code catches
    one_line(info)
    assert not Path("never-written").exists()


# ---- damaged saves ---------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "pca"
    PCA(dim=6).fit(X).save(path)
    return path


def _edit(path: Path, **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | changes))


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda p: (p / "state.safetensors").write_bytes(b"\x00" * 64), "corrupt state"),
        (lambda p: (p / "state.safetensors").unlink(), "no state.safetensors"),
        (lambda p: (p / "config.json").write_text("{not json"), "invalid config.json"),
        (lambda p: shutil.rmtree(p), "no saved compressor"),
        (lambda p: _edit(p, version=99), "newer demitasse"),
        (lambda p: _edit(p, method="svd"), "unknown compressor 'svd'"),
        (lambda p: _edit(p, params={"dim": -6}), "'dim' parameter of PCA"),
        (lambda p: _edit(p, output_dim=7), "components_ has shape"),
        (lambda p: _edit(p, kind="quantizer"), "not a compressor"),
    ],
    ids=[
        "garbage",
        "truncated",
        "config",
        "missing",
        "version",
        "method",
        "parameter",
        "shapes",
        "kind",
    ],
)
def test_a_damaged_save_is_a_saved_state_error(saved: Path, damage, match: str) -> None:
    damage(saved)
    with pytest.raises(SavedStateError, match=match) as info:
        load_compressor(saved)
    one_line(info)


def test_a_damaged_quantizer_save_is_a_saved_state_error(tmp_path: Path) -> None:
    make_quantizer("int8").fit(X).save(tmp_path / "q")
    _edit(tmp_path / "q", precision="int4")
    with pytest.raises(SavedStateError, match="unknown precision 'int4'") as info:
        load_quantizer(tmp_path / "q")
    one_line(info)


def test_a_damaged_model_directory_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    CompressedModel(compressor="pca", dim=8).fit(vectors=X).save(tmp_path / "m")
    (tmp_path / "m" / "compressor" / "state.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(SavedStateError):
        CompressedModel.load(tmp_path / "m")
    np.save(tmp_path / "v.npy", X)
    capsys.readouterr()
    argv = ["transform", str(tmp_path / "m"), "--input", str(tmp_path / "v.npy")]
    assert main([*argv, "--out", str(tmp_path / "out.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "corrupt state.safetensors" in err


# ---- input of the wrong width ----------------------------------------------------------------


def test_input_of_another_width_is_incompatible_input() -> None:
    pca = PCA(dim=4).fit(X)
    with pytest.raises(IncompatibleInputError, match="X has 23 features") as info:
        pca.transform(X[:, :23])
    assert isinstance(info.value, DataError)
    one_line(info)
    int8 = make_quantizer("int8").fit(X)
    with pytest.raises(IncompatibleInputError, match="fitted on 24"):
        int8.quantize(np.hstack([X, X]))
    codes = int8.quantize(X)
    with pytest.raises(IncompatibleInputError, match="dtype"):
        int8.similarity(codes, codes.astype(np.float32))
    with pytest.raises(IncompatibleInputError, match="same shape"):
        int8.similarity(codes, codes[:3])
    with pytest.raises(IncompatibleInputError, match="columns"):
        exact_search(np.zeros((2, 8), np.float32), np.zeros((3, 4), np.float32))
    rotated = make_quantizer("binary", rotation="itq").fit(X)
    with pytest.raises(IncompatibleInputError, match="takes exactly that many"):
        rotated.quantize(X[:, :8])


# ---- a pooler is built, not fitted -----------------------------------------------------------


def _pooler(d: int = 24, k: int = 8) -> Pooler:
    rng = np.random.default_rng(3)
    return Pooler.from_head(rng.standard_normal((k, d)), rng.standard_normal(k), fit_data="t")


def test_a_pooler_is_no_estimator_to_fit() -> None:
    assert "pooler" not in compressor_names() and "pooler" not in compressor_choices()
    assert built_compressor_names() == ["pooler"]
    with pytest.raises(UnknownCompressionNameError, match=r"demitasse\.training") as info:
        make_compressor("pooler", dim=8)
    one_line(info)
    with pytest.raises(CompressorError, match="not fitted on vectors"):
        resolve_compressor("pooler")
    with pytest.raises(CompressorError, match=r"demitasse\.training.*Pooler\.from_head") as info:
        _pooler().fit(X)
    one_line(info)
    with pytest.raises(NotFittedError, match="not built"):
        Pooler(dim=8).transform(X)


def test_a_saved_pooler_loads_by_name_alone_and_in_a_model_directory(tmp_path: Path) -> None:
    pooler = _pooler()
    pooler.save(tmp_path / "p")
    loaded = load_compressor(tmp_path / "p")
    assert type(loaded) is Pooler
    np.testing.assert_array_equal(loaded.transform(X), pooler.transform(X))
    # A model directory whose compressor is a pooler (as a trained model's would be).
    CompressedModel(compressor="truncate", dim=8).fit(vectors=X).save(tmp_path / "m")
    shutil.rmtree(tmp_path / "m" / "compressor")
    pooler.save(tmp_path / "m" / "compressor")
    # The part's content hash is recorded with it, as a save records it.
    hashes = {"compressor/": content_hash(tmp_path / "m" / "compressor")}
    _edit(tmp_path / "m", method="pooler", matryoshka=False, part_hashes=hashes)
    model = CompressedModel.load(tmp_path / "m")
    assert isinstance(model.compressor, Pooler)
    np.testing.assert_array_equal(model.transform(X), pooler.transform(X))
