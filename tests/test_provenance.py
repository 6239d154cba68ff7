"""Provenance: what identifies a model's output, and the refusal to mix two models' vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demitasse import CompressedModel
from demitasse.errors import DemitasseError
from demitasse.provenance import (
    ProvenanceError,
    check_provenance,
    provenance_differences,
    provenance_json,
    read_provenance,
)
from tests.helpers import WORDS, build_tiny_model


def _vectors(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((300, 24)).astype(np.float32)


def _pca_model(seed: int = 0, dim: int = 8) -> CompressedModel:
    model = CompressedModel(compressor="pca", dim=dim, precision="int8")
    return model.fit(vectors=_vectors(seed), data_label="api vectors")


def test_equal_fits_have_equal_provenance_and_it_survives_save_and_load(tmp_path: Path) -> None:
    first, second = _pca_model(), _pca_model()
    assert first.provenance() == second.provenance()
    first.save(tmp_path / "m")
    loaded = CompressedModel.load(tmp_path / "m")
    assert loaded.provenance() == first.provenance()
    assert loaded.provenance(dim=4, precision="float32")["dim"] == 4


def test_every_output_changing_difference_is_named() -> None:
    base = _pca_model().provenance()
    other_fit = _pca_model(seed=1).provenance()
    assert provenance_differences(base, other_fit) == ["fitted_state"]
    assert provenance_differences(base, _pca_model().provenance(dim=4)) == ["dim"]
    int8 = _pca_model().provenance(precision="int8")
    assert provenance_differences(base, int8) == []  # int8 is the model's own precision
    assert provenance_differences(base, _pca_model().provenance(precision="float32")) == [
        "precision"
    ]
    newer = {**base, "demitasse_version": "99.0"}
    assert provenance_differences(base, newer) == []  # the version is informative only


def test_a_mismatch_is_one_line_naming_the_keys() -> None:
    base = _pca_model().provenance()
    with pytest.raises(ProvenanceError, match=r"^shards/ holds vectors of a different model"):
        check_provenance(base, _pca_model(seed=1).provenance(), "shards/")
    try:
        check_provenance(base, _pca_model().provenance(dim=4), "t")
    except ProvenanceError as exc:
        assert "\n" not in str(exc) and "dim 8 != 4" in str(exc)
    check_provenance(base, dict(base), "same")  # equal: no error


def test_encoder_identity_is_part_of_provenance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    tiny = build_tiny_model(tmp_path / "tiny")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(60)]
    model = CompressedModel(tiny, compressor="pca", dim=8).fit(texts)
    record = model.provenance()
    assert record["encoder"]["fingerprint"] and record["encoder"]["kind"] == "transformer"
    cut = CompressedModel(tiny, layer=1, compressor="pca", dim=8).fit(texts)
    assert "layer" in provenance_differences(record, cut.provenance())


def test_stored_text_round_trips_and_garbage_is_refused() -> None:
    record = _pca_model().provenance()
    assert read_provenance(provenance_json(record), "x") == record
    with pytest.raises(DemitasseError, match="unreadable provenance"):
        read_provenance(b"\xff{", "x")
    with pytest.raises(DemitasseError, match="not a JSON object"):
        read_provenance("[1]", "x")


def test_the_backend_is_recorded_and_int8_weights_are_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """#50: an index built with torch and queried with onnx-int8 is flagged (a warning: the same
    model, slightly other vectors); torch and onnx (float32 weights) are the same vectors; a
    store written before the backend was recorded is compared as before."""
    from demitasse.provenance import check_provenance

    def record(backend: str | None) -> dict:
        encoder = {"name": "m", "kind": "transformer", "dim": 8, "fingerprint": "f"}
        if backend is not None:
            encoder["backend"] = backend
        return {"encoder": encoder, "layer": None, "method": "pca", "dim": 4}

    check_provenance(record("torch"), record("onnx"), "t")
    check_provenance(record(None), record("onnx-int8"), "t")
    assert "int8" not in caplog.text
    check_provenance(record("torch"), record("onnx-int8"), "the table")
    assert "the table holds vectors of an encoder run with float32 weights" in caplog.text
