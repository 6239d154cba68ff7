# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""The binary quantiser's rotation: random orthogonal or learned by ITQ, fitted, saved, loaded
and used by the compressed model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from demitasse import CompressedModel
from demitasse.compress import BinaryQuantizer, load_quantizer, make_quantizer
from demitasse.compress.binary import itq_rotation, random_rotation
from demitasse.errors import CompressorError
from tests.helpers import correlated

D = 24


def quantisation_loss(V: np.ndarray, rotation: np.ndarray) -> float:
    """ITQ's objective ‖sign(VR) − VR‖², per row."""
    projected = V.astype(np.float64) @ rotation
    return float(((np.where(projected >= 0, 1.0, -1.0) - projected) ** 2).sum() / len(V))


def pca_projection(X: np.ndarray) -> np.ndarray:
    centred = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt.T


@pytest.mark.parametrize("rotation", ["random", "itq"])
def test_the_rotation_is_orthogonal_and_applied_to_centred_vectors(rotation: str) -> None:
    X = correlated()
    q = BinaryQuantizer(rotation=rotation).fit(X)
    R = q.rotation_.astype(np.float64)
    assert R.shape == (D, D) and q.rotation_.dtype == np.float32
    np.testing.assert_allclose(R.T @ R, np.eye(D), atol=1e-5)
    np.testing.assert_allclose(q.mean_, X.mean(axis=0), rtol=1e-5)
    bits = np.unpackbits(q.quantize(X), axis=1, count=D)
    np.testing.assert_array_equal(bits, ((X - q.mean_) @ q.rotation_ > 0).astype(np.uint8))
    # Centring balances the bits that the data's large offset would otherwise set everywhere.
    assert 0.3 < bits.mean() < 0.7


def test_random_rotation_is_uniform_enough_to_have_no_favourite_sign() -> None:
    diagonals = np.array([np.diag(random_rotation(6, seed)) for seed in range(200)])
    assert abs(diagonals.mean()) < 0.05


@pytest.mark.parametrize("project", [False, True], ids=["raw", "pca"])
def test_itq_lowers_the_quantisation_loss(project: bool) -> None:
    X = correlated(n=1000)
    V = pca_projection(X) if project else X - X.mean(axis=0)
    none = quantisation_loss(V, np.eye(D))
    start = quantisation_loss(V, random_rotation(D, 0))
    learned = quantisation_loss(V, itq_rotation(V, 50, 0))
    # ITQ starts from the seed's random rotation and no step raises the loss.
    assert learned <= start
    assert learned < none, (learned, none)


def test_itq_loss_never_rises_with_more_iterations() -> None:
    V = pca_projection(correlated(n=600))
    losses = [quantisation_loss(V, itq_rotation(V, n, 3)) for n in (1, 5, 20, 50)]
    assert losses == sorted(losses, reverse=True)


@pytest.mark.parametrize("rotation", ["random", "itq"])
def test_a_seed_makes_the_rotation_deterministic(rotation: str) -> None:
    X = correlated()
    first = BinaryQuantizer(rotation=rotation, seed=7).fit(X)
    again = BinaryQuantizer(rotation=rotation, seed=7).fit(X)
    other = BinaryQuantizer(rotation=rotation, seed=8).fit(X)
    np.testing.assert_array_equal(first.rotation_, again.rotation_)
    np.testing.assert_array_equal(first.quantize(X), again.quantize(X))
    assert not np.array_equal(first.rotation_, other.rotation_)


@pytest.mark.parametrize("rotation", ["random", "itq"])
def test_save_and_load_round_trip(rotation: str, tmp_path: Path) -> None:
    X = correlated()
    q = BinaryQuantizer(rotation=rotation, seed=2, itq_iterations=10).fit(X)
    q.save(tmp_path / "q")
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert config["version"] == 2
    assert config["params"] == {
        "threshold": "zero", "rotation": rotation, "seed": 2, "itq_iterations": 10
    }  # fmt: skip
    loaded = load_quantizer(tmp_path / "q")
    assert isinstance(loaded, BinaryQuantizer) and loaded.get_params() == q.get_params()
    np.testing.assert_array_equal(loaded.rotation_, q.rotation_)
    np.testing.assert_array_equal(loaded.mean_, q.mean_)
    np.testing.assert_array_equal(loaded.quantize(X), q.quantize(X))


def test_quantizers_saved_in_another_format_version_are_refused_in_one_line(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    config = {
        "kind": "quantizer", "precision": "binary", "version": 1, "demitasse_version": "0.1.0",
        "params": {"threshold": "zero"}, "input_dim": D, "n_fit_samples": 400, "learned": {},
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    save_file({}, str(folder / "state.safetensors"))
    with pytest.raises(CompressorError) as caught:
        load_quantizer(folder)
    message = str(caught.value)
    assert "\n" not in message and str(folder) in message
    assert "binary format version 1; this demitasse reads version 2" in message


def test_rotated_codes_need_the_full_width() -> None:
    X = correlated()
    q = BinaryQuantizer(rotation="itq").fit(X)
    with pytest.raises(CompressorError, match=r"mixes all 24 dims .* not 10") as exc:
        q.quantize(X[:, :10])
    assert "\n" not in str(exc.value)
    with pytest.raises(CompressorError, match="not fitted"):
        BinaryQuantizer(rotation="random").quantize(X)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"rotation": "pca"}, "rotation must be one of none, random, itq"),
        ({"rotation": "itq", "threshold": "mean"}, "use threshold='zero' with it"),
        ({"rotation": "random", "seed": -1}, "seed must be a non-negative integer"),
        ({"rotation": "itq", "itq_iterations": 0}, "itq_iterations must be a positive integer"),
    ],
)
def test_bad_rotation_options_fail_in_one_line(params: dict, message: str) -> None:
    with pytest.raises(CompressorError, match=message) as exc:
        make_quantizer("binary", **params)
    assert "\n" not in str(exc.value)


def test_a_corrupt_rotation_is_refused_on_load(tmp_path: Path) -> None:
    q = BinaryQuantizer(rotation="random").fit(correlated())
    q.rotation_ = q.rotation_ * 2  # still finite, no longer a rotation
    q.save(tmp_path / "q")
    with pytest.raises(CompressorError, match="rotation_ is not orthogonal"):
        load_quantizer(tmp_path / "q")


def test_the_compressed_model_fits_saves_and_loads_a_rotated_quantizer(tmp_path: Path) -> None:
    X = correlated()
    model = CompressedModel(
        compressor="pca", dim=16, precision="binary", quantizer_params={"rotation": "itq"}
    ).fit(vectors=X)
    assert model.quantizer.rotation == "itq"
    codes = model.transform(X, precision="binary")
    np.testing.assert_array_equal(
        codes, model.quantizer.quantize(model.transform(X, precision="float32", normalize=False))
    )
    model.save(tmp_path / "m")
    loaded = CompressedModel.load(tmp_path / "m")
    assert loaded.recipe.quantizer_params["rotation"] == "itq"
    np.testing.assert_array_equal(loaded.transform(X, precision="binary"), codes)
    # Float vectors still come at any width; rotated codes only at the full one.
    assert loaded.transform(X, dim=8, precision="float32").shape == (len(X), 8)
    with pytest.raises(CompressorError, match="itq rotation of the binary codes spans all 16"):
        loaded.transform(X, dim=8, precision="binary")
    with pytest.raises(CompressorError, match="rotation must be one of"):
        CompressedModel(precision="binary", quantizer_params={"rotation": "yes"})
    with pytest.raises(CompressorError, match="need a precision other than float32"):
        CompressedModel(quantizer_params={"rotation": "itq"})
