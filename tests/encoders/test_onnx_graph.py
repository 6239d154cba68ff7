"""A model directory carrying its transformer encoder as an ONNX graph (``save(onnx=True)``):
the folder's layout and records, tokenization and vectors equal to the torch encoder's, the
rule that picks the graph or the source at load, the checks of its files, and a run in a
process where torch and transformers cannot be imported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from demitasse.encoders import TransformerEncoder
from demitasse.encoders.exit_heads import save_exit_heads
from demitasse.encoders.onnx_graph import (
    GRAPH_FILES,
    OnnxGraphEncoder,
    file_sha256,
    is_graph_dir,
    read_graph_spec,
    set_threads,
)
from demitasse.errors import DemitasseError
from demitasse.loading import load_encoder
from demitasse.model import CompressedModel, encoder_vectors
from tests.helpers import WORDS, build_tiny_model

#: Texts of varied length: some longer than the tiny model's 32 tokens (truncated), some in
#: capitals and with surrounding spaces, one empty.
TEXTS = [
    "a man is playing guitar",
    "  The Dog is running in park  ",
    "a cat sits on mat",
    "girl",
    "",
    "a child is eating food and a boy is running in the park with a red car and a blue car "
    "and the woman plays piano while the man sits on the mat , eating food",
    "a red car in park .",
    "THE CAT",
]


def fit_texts(n: int = 300, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 14)))) for _ in range(n)]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMITASSE_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT with an exit head at layer 2."""
    path = build_tiny_model(tmp_path_factory.mktemp("tiny-graph"))
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((32, 32)).astype(np.float32) / 6
    save_exit_heads(path, {2: (weight, rng.standard_normal(32).astype(np.float32))})
    return path


