# ruff: noqa: N806  (scikit-learn convention: matrices are capitalised)
"""Folded inference plans compute what the trained networks compute, before and after a save."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from demitasse.compress import make_compressor
from demitasse.compress.base import load_compressor
from demitasse.compress.learned import LearnedCompressor

FAST = {"max_epochs": 1, "batch_size": 128, "hidden_dim": 32, "device": "cpu"}


def unit_rows(n: int, d: int, seed: int, spread: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scales = np.linspace(3.0, 0.2, d) if spread else np.ones(d)
    X = rng.normal(size=(n, d)) * scales + (0.5 if spread else 0.0)
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def shaken(compressor: LearnedCompressor, seed: int) -> LearnedCompressor:
    """Every weight moved at random: one epoch leaves the zero-initialised output layers
    near zero, where a wrong fold of them would go unseen."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in compressor.network_.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return compressor


CASES: list[tuple[str, dict[str, Any], list[int]]] = [
    ("adaptor", {"dim": 32, "min_dim": 4}, [32, 20, 8, 4]),
    ("smec", {"dim": 32, "min_dim": 4}, [32, 20, 16, 9, 8, 5, 4]),
    ("smec", {"dim": 32, "min_dim": 4, "ads": False, "nested_stages": True}, [32, 12, 4]),
    ("smec", {"dim": 32, "min_dim": 8, "rotate": False, "smrl": False}, [32, 8]),
    ("smec", {"dim": 32, "min_dim": 4, "inference": "distilled"}, [32, 20, 16, 9, 8, 5, 4]),
    ("mcr2", {"dim": 16}, [16]),
]


@pytest.mark.parametrize(("method", "params", "dims"), CASES, ids=lambda c: str(c))
def test_the_folded_plan_equals_the_network(
    method: str, params: dict[str, Any], dims: list[int], tmp_path: Path
) -> None:
    X = unit_rows(600, 48, seed=0, spread=True)
    compressor = make_compressor(method, **FAST, **params).fit(X)
    assert isinstance(compressor, LearnedCompressor)
    shaken(compressor, seed=1)
    compressor._plans = {}  # weights changed in place, behind the plan's back
    Y = unit_rows(500, 48, seed=2)
    for dim in dims:
        folded = compressor.transform(Y, dim=dim)
        reference = compressor.reference_transform(Y, dim=dim)
        assert folded.shape == reference.shape == (500, dim)
        assert np.abs(reference).max() > 0.05  # a real signal, not zeros on both sides
        np.testing.assert_allclose(folded, reference, rtol=0, atol=1e-5)
    compressor.save(tmp_path / "c")
    loaded = load_compressor(tmp_path / "c")
    for dim in dims:
        np.testing.assert_array_equal(loaded.transform(Y, dim=dim), compressor.transform(Y, dim))


def test_a_refit_does_not_reuse_the_old_plan() -> None:
    X = unit_rows(600, 48, seed=0, spread=True)
    compressor = make_compressor("adaptor", dim=16, min_dim=4, seed=0, **FAST).fit(X)
    before = compressor.transform(X, dim=8)
    compressor.set_params(seed=5).fit(unit_rows(600, 48, seed=7, spread=True))
    after = compressor.transform(X, dim=8)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, compressor.reference_transform(X, dim=8), atol=1e-5)


@pytest.mark.parametrize(
    ("method", "narrow", "wide"),
    [
        ("adaptor", 5, 100),
        ("adaptor", 32, 40),
        ("adaptor", 33, 64),
        ("adaptor", 70, 100),
        ("smec", 5, 8),
        ("smec", 20, 32),
    ],
)
def test_a_narrow_transform_is_an_exact_prefix_of_a_wider_one(
    method: str, narrow: int, wide: int
) -> None:
    """Products of another shape round differently: the plan keeps their shapes fixed."""
    X = unit_rows(600, 128, seed=0, spread=True)
    compressor = make_compressor(method, dim=100 if method == "adaptor" else 32, **FAST).fit(X)
    shaken(compressor, seed=3)  # type: ignore[arg-type]
    compressor._plans = {}  # type: ignore[attr-defined]
    Y = unit_rows(400, 128, seed=4)
    np.testing.assert_array_equal(
        compressor.transform(Y, dim=narrow), compressor.transform(Y, dim=wide)[:, :narrow]
    )


def test_a_distilled_smec_is_an_exact_prefix_between_its_stage_widths() -> None:
    X = unit_rows(600, 128, seed=0, spread=True)
    compressor = make_compressor("smec", dim=64, inference="distilled", **FAST).fit(X)
    shaken(compressor, seed=3)  # type: ignore[arg-type]
    compressor._plans = {}  # type: ignore[attr-defined]
    Y = unit_rows(400, 128, seed=4)
    np.testing.assert_array_equal(
        compressor.transform(Y, dim=40), compressor.transform(Y, dim=64)[:, :40]
    )
