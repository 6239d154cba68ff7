# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Rescoring travels with the model: fitted, saved and loaded with it, and searched the same
way by the model, by a bare QuantizedIndex and by the evaluation."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from demitasse import CompressedModel
from demitasse.compress import make_quantizer
from demitasse.data import ScoredPairs
from demitasse.errors import CompressorError, DemitasseError
from demitasse.evaluation import RetrievalTask, STSTask, evaluate_model, evaluate_run
from demitasse.evaluation.sts import spearman_x100
from demitasse.model_files import FORMAT_VERSION
from demitasse.search import QuantizedIndex
from tests.helpers import synthetic_beir

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss-cpu (the eval extra) is absent"
)

WIDTH = 32


def clustered(n: int, seed: int, centres: int = 20) -> np.ndarray:
    """Vectors around a few centres, so neighbourhoods exist and compression blurs them."""
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((centres, WIDTH))
    picked = means[rng.integers(0, centres, n)]
    return (picked + 0.6 * rng.standard_normal((n, WIDTH))).astype(np.float32)


def unit(X: np.ndarray) -> np.ndarray:
    X = X.astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


class LookupEncoder:
    """An encoder whose vector for each text is given: the evaluation sees known vectors."""

    name = "lookup"
    num_layers = 1
    dim = WIDTH

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def encode(
        self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32
    ) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)

    def encode_layers(
        self, texts: Sequence[str], layers: Sequence[int] | None = None, batch_size: int = 32
    ) -> dict[int, np.ndarray]:
        return {1: self.encode(texts)}


@pytest.fixture(scope="module")
def docs() -> np.ndarray:
    return clustered(500, seed=0)


@pytest.fixture(scope="module")
def queries() -> np.ndarray:
    return clustered(30, seed=1)


def rescoring_model(docs: np.ndarray, **settings: object) -> CompressedModel:
    """PCA to 8 dims, ITQ-rotated binary codes (1 byte), rescored with the full 32 dims."""
    model = CompressedModel(
        compressor="pca",
        dim=8,
        precision="binary",
        quantizer_params={"rotation": "itq"},
        **settings,  # type: ignore[arg-type]
    )
    return model.fit(vectors=docs, data_label="synthetic")


def _store_bytes(model: CompressedModel) -> int:
    """Bytes per document of the model's rescoring store (0 without one)."""
    store = model.stages().rescore_store
    return 0 if store is None else store.bytes_per_vector(WIDTH)


def _reduced(model: CompressedModel, vectors: np.ndarray) -> np.ndarray:
    """The compressed float vectors the first stage searches with."""
    return model.transform(vectors, precision="float32", normalize=False)


def test_fit_keeps_int8_ranges_of_the_encoders_normalised_full_output(docs: np.ndarray) -> None:
    model = rescoring_model(docs, rescore_factor=4)
    assert (model.rescoring is not None) and model.recipe.rescore_precision == "int8"
    assert model.stages().rescore_store.quantizer is not None
    assert (
        model.stages().rescore_store.quantizer.n_features_in_ == WIDTH
    )  # before the compressor, not 8
    expected = make_quantizer("int8").fit(unit(docs))
    store = model.stages().rescore_store.keep(docs[:50])
    assert store.dtype == np.int8 and store.shape == (50, WIDTH)
    assert np.array_equal(store, expected.quantize(unit(docs[:50])))
    floats = rescoring_model(docs, rescore_factor=2, rescore_precision="float32")
    assert floats.stages().rescore_store.quantizer is None
    np.testing.assert_allclose(
        floats.stages().rescore_store.keep(docs[:5]), unit(docs[:5]), atol=1e-6
    )


def test_bytes_are_reported_for_the_index_and_the_store_separately(docs: np.ndarray) -> None:
    plain = rescoring_model(docs)
    int8 = rescoring_model(docs, rescore_factor=4)
    floats = rescoring_model(docs, rescore_factor=4, rescore_precision="float32")
    assert [_store_bytes(m) for m in (plain, int8, floats)] == [0, WIDTH, 4 * WIDTH]
    assert {m.bytes_per_vector(precision="binary") for m in (plain, int8, floats)} == {1}
    index = int8.search_index(docs)
    assert (index.index_bytes_per_vector, index.rescore_bytes_per_vector) == (1, WIDTH)
    assert plain.search_index(docs).rescore_bytes_per_vector == 0


