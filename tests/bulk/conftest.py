"""Fixtures of the bulk tests: a tiny transformer with fitted models, a small corpus in every
input format, stored vectors, and helpers that run the CLI and read outputs back."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demitasse.bulk import read_output
from demitasse.cli.main import main
from tests.conftest import REPO
from tests.helpers import WORDS, build_tiny_model

TEXTS = 240


@dataclass(frozen=True)
class Models:
    int8: Path  # PCA 16, int8 codes
    float32: Path  # PCA 12, float32 (another provenance)
    binary: Path  # truncate 32, packed bits


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))) for _ in range(n)]


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    import torch

    from demitasse import CompressedModel

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("bulk-models")
    encoder = build_tiny_model(root / "tiny", layers=2)
    texts = sentences(300, seed=1)
    made = {}
    for name, method, dim, precision in (("int8", "pca", 16, "int8"),
                                         ("float32", "pca", 12, "float32"),
                                         ("binary", "truncate", 32, "binary")):  # fmt: skip
        model = CompressedModel(str(encoder), compressor=method, dim=dim, precision=precision)
        model.fit(texts, data_label="synthetic")
        made[name] = model.save(root / name)
    torch.set_num_threads(threads)
    return Models(**made)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four files of every kind, 240 texts, an empty line and a text with a Unicode line
    separator (which must not split a record)."""
    root = tmp_path_factory.mktemp("bulk-corpus")
    texts = sentences(TEXTS)
    texts[5] = ""
    texts[7] = "alpha\u2028beta"
    (root / "a.txt").write_text("\n".join(texts[:70]) + "\n", encoding="utf-8")
    import gzip

    with gzip.open(root / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(texts[70:120]) + "\n")
    lines = [json.dumps({"text": t, "n": i}) for i, t in enumerate(texts[120:180])]
    lines.insert(10, "")  # a blank line is no record, and ids keep line numbers
    (root / "c.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = pa.table({"text": texts[180:], "doc": [f"d{i}" for i in range(60)]})
    pq.write_table(table, root / "d.parquet", row_group_size=16)
    return root


@pytest.fixture(scope="session")
def vectors(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stored vectors of the tiny encoder's width (32), two files, with ids."""
    root = tmp_path_factory.mktemp("bulk-vectors")
    rng = np.random.default_rng(0)
    for part, n in (("v0", 130), ("v1", 90)):
        x = rng.normal(size=(n, 32)).astype(np.float32)
        ids = [f"{part}-{i}" for i in range(n)]
        embedding = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 32)
        pq.write_table(pa.table({"id": ids, "embedding": embedding}), root / f"{part}.parquet",
                       row_group_size=40)  # fmt: skip
    return root


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def rows(directory: Path) -> pa.Table:
    """Every row of an output, sorted by id."""
    return pa.concat_tables(list(read_output(directory))).sort_by("id")


def cli_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]),
                OMP_NUM_THREADS="1")  # fmt: skip


def folder_state(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}  # fmt: skip


@pytest.fixture(scope="module")
def ray_local() -> Iterator[object]:
    """One real local Ray (2 CPUs) for a test module, shut down at its end."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
