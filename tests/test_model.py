"""CompressedModel: one object from fit to encode to save/load, and its one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from demitasse import CompressedModel
from demitasse.compress import make_compressor
from demitasse.errors import CompressorError, DemitasseError
from demitasse.io import MARKER
from demitasse.loading import load_encoder
from demitasse.model import check_model_target, is_model_dir
from demitasse.model_files import FORMAT_VERSION
from tests.helpers import WORDS, build_tiny_model


def _sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))


def test_fit_encode_save_load_round_trip(tiny_model: Path, tmp_path: Path) -> None:
    texts = _sentences(200)
    model = CompressedModel(tiny_model, layer=2, compressor="pca", dim=8, precision="int8")
    assert model.fit(texts, data_label="random words") is model
    assert model.dims == list(range(8, 0, -1))
    assert model.precisions == ["float32", "int8", "binary"]
    queries = _sentences(5, seed=1)
    vectors = model.encode(queries, dim=4, precision="float32")
    codes = model.encode(queries, precision="int8")
    np.testing.assert_array_equal(model.encode(queries), codes)  # the model's own precision
    bits = model.encode(queries, precision="binary")
    assert vectors.shape == (5, 4) and vectors.dtype == np.float32
    assert codes.shape == (5, 8) and codes.dtype == np.int8
    assert bits.shape == (5, 1) and bits.dtype == np.uint8
    # The float path is the layer's vectors through the fitted PCA, nothing else.
    layer_vectors = load_encoder(tiny_model, cache=False).encode(queries, layer=2)
    np.testing.assert_allclose(
        vectors, model.compressor.transform(layer_vectors, dim=4), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        model.transform(layer_vectors, dim=4, precision="float32"), vectors, atol=1e-6
    )

    model.save(tmp_path / "m")
    loaded = CompressedModel.load(tmp_path / "m")
    assert np.array_equal(loaded.encode(queries, precision="int8"), codes)
    assert np.array_equal(loaded.encode(queries, dim=4, precision="float32"), vectors)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["layer"] == 2 and config["method"] == "pca" and config["output_dim"] == 8
    assert config["encoder"]["source"] == str(tiny_model.resolve())
    assert config["fit"]["fit_data"] == "random words"
    assert config["fit"]["n_samples"] == 200 and len(config["fit"]["sha256"]) == 64
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        ".demitasse-output.json",
        "compressor",
        "config.json",
        "quantizer",
    ]


def test_normalize_applies_to_floats_only(tiny_model: Path) -> None:
    texts = _sentences(100)
    model = CompressedModel(tiny_model, compressor="pca", dim=6, normalize=True).fit(texts)
    vectors = model.encode(texts[:10])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    raw = model.encode(texts[:10], normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_vectors_only_model(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((300, 24)).astype(np.float32)
    model = CompressedModel(compressor="pca", dim=8, precision="binary")
    model.fit(vectors=vectors, data_label="api vectors")
    assert model.recipe.name == "vectors" and model.recipe.encoder is None
    out = model.transform(vectors[:10], dim=8, precision="binary")
    assert out.shape == (10, 1)
    with pytest.raises(DemitasseError, match="vectors-only"):
        model.encode(["a text"])
    model.save(tmp_path / "v")
    loaded = CompressedModel.load(tmp_path / "v")
    assert np.array_equal(loaded.transform(vectors[:10], precision="binary"), out)
    assert loaded.precisions == ["float32", "binary"]


def test_quantised_transform_of_many_rows_equals_the_steps() -> None:
    """Above a block of rows, compressing and quantising go block by block: the codes are the
    compressor's then the quantiser's, and a bad row is named by its place in the input."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 24)).astype(np.float32)
    for precision in ("int8", "binary"):
        model = CompressedModel(None, compressor="pca", dim=8, precision=precision)
        model.fit(vectors=x[:2000], data_label="synthetic")
        assert model.quantizer is not None and model.compressor is not None
        steps = model.quantizer.quantize(model.compressor.transform(x))
        np.testing.assert_array_equal(model.transform(x, precision=precision), steps)
    x[17_001, 5] = np.inf
    with pytest.raises(DemitasseError, match="row 17001 "):
        model.transform(x, precision="binary")


def test_a_saved_compressor_loads_as_a_vectors_only_model(tmp_path: Path) -> None:
    vectors = np.random.default_rng(0).standard_normal((100, 12)).astype(np.float32)
    pca = make_compressor("pca", dim=4).fit(vectors)
    pca.save(tmp_path / "pca")
    model = CompressedModel.load(tmp_path / "pca")
    np.testing.assert_array_equal(model.transform(vectors), pca.transform(vectors))


def test_supervision_given_as_texts_is_encoded(tiny_model: Path) -> None:
    texts = _sentences(120)
    left, right = _sentences(16, seed=2), _sentences(16, seed=3)
    scores = np.linspace(0, 5, 16)
    adaptor = make_compressor("adaptor", dim=8, max_epochs=2, progress=False, device="cpu")
    model = CompressedModel(tiny_model, compressor=adaptor)
    model.fit(texts, pairs=(left, right), scores=scores)
    assert model.fit_info is not None and model.fit_info["supervision"] == ["pairs", "scores"]
    assert model.encode(texts[:3]).shape == (3, 8)


