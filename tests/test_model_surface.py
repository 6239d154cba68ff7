"""What CompressedModel shows a user: the recipe apart from the runtime settings, one verb for
texts and one for vectors with the model's own precision as their default, properties that never
load an encoder, and a state hash computed without writing a file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from demitasse import CompressedModel
from demitasse.errors import DemitasseError
from demitasse.model import Recipe, RuntimeSettings

#: The public surface, on purpose: a new member is a decision, not a drift (it was 48).
PUBLIC = {
    # verbs
    "fit", "encode", "transform", "search_index", "search_queries", "search", "stages",
    "bytes_per_vector", "load_encoder", "save", "load", "config", "provenance", "state_hash",
    # what it is and what was fitted
    "recipe", "settings", "compressor", "quantizer", "fit_info", "rescoring", "is_fitted",
    "output_dim", "dims", "precisions",
}  # fmt: skip


def _vectors(n: int = 200, width: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width)).astype(np.float32)


def _fitted(**settings: object) -> CompressedModel:
    return CompressedModel(compressor="pca", dim=8, **settings).fit(  # type: ignore[arg-type]
        vectors=_vectors(), data_label="synthetic"
    )


def test_the_public_surface_is_the_listed_one() -> None:
    model = _fitted(precision="int8")
    members = {n for n in dir(type(model)) if not n.startswith("_")}
    members |= {n for n in vars(model) if not n.startswith("_")}
    assert members == PUBLIC
    assert len(PUBLIC) <= 24


def test_the_recipe_and_the_settings_are_apart() -> None:
    model = _fitted(precision="int8", normalize=True, batch_size=8, rescore_factor=2)
    assert model.recipe == Recipe(
        encoder=None, encoder_kind=None, name="vectors", input_dim=16, layer=None,
        compressor="pca", precision="int8", normalize=True, quantizer_params={},
        rescore_factor=2.0, rescore_precision="int8",
    )  # fmt: skip
    with pytest.raises(AttributeError):
        model.recipe.precision = "binary"  # type: ignore[misc]  # frozen: fixed at build
    assert isinstance(model.settings, RuntimeSettings)
    model.settings.batch_size = 32  # how it runs: settable, checked
    assert model.settings.batch_size == 32
    with pytest.raises(DemitasseError, match="batch_size"):
        model.settings.batch_size = 0
    with pytest.raises(DemitasseError, match="needs an encoder"):
        model.settings.backend = "onnx"  # a vectors-only model has no encoder to run


def test_the_models_precision_is_the_default_of_both_verbs() -> None:
    model = _fitted(precision="int8")
    vectors = _vectors(5, seed=1)
    codes = model.transform(vectors)
    assert codes.dtype == np.int8 and codes.shape == (5, 8)
    np.testing.assert_array_equal(codes, model.transform(vectors, precision="int8"))
    assert model.transform(vectors, precision="float32").dtype == np.float32
    assert model.bytes_per_vector() == 8 and model.bytes_per_vector(precision="float32") == 32


def test_no_property_loads_the_encoder(tmp_path: Path) -> None:
    # A source that does not exist: anything that tried to load it would fail.
    model = CompressedModel(str(tmp_path / "no-such-encoder"), compressor="pca", dim=4)
    recipe = model.recipe
    assert recipe.encoder == str((tmp_path / "no-such-encoder").resolve())
    assert (recipe.encoder_kind, recipe.input_dim, recipe.layer) == (None, None, None)
    assert (model.is_fitted, model.rescoring) == (False, None)
    assert model.precisions == ["float32", "binary"]
    repr(model)
    with pytest.raises(DemitasseError):
        model.load_encoder()  # the verb that loads says so


def test_the_state_hash_is_computed_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _fitted(precision="int8", rescore_factor=2)
    model.save(tmp_path / "m")
    loaded = CompressedModel.load(tmp_path / "m")

    def no_files(*args: object, **kwargs: object) -> None:
        raise AssertionError("the state hash wrote a file")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", no_files)
    monkeypatch.setattr(tempfile, "mkdtemp", no_files)
    assert loaded.state_hash() == model.state_hash()
    assert loaded.provenance()["fitted_state"] == model.state_hash()
    other = CompressedModel(compressor="pca", dim=8, precision="int8", rescore_factor=2).fit(
        vectors=_vectors(seed=3)
    )
    assert other.state_hash() != model.state_hash()  # other data, other fitted state


def test_a_width_that_cannot_exist_is_refused_not_capped() -> None:
    """#49: ``fit --dim 1000`` on 384-d vectors, or PCA to 16 dims fitted on 2 vectors, was a
    silent cap or arbitrary directions; each is now a one-line error before any fitting."""
    with pytest.raises(DemitasseError, match="dim 40 exceeds the 16 dimensions"):
        CompressedModel(compressor="pca", dim=40).fit(vectors=_vectors(100, 16))
    with pytest.raises(DemitasseError, match="needs at least 8 vectors; got 2"):
        CompressedModel(compressor="pca", dim=8).fit(vectors=_vectors(2, 16))
    # Truncation learns nothing from the data: two vectors are enough to record the width.
    assert CompressedModel(compressor="truncate", dim=8).fit(vectors=_vectors(2, 16)).is_fitted