def test_the_models_search_is_a_quantized_index_on_the_same_vectors(
    docs: np.ndarray, queries: np.ndarray
) -> None:
    model = rescoring_model(docs, rescore_factor=4)
    reduced = model.transform(docs, precision="float32", normalize=False)
    by_hand = QuantizedIndex(
        model.quantizer.quantize(reduced),
        model.quantizer,
        dim=8,
        rescore_vectors=model.stages().rescore_store.quantizer.quantize(unit(docs)),
        rescore_quantizer=model.stages().rescore_store.quantizer,
    )
    expected = by_hand.search(
        _reduced(model, queries), 10, rescore_multiplier=4, rescore_queries=unit(queries)
    )
    index = model.search_index(docs)
    assert np.array_equal(index.codes, by_hand.codes)
    scores, rows = model.search(index, queries, 10)
    assert np.array_equal(rows, expected[1])
    np.testing.assert_allclose(scores, expected[0], rtol=1e-6)
    # Rescoring is what changed the answer: the codes alone rank otherwise.
    plain_rows = by_hand.search(_reduced(model, queries), 10)[1]
    assert not np.array_equal(rows, plain_rows)
    # A factor given to search overrides the model's, as the index's multiplier.
    once = by_hand.search(
        _reduced(model, queries), 10, rescore_multiplier=1, rescore_queries=unit(queries)
    )
    assert np.array_equal(model.search(index, queries, 10, rescore_factor=1)[1], once[1])
    # Rescoring with the full output finds more of the full model's own neighbours.
    truth = np.argsort(-(unit(queries) @ unit(docs).T), axis=1, kind="stable")[:, :10]
    found = [len(set(a) & set(b)) for a, b in zip(truth, rows, strict=True)]
    plain = [len(set(a) & set(b)) for a, b in zip(truth, plain_rows, strict=True)]
    assert sum(found) > sum(plain)


def test_save_and_load_keep_the_rescoring(
    docs: np.ndarray, queries: np.ndarray, tmp_path: Path
) -> None:
    for precision in ("int8", "float32"):
        model = rescoring_model(docs, rescore_factor=2.5, rescore_precision=precision)
        model.save(tmp_path / precision)
        config = json.loads((tmp_path / precision / "config.json").read_text())
        assert config["format_version"] == FORMAT_VERSION
        assert config["rescore"] == {
            "factor": 2.5,
            "precision": precision,
            "quantizer": "rescore" if precision == "int8" else None,
        }
        assert (tmp_path / precision / "rescore").is_dir() == (precision == "int8")
        loaded = CompressedModel.load(tmp_path / precision)
        assert (loaded.recipe.rescore_factor, loaded.recipe.rescore_precision) == (2.5, precision)
        assert "rescore_factor=2.5" in repr(loaded)
        assert np.array_equal(
            loaded.stages().rescore_store.keep(queries), model.stages().rescore_store.keep(queries)
        )
        before = model.search(model.search_index(docs), queries, 10)
        after = loaded.search(loaded.search_index(docs), queries, 10)
        assert np.array_equal(before[1], after[1]) and np.array_equal(before[0], after[0])
        model.save(tmp_path / precision)  # a saved model's folder may be replaced


def test_a_model_without_rescoring_records_none(docs: np.ndarray, tmp_path: Path) -> None:
    rescoring_model(docs).save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["format_version"] == FORMAT_VERSION and config["rescore"] is None
    assert not (tmp_path / "m" / "rescore").exists()
    loaded = CompressedModel.load(tmp_path / "m")
    assert not (loaded.rescoring is not None) and loaded.rescoring is None
    assert _store_bytes(loaded) == 0


