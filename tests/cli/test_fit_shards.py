# ruff: noqa: N806  (scikit-learn convention: matrices are capitalised)
"""``demitasse fit --vectors 'dir/*.parquet'``: PCA from shard statistics (locally and on a real
local Ray), other compressors from a seeded sample; bad shards fail in one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.compress import PCA, make_compressor, make_quantizer
from demitasse.compress.shards import sample_shards
from demitasse.model import CompressedModel
from tests.compress.shard_files import write_rows, write_shards
from tests.compress.test_pca_statistics import _vectors


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, Path]:
    X = _vectors(n=1500, d=16)
    folder = tmp_path_factory.mktemp("vectors")
    write_shards(folder, X, [400, 401, 1100])
    return X, folder


def _fit(folder: Path, out: Path, *options: str) -> CompressedModel:
    argv = ["fit", "--vectors", str(folder / "*.parquet"), *options, "--out", str(out)]
    assert main(argv) == 0, argv
    return CompressedModel.load(out)


def _assert_pca_equal(fitted: PCA, expected: PCA) -> None:
    signs = np.sign(np.sum(fitted.components_ * expected.components_, axis=1))
    np.testing.assert_allclose(fitted.components_ * signs[:, None], expected.components_, atol=1e-6)
    np.testing.assert_allclose(fitted.explained_variance_, expected.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(fitted.mean_, expected.mean_, atol=1e-12)


def test_pca_from_shards_round_trip(shards, tmp_path):
    X, folder = shards
    model = _fit(folder, tmp_path / "m", "--compressor", "pca:whiten=true", "--dim", "6")
    assert isinstance(model.compressor, PCA)
    _assert_pca_equal(model.compressor, PCA(dim=6, whiten=True).fit(X))
    info = json.loads((tmp_path / "m" / "config.json").read_text())["fit"]
    assert (info["n_samples"], info["shards"], info["statistics"]) == (1500, 4, "local")
    assert info["sample"] is None  # float32 PCA needs no sample
    # The saved model transforms stored vectors like the in-memory PCA.
    argv = ["transform", str(tmp_path / "m"), "--input", str(folder / "part-00000.parquet"),
            "--out", str(tmp_path / "small.npy")]  # fmt: skip
    assert main(argv) == 0
    expected = PCA(dim=6, whiten=True).fit(X).transform(X[:400])
    np.testing.assert_allclose(np.abs(np.load(tmp_path / "small.npy")), np.abs(expected),
                               atol=1e-4)  # fmt: skip


def test_pca_abtt_int8_calibrates_on_a_sample(shards, tmp_path):
    X, folder = shards
    model = _fit(folder, tmp_path / "m", "--compressor", "pca-abtt", "--dim", "4",
                 "--precision", "int8", "--sample", "300", "--seed", "2")  # fmt: skip
    assert isinstance(model.compressor, PCA) and model.compressor.abtt == 1
    _assert_pca_equal(model.compressor, PCA(dim=4, abtt=1).fit(X))
    assert model.fit_info["sample"] == {"size": 300, "of": 1500, "seed": 2}
    assert "int8" in model.precisions
    # The int8 ranges are those of the PCA's output on the seeded sample.
    reduced = model.compressor.transform(sample_shards(folder, 300, seed=2))
    expected = make_quantizer("int8").fit(reduced)
    codes = model.transform(X[:50], precision="int8")
    assert codes.dtype == np.int8 and codes.shape == (50, 4)
    np.testing.assert_array_equal(codes, expected.quantize(model.compressor.transform(X[:50])))


def test_other_compressors_fit_on_the_seeded_sample(shards, tmp_path):
    X, folder = shards
    model = _fit(folder, tmp_path / "m", "--compressor", "isomap", "--dim", "3",
                 "--sample", "200", "--seed", "5")  # fmt: skip
    assert model.compressor.n_fit_samples_ == 200
    assert model.fit_info["sample"] == {"size": 200, "of": 1500, "seed": 5}
    sample = sample_shards(folder, 200, seed=5)
    expected = make_compressor("isomap", dim=3).fit(sample)
    np.testing.assert_allclose(model.compressor.transform(X[:20]), expected.transform(X[:20]),
                               atol=1e-5)  # fmt: skip


def test_pca_from_shards_on_ray(shards, tmp_path):
    ray = pytest.importorskip("ray")
    X, folder = shards
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        model = _fit(folder, tmp_path / "m", "--compressor", "pca", "--dim", "5", "--engine", "ray")
    finally:
        ray.shutdown()
    _assert_pca_equal(model.compressor, PCA(dim=5).fit(X))
    assert model.fit_info["statistics"] == "ray"


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("demitasse: error:") and "\n" not in err, err
    assert needle in err, err


def test_bad_shards_fail_in_one_line(shards, tmp_path, capsys):
    _, folder = shards
    out = str(tmp_path / "out")
    fit = ["fit", "--compressor", "pca", "--out", out, "--vectors"]
    _fails(capsys, [*fit, str(tmp_path / "none-*.parquet")], "no Parquet file matches")
    _fails(capsys, [*fit, str(folder / "*.parquet"), "--vector-column", "vec"], "no column 'vec'")
    ragged = tmp_path / "ragged"
    ragged.mkdir()
    write_rows(ragged / "a.parquet", [[1.0, 2.0], [3.0, 4.0], [5.0]])
    _fails(capsys, [*fit, str(ragged / "*.parquet")], "row 2 has 1 values")
    np.save(tmp_path / "v.npy", np.ones((4, 3), np.float32))
    _fails(capsys, [*fit, str(tmp_path / "v.npy"), "--sample", "2"], "take Parquet vectors")
    _fails(capsys, ["fit", "--texts", str(tmp_path / "t.txt"), "--sample", "2", "--out", out],
           "apply to --vectors")  # fmt: skip
    _fails(capsys, [*fit, str(folder), "--sample", "0"], "--sample")
    assert not Path(out).exists()
