"""The STS harness: metric, grid of layer × compressor × dim × precision, result records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli.specs import parse_compressor_specs, parse_int_list, parse_precisions
from demitasse.data import ScoredPairs
from demitasse.errors import DataError, DemitasseError
from demitasse.evaluation.grid import (
    evaluate_grid,
)
from demitasse.evaluation.records import (
    ResultRecord,
    mean_over_seeds,
    read_records,
    write_records,
)
from demitasse.evaluation.sts import spearman_x100
from demitasse.evaluation.tasks import STSTask
from tests.helpers import FakeEncoder


def _pairs(name: str, n: int, seed: int) -> ScoredPairs:
    rng = np.random.default_rng(seed)
    return ScoredPairs(
        name=name,
        sentences1=[f"{name} left {i}" for i in range(n)],
        sentences2=[f"{name} right {i}" for i in range(n)],
        scores=rng.uniform(0, 5, n),
    )


def test_spearman_is_scaled_and_rank_based() -> None:
    gold = np.array([1.0, 2.0, 3.0, 4.0])
    assert spearman_x100(np.array([10.0, 20.0, 30.0, 1000.0]), gold) == pytest.approx(100.0)
    assert spearman_x100(-gold, gold) == pytest.approx(-100.0)
    assert spearman_x100(np.ones(4), gold) == 0.0
    with pytest.raises(DataError):
        spearman_x100(np.ones(3), gold)


def test_specs_parse_presets_and_options() -> None:
    specs = parse_compressor_specs("none, truncate,pca-abtt,pca:whiten=true:abtt=2")
    assert [s.label for s in specs] == ["none", "truncate", "pca-abtt", "pca:whiten=true:abtt=2"]
    assert specs[3].method == "pca" and specs[3].params == {"whiten": True, "abtt": 2}
    assert specs[2].build(384, 64).abtt == 3  # d/100 directions
    for bad in ("svd", "pca:whiten", "none:x=1", ""):
        with pytest.raises(DemitasseError):
            parse_compressor_specs(bad)
    assert parse_int_list("384,8", "--dims") == [384, 8]
    for bad in ("a,b", "0", ""):
        with pytest.raises(DemitasseError):
            parse_int_list(bad, "--dims")
    with pytest.raises(DemitasseError, match="unknown precision"):
        parse_precisions("float32,int4")


def test_grid_scores_every_configuration_and_fits_on_fit_data_only() -> None:
    encoder = FakeEncoder(dim=16)
    suite = {"A": _pairs("A", 40, 0), "B": _pairs("B", 30, 1)}
    fit_texts = [f"train {i}" for i in range(50)]
    records = evaluate_grid(
        encoder,
        [STSTask(suite)],
        specs=parse_compressor_specs("none,truncate,pca"),
        dims=[32, 16, 4],
        precisions=["float32", "int8", "binary"],
        layers=[1, 2],
        fit_texts=fit_texts,
        fit_data="train",
    )
    # none: 1 dim; truncate and pca: dims 16 and 4 (32 > width is skipped); 3 rows each.
    configs = {(r.layer, r.method, r.dim, r.precision) for r in records}
    assert len(configs) == 2 * (1 + 2 + 2) * 3
    assert len(records) == len(configs) * 3
    assert {r.dataset for r in records} == {"A", "B", "avg"}
    by_key = {(r.layer, r.method, r.dim, r.precision, r.dataset): r for r in records}
    none = by_key[(2, "none", 16, "float32", "A")]
    assert none.fit_data is None and none.bytes_per_vector == 64
    assert by_key[(2, "pca", 4, "int8", "A")].bytes_per_vector == 4
    assert by_key[(2, "pca", 4, "int8", "A")].fit_data == "train"
    assert by_key[(1, "truncate", 16, "binary", "B")].bytes_per_vector == 2
    # Full-width truncation is the model itself.
    assert by_key[(1, "truncate", 16, "float32", "A")].score == pytest.approx(
        by_key[(1, "none", 16, "float32", "A")].score
    )
    average = by_key[(1, "pca", 4, "float32", "avg")].score
    parts = [by_key[(1, "pca", 4, "float32", d)].score for d in "AB"]
    assert average == pytest.approx(np.mean(parts))
    # Evaluation and fit sentences were each encoded once.
    assert encoder.calls == [140, 50]


def test_grid_refuses_to_fit_without_fit_data() -> None:
    with pytest.raises(DemitasseError, match="fit data"):
        evaluate_grid(
            FakeEncoder(),
            [STSTask({"A": _pairs("A", 10, 0)})],
            specs=parse_compressor_specs("pca"),
            dims=[4],
        )


def test_truncation_alone_needs_no_fit_data() -> None:
    records = evaluate_grid(
        FakeEncoder(),
        [STSTask({"A": _pairs("A", 10, 0)})],
        specs=parse_compressor_specs("truncate"),
        dims=[4],
    )
    assert [(r.dim, r.fit_data) for r in records] == [(4, None)]


def test_records_round_trip_and_carry_the_machine(tmp_path: Path) -> None:
    record = ResultRecord(
        model="m",
        layer=6,
        method="pca",
        dim=64,
        precision="int8",
        task="sts",
        dataset="STS12",
        metric="spearman",
        score=72.37,
        bytes_per_vector=64,
        fit_data="x",
    )
    assert "cores" in record.machine
    write_records(tmp_path / "results.json", [record])
    assert read_records(tmp_path) == [record]
    raw = json.loads((tmp_path / "results.json").read_text())
    assert set(raw[0]) >= {
        "model",
        "layer",
        "method",
        "dim",
        "precision",
        "task",
        "dataset",
        "metric",
        "score",
        "bytes_per_vector",
        "fit_data",
        "machine",
    }


def test_reading_bad_results_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no results file"):
        read_records(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        read_records(tmp_path)
    (tmp_path / "results.json").write_text('[{"model": "m"}]')
    with pytest.raises(DataError, match="lacks"):
        read_records(tmp_path)


def test_evaluate_vectors_scores_outside_vectors_like_the_grid() -> None:
    from demitasse.evaluation.grid import evaluate_vectors

    task = STSTask({"A": _pairs("A", 30, 0), "B": _pairs("B", 30, 1)})
    texts = task.texts()
    encoder = FakeEncoder(dim=16)
    vectors = encoder.encode(texts)
    records = evaluate_vectors(vectors, texts, [task], model="m", method="head", fit_data="x")
    grid = evaluate_grid(
        encoder, [task], specs=parse_compressor_specs("none"), dims=[16], layers=[2]
    )
    assert [r.dataset for r in records] == ["A", "B", "avg"]
    assert {r.dataset: r.score for r in records} == pytest.approx(
        {r.dataset: r.score for r in grid}
    )
    assert all(
        (r.model, r.method, r.dim, r.bytes_per_vector, r.fit_data) == ("m", "head", 16, 64, "x")
        for r in records
    )


def test_mean_over_seeds_averages_only_records_that_differ_in_seed() -> None:
    def record(method: str, dim: int, score: float, **extra: object) -> ResultRecord:
        return ResultRecord(
            model="m", layer=None, method=method, dim=dim, precision="float32", task="sts",
            dataset="avg", metric="spearman", score=score, machine="x", extra=dict(extra),
        )  # fmt: skip

    records = [
        record("truncate", 8, 61.0, setting="u"),
        record("smec", 8, 64.0, setting="u", seed=0),
        record("smec", 16, 70.0, setting="u", seed=0),
        record("smec", 8, 66.0, setting="u", seed=1),
        record("smec", 8, 50.0, setting="s", seed=0),
        record("smec", 16, 72.0, setting="u", seed=1),
    ]
    averaged = mean_over_seeds(records)
    assert [(r.method, r.dim, r.extra.get("setting"), r.score) for r in averaged] == [
        ("truncate", 8, "u", 61.0),
        ("smec", 8, "u", 65.0),
        ("smec", 16, "u", 71.0),
        ("smec", 8, "s", 50.0),
    ]
    assert averaged[0] is records[0]
    two_seeds = {"setting": "u", "seeds": [0, 1], "score_std": pytest.approx(2**0.5)}
    assert averaged[1].extra == two_seeds
    assert averaged[3].extra == {"setting": "s", "seeds": [0], "score_std": 0.0}
    assert all("seed" not in r.extra for r in averaged)