def test_evaluate_model_scores_a_rescoring_model_as_it_searches(
    docs: np.ndarray, queries: np.ndarray
) -> None:
    rng = np.random.default_rng(3)
    model = rescoring_model(docs, rescore_factor=4)
    truth = np.argsort(-(unit(queries) @ unit(docs).T), axis=1, kind="stable")
    qrels = {f"q{i}": {f"d{j}": int(rng.integers(1, 3)) for j in truth[i, :5]} for i in range(30)}
    dataset = synthetic_beir(qrels, len(docs), len(queries))
    table = dict(zip(dataset.corpus_texts, docs, strict=True))
    table |= dict(zip(dataset.query_texts, queries, strict=True))
    pairs = ScoredPairs("Pairs", dataset.query_texts, dataset.corpus_texts[:30], rng.random(30))
    # The same fitted parts, with an encoder that embeds the texts as the vectors above.
    encoded = CompressedModel(
        LookupEncoder(table),
        compressor=model.compressor,
        precision="binary",
        rescore_factor=4,
    )
    encoded.quantizer = model.quantizer
    # The rescoring ranges are fitted state with no setter: given as fit would leave them.
    encoded._rescore_quantizer = model.stages().rescore_store.quantizer
    encoded.fit_info = model.fit_info
    records = evaluate_model(encoded, [RetrievalTask(dataset), STSTask({"Pairs": pairs})])

    _, rows = model.search(model.search_index(docs), queries, 100)
    ids = np.asarray(dataset.corpus_ids, dtype=object)
    run = {q: ids[r].tolist() for q, r in zip(dataset.query_ids, rows, strict=True)}
    expected = evaluate_run(run, qrels)
    retrieval = {r.metric: r for r in records if r.task == "retrieval"}
    assert set(retrieval) == set(expected)
    for metric, value in expected.items():
        assert retrieval[metric].score == pytest.approx(value)
    described = {
        "rescore": 4, "rescore_precision": "int8", "rescore_source": "encoder",
        "index_bytes": 1, "store_bytes": WIDTH,
    }  # fmt: skip
    for record in records:
        assert described.items() <= record.extra.items()
        assert record.bytes_per_vector == 1 + WIDTH  # the codes and the rescoring copy
    # A pair scores as rescoring scores it: the float query against the kept int8 vector.
    kept = model.stages().rescore_store.quantizer.dequantize(
        model.stages().rescore_store.keep(docs[:30])
    )
    similarity = (unit(kept) * unit(queries)).sum(axis=1)
    (sts,) = [r for r in records if r.task == "sts"]
    assert sts.score == pytest.approx(spearman_x100(similarity, pairs.scores))


def test_bad_rescoring_settings_fail_in_one_line(docs: np.ndarray, tmp_path: Path) -> None:
    bad = [
        ({"rescore_precision": "int8"}, "needs rescore_factor"),
        ({"rescore_factor": 0.5}, "rescore_factor must be a number ≥ 1"),
        ({"rescore_factor": True}, "rescore_factor must be a number ≥ 1"),
        ({"rescore_factor": float("nan")}, "rescore_factor must be a number ≥ 1"),
        ({"rescore_factor": 2, "rescore_precision": "binary"}, "rescore_precision must be one"),
    ]
    for settings, message in bad:
        with pytest.raises(CompressorError, match=message):
            CompressedModel(compressor="pca", dim=4, **settings)  # type: ignore[arg-type]
    plain = rescoring_model(docs)
    assert plain.stages().rescore_store is None and plain.rescoring is None
    with pytest.raises(CompressorError, match="does not rescore"):
        plain.search(plain.search_index(docs), docs[:2], rescore_factor=4)
    with pytest.raises(CompressorError, match="not fitted"):
        CompressedModel(compressor="pca", dim=4, rescore_factor=2).search_index(docs)
    model = rescoring_model(docs, rescore_factor=2)
    with pytest.raises(DemitasseError, match="vectors have 8 dimensions but this model takes 32"):
        model.search_index(docs[:, :8])


def test_damaged_rescoring_in_a_saved_model_is_a_one_line_error(
    docs: np.ndarray, tmp_path: Path
) -> None:
    rescoring_model(docs, rescore_factor=2).save(tmp_path / "good")

    def damaged(name: str, rescore: object) -> Path:
        target = shutil.copytree(tmp_path / "good", tmp_path / name)
        config = json.loads((target / "config.json").read_text())
        config["rescore"] = rescore
        (target / "config.json").write_text(json.dumps(config))
        return target

    cases = [
        (damaged("no-factor", {"factor": None, "precision": "int8", "quantizer": "rescore"}),
         "needs rescore_factor"),
        (damaged("small", {"factor": 0, "precision": "int8", "quantizer": "rescore"}),
         "rescore_factor must be a number"),
        (damaged("missing", {"factor": 2, "precision": "int8", "quantizer": None}),
         "int8 rescoring needs rescore/"),
        (damaged("extra", {"factor": 2, "precision": "float32", "quantizer": "rescore"}),
         "float32 rescoring takes no rescore/"),
        (damaged("not-an-object", 5), "bad 'rescore'"),
    ]  # fmt: skip
    for folder, message in cases:
        with pytest.raises(CompressorError, match=message):
            CompressedModel.load(folder)
    wrong = tmp_path / "wrong-width"
    shutil.copytree(tmp_path / "good", wrong)
    shutil.rmtree(wrong / "rescore")
    make_quantizer("int8").fit(docs[:, :8]).save(wrong / "rescore")
    with pytest.raises(CompressorError, match="int8 ranges of the encoder's 32 dims"):
        CompressedModel.load(wrong)