@pytest.fixture(scope="module")
def saved(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[CompressedModel, Path]:
    """A model cut at layer 2 (its exit head), PCA to 8 dims and int8 codes, fitted with
    torch and saved with its graph."""
    model = CompressedModel(str(tiny), layer=2, compressor="pca", dim=8, precision="int8",
                            cache=False)  # fmt: skip
    model.fit(fit_texts(), data_label="graph-test")
    return model, model.save(tmp_path_factory.mktemp("saved") / "model", onnx=True)


# ---- layout --------------------------------------------------------------------------------


def test_the_directory_carries_the_graph_the_tokenizer_and_their_record(
    saved: tuple[CompressedModel, Path],
) -> None:
    model, path = saved
    config = json.loads((path / "config.json").read_text())
    assert config["graph"] == "encoder" and is_graph_dir(path / "encoder")
    assert sorted(p.name for p in (path / "encoder").iterdir()) == [
        "config.json", "model.onnx", "tokenizer.json",
    ]  # fmt: skip
    record = json.loads((path / "encoder" / "config.json").read_text())
    assert record["kind"] == "onnx-encoder" and record["format_version"] == 1
    assert {key: record[key] for key in ("name", "source", "fingerprint", "dim", "num_layers")} \
        == {key: config["encoder"][key] for key in ("name", "source", "fingerprint", "dim",
                                                     "num_layers")}  # fmt: skip
    assert record["layer"] == 2 and record["exit_head"] is True and record["output"] == "layer2"
    assert record["pooling"] == "mean" and record["normalize"] is True
    assert record["max_seq_length"] == 32 and "token_type_ids" in record["inputs"]
    assert record["graphs"] == {
        "onnx": {"file": "model.onnx", "sha256": file_sha256(path / "encoder" / "model.onnx")}
    }
    assert record["tokenizer"]["sha256"] == file_sha256(path / "encoder" / "tokenizer.json")
    # Without onnx=True there is no graph, and config.json says so.
    plain = model.save(path.parent / "plain")
    assert json.loads((plain / "config.json").read_text())["graph"] is None
    assert not (plain / "encoder").exists()


# ---- equality ------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ["bert", "mpnet"])
def test_the_graph_encoder_tokenizes_as_the_transformer_encoder(
    tmp_path: Path, tiny: Path, architecture: str
) -> None:
    path = tiny if architecture == "bert" else build_tiny_model(tmp_path, architecture="mpnet")
    model = CompressedModel(str(path), cache=False).fit(fit_texts(40), data_label="t")
    loaded = CompressedModel.load(model.save(tmp_path / "m", onnx=True), backend="onnx")
    graph, torch_encoder = loaded.load_encoder(), model.load_encoder()
    assert isinstance(graph, OnnxGraphEncoder) and isinstance(torch_encoder, TransformerEncoder)
    expected = {k: v.numpy() for k, v in torch_encoder.tokenize(TEXTS).items()}
    got = graph.tokenize(TEXTS)
    assert expected["input_ids"].shape == (len(TEXTS), 32)  # truncated to max_seq_length
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    inputs = read_graph_spec(tmp_path / "m" / "encoder")
    assert inputs.layer == 3
    np.testing.assert_allclose(
        encoder_vectors(loaded, TEXTS), encoder_vectors(model, TEXTS), atol=2e-6
    )


def test_float32_vectors_and_codes_equal_the_torch_models(
    saved: tuple[CompressedModel, Path],
) -> None:
    model, path = saved
    texts = [*TEXTS, *fit_texts(200, seed=1)]
    loaded = CompressedModel.load(path, cache=False, backend="onnx")
    assert isinstance(loaded.load_encoder(), OnnxGraphEncoder)
    expected, got = encoder_vectors(model, texts), encoder_vectors(loaded, texts)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert cosines(got, expected).min() >= 0.9999
    assert np.abs(got - expected).max() < 1e-5
    # int8 codes: equal but where a value lies within float error of a bucket's edge.
    codes, loaded_codes = (
        model.encode(texts, precision="int8"),
        loaded.encode(texts, precision="int8"),
    )
    assert np.abs(codes.astype(int) - loaded_codes.astype(int)).max() <= 1
    assert np.mean(codes == loaded_codes) >= 0.995
    # The same vectors: provenance differs only in the backend it records, which stores
    # compare by the weights' kind (float32 for both), so no store refuses or warns.
    from demitasse.provenance import provenance_differences

    ours, theirs = model.provenance(), loaded.provenance()
    assert (ours["encoder"]["backend"], theirs["encoder"]["backend"]) == ("torch", "onnx")
    assert not provenance_differences(ours, theirs)


def test_the_int8_graph_is_the_onnx_int8_backends(tiny: Path, tmp_path: Path) -> None:
    model = CompressedModel(str(tiny), layer=2, compressor="pca", dim=8, backend="onnx-int8",
                            cache=False).fit(fit_texts(), data_label="t")  # fmt: skip
    path = model.save(tmp_path / "m", onnx=True)
    assert sorted(read_graph_spec(path / "encoder").graphs) == ["onnx", "onnx-int8"]
    loaded = CompressedModel.load(path, cache=False)
    assert (
        isinstance(loaded.load_encoder(), OnnxGraphEncoder)
        and loaded.settings.backend == "onnx-int8"
    )
    texts = [*TEXTS, *fit_texts(100, seed=2)]
    got = encoder_vectors(loaded, texts)
    # The same int8 graph as the torch encoder's onnx-int8 backend, fed the same batches.
    np.testing.assert_allclose(got, encoder_vectors(model, texts), atol=1e-6)
    model.settings.backend = "torch"
    similarity = cosines(got, encoder_vectors(model, texts))
    assert similarity.mean() >= 0.99 and similarity.min() >= 0.95
    loaded.settings.backend = "onnx"  # the folder has the float32 graph too
    assert isinstance(loaded.load_encoder(), OnnxGraphEncoder)
    assert cosines(encoder_vectors(loaded, texts), encoder_vectors(model, texts)).min() >= 0.9999


# ---- the load rule ---------------------------------------------------------------------------


def test_torch_runs_the_source_onnx_the_graph_even_without_the_source(
    saved: tuple[CompressedModel, Path], tmp_path: Path
) -> None:
    _, path = saved
    as_saved = CompressedModel.load(path, cache=False)  # torch saved, torch installed
    assert as_saved.settings.backend == "torch"
    assert isinstance(as_saved.load_encoder(), TransformerEncoder)
    # Moved to a machine without the source: the graph is the encoder.
    copy = shutil.copytree(path, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    config["encoder"]["source"] = str(tmp_path / "nowhere")
    (copy / "config.json").write_text(json.dumps(config))
    moved = CompressedModel.load(copy, cache=False, backend="onnx")
    moved_vectors, saved_vectors = encoder_vectors(moved, TEXTS), encoder_vectors(as_saved, TEXTS)
    assert cosines(moved_vectors, saved_vectors).min() >= 0.9999
    # A backend the folder lacks loads the source, which is gone: said in one line.
    moved.settings.backend = "torch"
    with pytest.raises(DemitasseError) as error:
        encoder_vectors(moved, TEXTS)
    assert "\n" not in str(error.value)


def test_changing_the_backend_of_a_loaded_graph_loads_by_the_rule(
    saved: tuple[CompressedModel, Path],
) -> None:
    _, path = saved
    loaded = CompressedModel.load(path, cache=False, backend="onnx")
    assert isinstance(loaded.load_encoder(), OnnxGraphEncoder)
    loaded.settings.backend = "torch"
    assert isinstance(loaded.load_encoder(), TransformerEncoder)
    loaded.settings.backend = "onnx-int8"  # not in the folder: the source's own int8 graph
    assert isinstance(loaded.load_encoder(), TransformerEncoder)
    assert loaded.load_encoder().backend == "onnx-int8"  # type: ignore[attr-defined]


def test_the_graph_carries_one_layer(saved: tuple[CompressedModel, Path]) -> None:
    _, path = saved
    encoder = OnnxGraphEncoder(path / "encoder", cache=False)
    assert (encoder.name, encoder.dim, encoder.num_layers, encoder.layer) == ("model", 32, 3, 2)
    assert encoder.encode(TEXTS[:2]).shape == (2, 32)
    assert set(encoder.encode_layers(TEXTS[:2])) == {2}
    with pytest.raises(DemitasseError, match="carries layer 2 of model only, not 3"):
        encoder.encode(TEXTS[:2], layer=3)
    with pytest.raises(DemitasseError, match="runs onnx, not onnx-int8"):
        encoder.backend = "onnx-int8"


def test_what_serving_asks_of_it(saved: tuple[CompressedModel, Path]) -> None:
    model, path = saved
    encoder = OnnxGraphEncoder(path / "encoder", cache=False)
    torch_encoder: Any = model.load_encoder()
    expected = torch_encoder.tokenize(TEXTS)["attention_mask"].sum(1).tolist()
    assert encoder.count_tokens(TEXTS) == expected and max(expected) == 32
    assert encoder.packing_matches() is False
    set_threads(1)
    try:
        encoder.encode(TEXTS[:2])
        session = encoder._sessions["onnx"]
        assert session._session.get_session_options().intra_op_num_threads == 1
    finally:
        set_threads(None)
    with pytest.raises(DemitasseError, match="positive integer"):
        set_threads(0)


def test_its_embedding_cache_returns_what_it_computed(
    saved: tuple[CompressedModel, Path], tmp_path: Path
) -> None:
    _, path = saved
    first = OnnxGraphEncoder(path / "encoder", cache_dir=tmp_path / "c").encode(TEXTS)
    again = OnnxGraphEncoder(path / "encoder", cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(again.encode(TEXTS[::-1]), first[::-1])
    assert any((tmp_path / "c").rglob("shard-*.safetensors"))


# ---- checks of the files ---------------------------------------------------------------------


def test_a_changed_graph_or_tokenizer_is_refused(
    saved: tuple[CompressedModel, Path], tmp_path: Path
) -> None:
    _, path = saved
    for name in (GRAPH_FILES["onnx"], "tokenizer.json"):
        copy = shutil.copytree(path, tmp_path / name)
        with (copy / "encoder" / name).open("ab") as handle:
            handle.write(b" ")
        # The model directory refuses the folder (its content hash), the graph encoder the file.
        with pytest.raises(DemitasseError, match="encoder/ does not belong to this model") as error:
            encoder_vectors(CompressedModel.load(copy, cache=False, backend="onnx"), TEXTS)
        assert "\n" not in str(error.value)
        with pytest.raises(DemitasseError, match=f"{name} differs from the file") as error:
            OnnxGraphEncoder(copy / "encoder", backend="onnx", cache=False)
        assert "\n" not in str(error.value)


def test_a_graph_of_another_encoder_is_refused(
    saved: tuple[CompressedModel, Path], tmp_path: Path
) -> None:
    _, path = saved
    copy = shutil.copytree(path, tmp_path / "other")
    config = json.loads((copy / "config.json").read_text())
    config["encoder"]["fingerprint"] = "0" * 20
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(DemitasseError, match="differs from the one this model was fitted"):
        encoder_vectors(CompressedModel.load(copy, cache=False, backend="onnx"), TEXTS)
    config["graph"] = "elsewhere"
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(DemitasseError, match="names the graph folder 'elsewhere'"):
        CompressedModel.load(copy)


def test_saving_a_loaded_graph_again_copies_it(
    saved: tuple[CompressedModel, Path], tmp_path: Path
) -> None:
    _, path = saved
    loaded = CompressedModel.load(path, cache=False, backend="onnx")
    again = loaded.save(tmp_path / "again", onnx=True)
    for name in ("config.json", "model.onnx", "tokenizer.json"):
        assert file_sha256(again / "encoder" / name) == file_sha256(path / "encoder" / name)


def test_only_a_transformer_encoder_has_a_graph(tiny: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from demitasse.static.model import StaticModel

    tokenizer = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    vectors = (
        np.random.default_rng(0)
        .standard_normal((tokenizer.get_vocab_size(with_added_tokens=True), 8))
        .astype(np.float32)
    )
    static = StaticModel(vectors, tokenizer, name="s").save(tmp_path / "static")
    model = CompressedModel(str(static)).fit(fit_texts(20), data_label="t")
    with pytest.raises(DemitasseError, match="carries a transformer encoder; s is not one"):
        model.save(tmp_path / "m", onnx=True)
    assert isinstance(load_encoder(static), StaticModel)


# ---- without torch -----------------------------------------------------------------------

BLOCKED = textwrap.dedent(
    """
    import importlib.abc, sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "transformers", "sentence_transformers"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    sys.modules["transformers"] = None  # an import of it fails, however it is reached
    """
)


def test_a_process_without_torch_loads_the_directory_and_encodes(
    saved: tuple[CompressedModel, Path], tmp_path: Path
) -> None:
    model, path = saved
    np.save(tmp_path / "expected.npy", model.encode(TEXTS, precision="float32"))
    (tmp_path / "texts.json").write_text(json.dumps(TEXTS))
    script = BLOCKED + textwrap.dedent(
        f"""
        import json
        import numpy as np
        from demitasse.model import CompressedModel

        texts = json.load(open({str(tmp_path / "texts.json")!r}))
        model = CompressedModel.load({str(path)!r}, cache=False)
        assert model.settings.backend == "onnx"  # saved torch: torch is missing
        got = model.encode(texts, precision="float32")
        expected = np.load({str(tmp_path / "expected.npy")!r})
        norms = np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1)
        cos = (got * expected).sum(1) / norms
        assert cos.min() >= 0.9999, cos
        try:
            CompressedModel.load({str(path)!r}, backend="torch").encode(texts)
        except Exception as exc:
            assert "needs the source encoder, with torch" in str(exc), exc
        else:
            raise AssertionError("torch ran without torch")
        loaded = [m for m in sys.modules if m.split(".")[0] in ("torch", "transformers",
                                                                "sentence_transformers")]
        assert not [m for m in loaded if sys.modules[m] is not None], loaded
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