def test_requests_outside_the_fit_are_one_line_errors(tiny_model: Path, tmp_path: Path) -> None:
    model = CompressedModel(tiny_model, compressor="pca", dim=8).fit(_sentences(100))
    for kwargs, message in [
        ({"dim": 9}, "dim 9 is not available"),
        ({"dim": 0}, "positive integer"),
        ({"precision": "int8"}, "precision 'int8' is not available"),
    ]:
        with pytest.raises(DemitasseError, match=message):
            model.encode(["a man"], **kwargs)
    with pytest.raises(DemitasseError, match="vectors have 7 dimensions but this model takes 32"):
        model.transform(np.ones((2, 7), np.float32))
    with pytest.raises(DemitasseError, match="not a single string"):
        model.encode("a man")
    with pytest.raises(DemitasseError, match="item 1 is a int"):
        model.encode(["a man", 3])
    with pytest.raises(DemitasseError, match="not fitted"):
        CompressedModel(tiny_model, compressor="pca").encode(["a"])
    with pytest.raises(DemitasseError, match="layer 9 does not exist"):
        CompressedModel(tiny_model, layer=9).fit(["a man", "a dog"])


def test_damaged_or_foreign_directories(tiny_model: Path, tmp_path: Path) -> None:
    model = CompressedModel(tiny_model, compressor="pca", dim=4, precision="int8")
    model.fit(_sentences(100)).save(tmp_path / "m")
    # A directory that holds someone else's files is never replaced.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DemitasseError, match="refusing to replace"):
        model.save(foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    # An earlier model is replaced.
    model.save(tmp_path / "m")
    for damage, message in [
        (lambda d: shutil.rmtree(d / "quantizer"), "quantizer"),
        (lambda d: (d / "compressor" / "state.safetensors").write_bytes(b"xx"), "corrupt"),
        (lambda d: (d / "config.json").write_text("{"), "invalid config.json"),
    ]:
        broken = tmp_path / f"broken-{message}"
        shutil.copytree(tmp_path / "m", broken)
        damage(broken)
        with pytest.raises(DemitasseError, match=message):
            CompressedModel.load(broken)


@pytest.mark.parametrize("version", [1, 2, 3, 5])
def test_a_model_directory_of_another_format_is_refused_in_one_line(
    version: int, tmp_path: Path
) -> None:
    vectors = np.random.default_rng(0).standard_normal((50, 8))
    CompressedModel(compressor="pca", dim=4).fit(vectors=vectors).save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["format_version"] == FORMAT_VERSION == 4
    config["format_version"] = version
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CompressorError) as caught:
        CompressedModel.load(tmp_path / "m")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"model directory {tmp_path / 'm'} was written in format {version}")
    assert "this demitasse reads format 4" in message


def test_only_a_folder_holding_the_marker_counts_as_a_saved_model(tmp_path: Path) -> None:
    """A model folder without the marker the current build writes last (as one left by an
    earlier build) is not the user's to lose: it is refused, never replaced."""
    vectors = np.random.default_rng(0).standard_normal((50, 8))
    model = CompressedModel(compressor="pca", dim=4).fit(vectors=vectors)
    model.save(tmp_path / "m")
    assert check_model_target(tmp_path / "m") == tmp_path / "m"
    (tmp_path / "m" / MARKER).unlink()
    before = sorted(p.name for p in (tmp_path / "m").iterdir())
    for attempt in (lambda: model.save(tmp_path / "m"), lambda: check_model_target(tmp_path / "m")):
        with pytest.raises(DemitasseError, match="refusing to replace"):
            attempt()
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == before
    assert is_model_dir(tmp_path / "m")  # still readable, only not overwritten


def test_an_encoder_changed_since_the_fit_is_refused(tmp_path: Path) -> None:
    encoder_dir = build_tiny_model(tmp_path / "enc")
    model = CompressedModel(encoder_dir, compressor="truncate", dim=4).fit(_sentences(20))
    model.save(tmp_path / "m")
    shutil.rmtree(tmp_path / "enc")
    build_tiny_model(tmp_path / "enc", hidden=32, layers=2)  # same place, other weights
    with pytest.raises(DemitasseError, match="differs from the one this model was fitted"):
        CompressedModel.load(tmp_path / "m").encode(["a man"])


def test_a_static_model_fits_encodes_and_exports_to_model2vec(tmp_path: Path) -> None:
    from model2vec import StaticModel as Model2VecModel
    from tokenizers import Tokenizer

    from demitasse.cli import main
    from demitasse.static import StaticModel

    tokenizer = Tokenizer.from_file(str(build_tiny_model(tmp_path / "tiny") / "tokenizer.json"))
    rng = np.random.default_rng(0)
    vocabulary = tokenizer.get_vocab_size(with_added_tokens=True)
    StaticModel(rng.standard_normal((vocabulary, 32)), tokenizer).save(tmp_path / "static")
    texts = _sentences(80)
    model = CompressedModel(tmp_path / "static", compressor="truncate", dim=16).fit(texts)
    assert model.recipe.encoder_kind == "static"
    model.save(tmp_path / "m")
    assert main(["export", str(tmp_path / "m"), "--format", "model2vec", "--dim", "12",
                 "--out", str(tmp_path / "m2v")]) == 0  # fmt: skip
    theirs = Model2VecModel.from_pretrained(tmp_path / "m2v").encode(texts)
    ours = model.encode(texts, dim=12, normalize=True)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    pca = CompressedModel(tmp_path / "static", compressor="pca", dim=8).fit(texts)
    pca.save(tmp_path / "pca")
    assert main(["export", str(tmp_path / "pca"), "--format", "model2vec", "--out",
                 str(tmp_path / "no")]) == 2  # fmt: skip
    assert not (tmp_path / "no").exists()
