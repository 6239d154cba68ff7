"""Encoder backends: ONNX Runtime float32 and int8 give torch's vectors, graphs are cached
and reused, the backend travels with a saved model, bad names fail in one line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from demitasse.encoders import TransformerEncoder
from demitasse.encoders.backends import (
    check_backend,
    float_matmuls,
    graph_directory,
    graph_path,
    instruction_sets,
)
from demitasse.encoders.base import BACKENDS
from demitasse.encoders.cache import fingerprint_directory
from demitasse.encoders.exit_heads import save_exit_heads
from demitasse.errors import CompressorError, DemitasseError
from demitasse.loading import load_encoder
from demitasse.model import CompressedModel
from tests.helpers import build_tiny_model

# A few dozen sentences of different lengths and topics, so batches pad.
SENTENCES = [
    "A man is playing a guitar.",
    "A woman is slicing an onion in the kitchen.",
    "The cat sat on the mat.",
    "Stocks fell sharply after the central bank raised interest rates again.",
    "Two dogs are running through a field of tall grass.",
    "How do I reset my password?",
    "The committee postponed its decision until next month.",
    "A child is riding a bicycle down a quiet street.",
    "Researchers found that the protein folds in two stages.",
    "It rained all day, so the match was cancelled.",
    "Is there a pharmacy open near the station tonight?",
    "The new phone has a larger screen and a faster processor.",
    "She plays the violin in the city orchestra.",
    "A plane is taking off from the runway.",
    "Heavy snow closed the mountain pass for three days.",
    "The recipe calls for two cups of flour and one egg.",
    "Men are playing football on a muddy pitch.",
    "The museum opens at nine and closes at five.",
    "Vaccines train the immune system to recognise a virus.",
    "He forgot his umbrella on the train.",
    "A group of people are dancing at a wedding.",
    "The software update fixed the battery drain.",
    "Prices of houses in the capital rose by ten percent.",
    "A monkey is climbing a tree.",
    "Can you recommend a good book about the history of Rome?",
    "The river flooded the village after the storm.",
    "A woman is reading a newspaper on a bench.",
    "Solar panels convert sunlight into electricity.",
    "The teacher explained the theorem with a simple drawing.",
    "Someone is frying eggs in a pan.",
    "The train to Paris leaves at eight.",
    "Birds migrate south when the weather turns cold.",
    "ok",
    "A very long sentence that goes on and on, listing apples, pears, plums, cherries, "
    "grapes, lemons, limes and oranges, so that every other sentence in its batch is padded.",
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """demitasse's cache in a folder of this module's own: exports happen here, once."""
    root = tmp_path_factory.mktemp("demitasse-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMITASSE_CACHE", str(root))
        yield root


@pytest.fixture(scope="module")
def minilm(onnx_cache: Path) -> TransformerEncoder:
    encoder = load_encoder("all-MiniLM-L6-v2", cache=False, device="cpu")
    assert isinstance(encoder, TransformerEncoder)
    return encoder


@pytest.fixture(scope="module")
def minilm_vectors(minilm: TransformerEncoder) -> dict[str, dict[int, np.ndarray]]:
    """Layers 3 and 6 of every sentence, from each backend (one graph per backend)."""
    out = {}
    for backend in BACKENDS:
        minilm.backend = backend
        out[backend] = minilm.encode_layers(SENTENCES, [3, 6], batch_size=8)
    minilm.backend = "torch"
    return out


@pytest.mark.parametrize("layer", [3, 6])
def test_onnx_float32_gives_torch_vectors(
    minilm_vectors: dict[str, dict[int, np.ndarray]], layer: int
) -> None:
    torch_vectors, onnx_vectors = minilm_vectors["torch"][layer], minilm_vectors["onnx"][layer]
    assert onnx_vectors.shape == (len(SENTENCES), 384) and onnx_vectors.dtype == np.float32
    assert cosines(onnx_vectors, torch_vectors).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("layer", [3, 6])
def test_onnx_int8_stays_close_to_torch(
    minilm_vectors: dict[str, dict[int, np.ndarray]], layer: int
) -> None:
    similarity = cosines(minilm_vectors["onnx-int8"][layer], minilm_vectors["torch"][layer])
    assert similarity.mean() >= 0.99
    # The worst is the one-word text ("ok": 0.967 at layer 6 when this was written): a
    # vector pooled from three tokens has little to average the rounding errors out.
    assert np.median(similarity) >= 0.99
    assert similarity.min() >= 0.95
    # Quantised, not a copy of the float32 graph's output.
    assert similarity.min() < 0.9999


def test_the_narrowing_products_stay_float32() -> None:
    """Only a product whose weight narrows its input (a feed-forward output projection) is
    kept in float32; widening, square and activation × activation products are quantised."""
    from onnx import TensorProto, helper, numpy_helper

    weights = {"up": (4, 8), "down": (8, 4), "square": (4, 4)}
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "up"], ["h"], name="widen"),
            helper.make_node("MatMul", ["h", "down"], ["y"], name="narrow"),
            helper.make_node("MatMul", ["y", "square"], ["z"], name="keep-width"),
            helper.make_node("MatMul", ["z", "zt"], ["a"], name="activations"),
        ],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("x", "zt")],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(s, np.float32), name) for name, s in weights.items()],
    )
    assert float_matmuls(graph) == ["narrow"]


def test_the_int8_graph_keeps_the_output_projections_float32(
    minilm: TransformerEncoder, minilm_vectors: dict
) -> None:
    import onnx

    int8 = onnx.load(str(graph_path(minilm, "onnx-int8", [6]))).graph
    plain = {node.name for node in int8.node if node.op_type == "MatMul"}
    assert {f"/model/encoder/layer.{k}/output/dense/MatMul" for k in range(6)} <= plain
    assert sum(node.op_type == "MatMulInteger" for node in int8.node) == 6 * 5  # q k v o, up


def test_a_single_unpadded_text_gives_its_batched_vector(minilm: TransformerEncoder) -> None:
    minilm.backend = "onnx"
    try:
        alone = minilm.encode([SENTENCES[0]], layer=6)
        batched = minilm.encode(SENTENCES[:8], layer=6, batch_size=8)
    finally:
        minilm.backend = "torch"
    assert cosines(alone, batched[:1]).min() >= 0.99999


def test_graphs_are_exported_once_then_reused(
    minilm: TransformerEncoder, minilm_vectors: dict, onnx_cache: Path
) -> None:
    paths = {b: graph_path(minilm, b, [6]) for b in ("onnx", "onnx-int8")}
    assert all(p.parent == onnx_cache / "onnx" / "all-MiniLM-L6-v2" for p in paths.values())
    mtimes = {b: p.stat().st_mtime_ns for b, p in paths.items()}
    files = sorted(p.name for p in paths["onnx"].parent.iterdir())
    # A freshly loaded encoder finds the same files and writes nothing.
    again = load_encoder("all-MiniLM-L6-v2", cache=False, backend="onnx-int8", device="cpu")
    again.encode(SENTENCES[:4])
    assert {b: graph_path(again, b, [6]) for b in paths} == paths
    assert {b: p.stat().st_mtime_ns for b, p in paths.items()} == mtimes
    assert sorted(p.name for p in paths["onnx"].parent.iterdir()) == files
    assert not [name for name in files if name.endswith(".tmp")]


def test_int8_vectors_depend_a_little_on_their_batch(
    minilm: TransformerEncoder, minilm_vectors: dict[str, dict[int, np.ndarray]]
) -> None:
    """Dynamic quantisation scales each batch's activations by that batch's range, so a
    text's int8 vector moves slightly with its batch-mates; the float32 graph's does not."""
    minilm.backend = "onnx-int8"
    try:
        alone = np.concatenate([minilm.encode([t], layer=6) for t in SENTENCES[:6]])
    finally:
        minilm.backend = "torch"
    in_batches = minilm_vectors["onnx-int8"][6][:6]
    similarity = cosines(alone, in_batches)
    assert similarity.min() >= 0.98
    assert not np.array_equal(alone, in_batches)


def test_onnx_runtime_uses_torchs_thread_setting(minilm: TransformerEncoder) -> None:
    threads = torch.get_num_threads()
    minilm.backend = "onnx-int8"
    try:
        minilm.encode(SENTENCES[:2], layer=6)
        (session,) = [s for k, s in minilm._sessions.items() if k == ("onnx-int8", (6,))]
        assert session._threads == threads
        torch.set_num_threads(1 if threads != 1 else 2)
        minilm.encode(SENTENCES[:2], layer=6)
        assert session._threads == torch.get_num_threads()
        assert session._session.get_session_options().intra_op_num_threads == session._threads
    finally:
        torch.set_num_threads(threads)
        minilm.backend = "torch"


# ---- a tiny model: exit heads, a local folder, the model directory ---------------------------


@pytest.fixture(scope="module")
def tiny_with_head(tmp_path_factory: pytest.TempPathFactory, onnx_cache: Path) -> Path:
    """A tiny BERT with an exit head at layer 2, in a writable local folder."""
    path = build_tiny_model(tmp_path_factory.mktemp("tiny-onnx"))
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((32, 32)).astype(np.float32) / 6
    save_exit_heads(path, {2: (weight, rng.standard_normal(32).astype(np.float32))})
    return path


@pytest.mark.parametrize("architecture", ["bert", "mpnet"])
def test_the_graph_carries_the_cut_and_the_exit_head(
    tmp_path: Path, onnx_cache: Path, tiny_with_head: Path, architecture: str
) -> None:
    path = tiny_with_head
    if architecture == "mpnet":  # all-mpnet-base-v2's architecture: no token type ids
        path = build_tiny_model(tmp_path / "mpnet", architecture="mpnet")
        save_exit_heads(path, {2: (np.eye(32, dtype=np.float32) * 2, np.ones(32, np.float32))})
    words = ["a man is playing a guitar .", "the cat", "dog", "a girl is riding a red car"]
    encoder = load_encoder(path, cache=False)
    assert encoder.heads and 2 in encoder.heads
    expected = encoder.encode_layers(words, [1, 2, 3])
    encoder.backend = "onnx"
    got = encoder.encode_layers(words, [1, 2, 3], batch_size=3)
    for layer in (1, 2, 3):
        np.testing.assert_allclose(got[layer], expected[layer], atol=2e-5)


def test_graphs_of_a_local_model_go_to_the_cache_not_into_its_folder(
    tiny_with_head: Path, onnx_cache: Path
) -> None:
    before = fingerprint_directory(tiny_with_head)
    files = sorted(p.relative_to(tiny_with_head) for p in tiny_with_head.rglob("*"))
    model = CompressedModel(str(tiny_with_head), compressor="pca", dim=8, backend="onnx")
    model.fit(SENTENCES, data_label="backends-test")
    encoder = model.load_encoder()
    assert isinstance(encoder, TransformerEncoder)
    folder = graph_directory(encoder)
    assert folder == onnx_cache / "onnx" / encoder.name
    assert any(folder.glob("*.onnx"))
    assert fingerprint_directory(tiny_with_head) == before
    assert sorted(p.relative_to(tiny_with_head) for p in tiny_with_head.rglob("*")) == files


def test_the_backend_travels_with_a_saved_model(tiny_with_head: Path, tmp_path: Path) -> None:
    # No embedding cache: int8 vectors depend a little on their batch (see below), and the
    # codes compared here must come from the same batches.
    model = CompressedModel(
        str(tiny_with_head), layer=2, compressor="pca", dim=8, precision="int8",
        backend="onnx-int8", cache=False,
    )  # fmt: skip
    model.fit(SENTENCES, data_label="backends-test")
    codes = model.encode(SENTENCES[:6], precision="int8")
    path = model.save(tmp_path / "model")
    config = json.loads((path / "config.json").read_text())
    assert config["backend"] == "onnx-int8"
    loaded = CompressedModel.load(path, cache=False)
    assert loaded.settings.backend == "onnx-int8" and "backend='onnx-int8'" in repr(loaded)
    np.testing.assert_array_equal(loaded.encode(SENTENCES[:6], precision="int8"), codes)
    assert loaded.load_encoder().backend == "onnx-int8"  # type: ignore[attr-defined]
    # Another backend at load time, or later: the compressor and quantiser stay.
    as_torch = CompressedModel.load(path, cache=False, backend="torch")
    assert as_torch.settings.backend == "torch"
    as_torch.settings.backend = "onnx"
    assert as_torch.load_encoder().backend == "onnx"  # type: ignore[attr-defined]
    # The backend is part of the format: a config without one is refused in one line.
    del config["backend"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CompressorError, match="bad or missing 'backend'"):
        CompressedModel.load(path, cache=False)


def test_an_encoder_object_brings_its_backend(tiny_with_head: Path) -> None:
    encoder = load_encoder(tiny_with_head, cache=False, backend="onnx")
    assert CompressedModel(encoder).settings.backend == "onnx"
    CompressedModel(encoder, backend="onnx-int8")
    assert encoder.backend == "onnx-int8"  # type: ignore[attr-defined]


# ---- bad names ---------------------------------------------------------------------------


def test_a_bad_backend_is_one_line(tiny_with_head: Path, tmp_path: Path) -> None:
    for call in (
        lambda: check_backend("tensorrt"),
        lambda: load_encoder(tiny_with_head, backend="onnx-fp16"),
        lambda: CompressedModel(str(tiny_with_head), backend="ONNX"),
        lambda: CompressedModel(None, backend="onnx"),
    ):
        with pytest.raises(DemitasseError) as error:
            call()
        assert "\n" not in str(error.value)
    with pytest.raises(DemitasseError, match="unknown backend 'tensorrt'; choose one of torch"):
        check_backend("tensorrt")
    with pytest.raises(DemitasseError, match="vectors-only"):
        CompressedModel(None, backend="onnx")
    with pytest.raises(DemitasseError, match="runs on the CPU"):
        load_encoder(tiny_with_head, backend="onnx", device="cuda")
    config = tmp_path / "model"
    model = CompressedModel(str(tiny_with_head)).fit(SENTENCES[:4], data_label="t")
    model.save(config)
    saved = json.loads((config / "config.json").read_text())
    (config / "config.json").write_text(json.dumps({**saved, "backend": "cuda"}))
    with pytest.raises(DemitasseError, match=r"invalid config\.json.*unknown backend 'cuda'"):
        CompressedModel.load(config)


def test_a_static_model_takes_no_backend(tiny_with_head: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from demitasse.static.model import StaticModel

    tokenizer = Tokenizer.from_file(str(tiny_with_head / "tokenizer.json"))
    vectors = np.ones((tokenizer.get_vocab_size(with_added_tokens=True), 8), np.float32)
    path = StaticModel(vectors, tokenizer, name="s").save(tmp_path / "static")
    with pytest.raises(DemitasseError, match="static model: the onnx backend applies"):
        load_encoder(path, backend="onnx")
    assert load_encoder(path, backend="torch").dim == 8


def test_the_instruction_sets_come_from_the_cpu() -> None:
    found = instruction_sets()
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    assert all(f" {flag}" in flags for flag in found)
    if os.uname().machine == "x86_64" and " avx2" in flags:
        assert "avx2" in found
