# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Statistics over Parquet vector shards, locally and on a real local Ray, give the PCA of all
the vectors; malformed shards fail in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from demitasse.compress import PCA
from demitasse.compress.shards import scan_shards, shard_statistics, vector_shards
from demitasse.compress.statistics import VectorStatistics
from demitasse.errors import DataError, DemitasseError
from tests.compress.shard_files import write_rows, write_shards
from tests.compress.test_pca_statistics import _vectors


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, Path]:
    X = _vectors(n=2500, d=16)
    folder = tmp_path_factory.mktemp("shards")
    write_shards(folder, X, [300, 301, 1800])
    return X, folder


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _assert_same_pca(stats: VectorStatistics, X: np.ndarray) -> None:
    for params in ({"dim": 6}, {"dim": 6, "whiten": True}, {"dim": 6, "abtt": 1}):
        memory = PCA(**params).fit(X)
        shards = PCA(**params).fit_from_statistics(stats)
        signs = np.sign(np.sum(memory.components_ * shards.components_, axis=1))
        np.testing.assert_allclose(shards.components_ * signs[:, None], memory.components_,
                                   atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(shards.explained_variance_, memory.explained_variance_,
                                   rtol=1e-9)  # fmt: skip
        np.testing.assert_allclose(shards.mean_, memory.mean_, atol=1e-12)


def test_local_shard_statistics_give_the_in_memory_pca(shards):
    X, folder = shards
    stats = shard_statistics(str(folder / "*.parquet"), batch_rows=100)
    assert stats.count == len(X)
    _assert_same_pca(stats, X)
    assert shard_statistics(folder).count == len(X)  # a directory means its *.parquet


def test_ray_shard_statistics_equal_the_local_ones(shards, ray_cluster):
    X, folder = shards
    stats = shard_statistics(str(folder / "*.parquet"), engine="ray", batch_rows=500)
    assert stats.count == len(X)
    np.testing.assert_allclose(stats.mean, X.astype(np.float64).mean(axis=0), atol=1e-12)
    _assert_same_pca(stats, X)


def test_a_bad_shard_on_ray_fails_in_one_line(shards, ray_cluster, tmp_path):
    _, folder = shards
    for path in folder.glob("*.parquet"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    write_rows(tmp_path / "part-99999.parquet", [[1.0] * 16, [1.0] * 15])
    # Ray may cut the file's two rows apart: then the error names it next to a file of 16.
    with pytest.raises(DataError, match=r"part-99999\.parquet") as caught:
        shard_statistics(str(tmp_path / "*.parquet"), engine="ray")
    message = str(caught.value)
    assert "\n" not in message and "15" in message and "16" in message, message


def test_shards_are_read_in_batches_not_whole(shards, monkeypatch):
    X, folder = shards
    sizes = []

    class Spy(VectorStatistics):
        def update(self, X):
            sizes.append(len(X))
            return super().update(X)

    scan_shards(folder, Spy(), batch_rows=64)
    assert sum(sizes) == len(X) and max(sizes) <= 64


def test_malformed_shards_fail_in_one_line(tmp_path):
    with pytest.raises(DataError, match="no Parquet file matches"):
        vector_shards(str(tmp_path / "nothing-*.parquet"))
    good = write_rows(tmp_path / "a.parquet", [[1.0, 2.0], [3.0, 4.5]])
    cases = {
        "ragged": (write_rows(tmp_path / "b.parquet", [[1.0, 2.0], [1.0]]), "row 1 has 1 values"),
        "null": (write_rows(tmp_path / "c.parquet", [[1.0, 2.0], None]), "row 1 is null"),
        "text": (write_rows(tmp_path / "d.parquet", ["a", "b"], kind=pa.string()),
                 "expected a list of numbers"),
        "width": (write_rows(tmp_path / "e.parquet", [[1.0, 2.0, 3.0]]),
                  "3 values, earlier ones 2"),
        "column": (write_rows(tmp_path / "f.parquet", [[1.0]], column="vec"),
                   "no column 'embedding'"),
    }  # fmt: skip
    broken = tmp_path / "g.parquet"
    broken.write_bytes(b"not parquet at all")
    cases["unreadable"] = (broken, "not a readable Parquet file")
    for name, (path, message) in cases.items():
        with pytest.raises(DataError, match=message) as caught:
            shard_statistics([good, path])
        assert "\n" not in str(caught.value), name
    with pytest.raises(DemitasseError, match="unknown engine"):
        shard_statistics(good, engine="spark")  # type: ignore[arg-type]


def test_shards_of_different_widths_on_ray_fail_in_one_line(shards, ray_cluster, tmp_path):
    _, folder = shards
    (tmp_path / "a.parquet").write_bytes((folder / "part-00000.parquet").read_bytes())
    write_rows(tmp_path / "b.parquet", [[1.0] * 15, [2.0] * 15])
    with pytest.raises(DataError, match="15") as caught:
        shard_statistics(str(tmp_path / "*.parquet"), engine="ray")
    message = str(caught.value)
    assert "\n" not in message and "b.parquet" in message, message
