"""Depth without forgetting: the frozen encoder stays the original, exit heads fitted on cached
features (distillation, supervision)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from demitasse.errors import DataError, DemitasseError
from demitasse.loading import load_encoder
from demitasse.training import SentenceModel, TrainingConfig, TrainingSet, fine_tune
from demitasse.training.frozen import fit_frozen_exit_heads
from demitasse.training.heads import (
    ExitHeadDistiller,
    FeatureStore,
    LayerFeatures,
    PairFeatures,
    compute_layer_features,
    distil_loss,
    ridge_map,
    structure_loss,
)
from demitasse.training.recipes import make_objective
from tests.helpers import SENTENCES, WORDS, build_tiny_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-depth"), layers=3, hidden=32)


def _random_texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return list(dict.fromkeys(" ".join(rng.choice(WORDS, size=6)) for _ in range(n)))


def _assert_encoder_is_the_original(model_dir: Path, original: Path) -> None:
    """Every encoder weight bit-identical, and the last layer's output equal."""
    saved = SentenceModel.load(model_dir, device="cpu").backbone.state_dict()
    reference = SentenceModel.load(original, device="cpu").backbone.state_dict()
    assert saved.keys() == reference.keys()
    for name, tensor in reference.items():
        assert torch.equal(saved[name], tensor), name
    ours = load_encoder(model_dir, cache=False, device="cpu").encode(SENTENCES)
    theirs = load_encoder(original, cache=False, device="cpu").encode(SENTENCES)
    np.testing.assert_array_equal(ours, theirs)


def test_frozen_encoder_fine_tuning_leaves_every_encoder_weight_bit_identical(
    tiny_model: Path, tmp_path: Path
) -> None:
    model = SentenceModel.load(tiny_model, device="cpu")
    objective = make_objective("ese", model.num_layers, model.dim, exit_heads=True)
    triples = TrainingSet("triples", SENTENCES, SENTENCES[1:] + SENTENCES[:1], SENTENCES[::-1])
    config = TrainingConfig(batch_size=4, max_steps=3, train_backbone=False, patience=None,
                            objective_learning_rate=1e-2)  # fmt: skip
    result = fine_tune(model, objective, [triples], tmp_path / "run", config, progress=False)
    _assert_encoder_is_the_original(result.model_dir, tiny_model)
    # The heads did train: an inner layer's output is no longer the original's.
    inner = load_encoder(result.model_dir, cache=False, device="cpu").encode(SENTENCES, layer=1)
    plain = load_encoder(tiny_model, cache=False, device="cpu").encode(SENTENCES, layer=1)
    assert not np.allclose(inner, plain, atol=1e-4)


def test_distilled_heads_keep_the_encoder_and_the_saved_model_applies_them(
    tiny_model: Path, tmp_path: Path
) -> None:
    model = SentenceModel.load(tiny_model, device="cpu")
    unlabeled = _random_texts(300)
    pairs = TrainingSet("triples", SENTENCES, SENTENCES[1:] + SENTENCES[:1], SENTENCES[::-1])
    distiller = ExitHeadDistiller(epochs=2, batch_size=32, progress=False)
    result = fit_frozen_exit_heads(
        model, tmp_path / "run", distiller, unlabeled, [pairs], progress=False
    )
    _assert_encoder_is_the_original(result.model_dir, tiny_model)
    summary = json.loads((tmp_path / "run" / "training.json").read_text())
    assert summary["unlabeled_texts"] == len(unlabeled) and summary["sets"] == [["triples", 8]]
    raw = compute_layer_features(SentenceModel.load(tiny_model, device="cpu"), SENTENCES,
                                 progress=False)  # fmt: skip
    encoded = load_encoder(result.model_dir, cache=False, device="cpu").encode_layers(SENTENCES)
    for layer in (1, 2):
        expected = distiller.transform(raw.layers[layer], layer)
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        np.testing.assert_allclose(encoded[layer], expected, atol=1e-5)


def test_feature_store_reads_back_what_any_earlier_pass_computed(
    tiny_model: Path, tmp_path: Path
) -> None:
    model = SentenceModel.load(tiny_model, device="cpu")
    first = compute_layer_features(model, SENTENCES[:5], tmp_path, progress=False)
    files = sorted(tmp_path.glob("*.safetensors"))
    assert len(files) == 1 and sorted(first.layers) == [1, 2, 3]
    (tmp_path / "00009-interrupted.tmp").write_bytes(b"half a chunk")  # ignored
    both = compute_layer_features(model, SENTENCES[3:] + SENTENCES[:3], tmp_path, progress=False)
    assert len(sorted(tmp_path.glob("*.safetensors"))) == 2  # only SENTENCES[5:] was encoded
    for layer in first.layers:
        np.testing.assert_array_equal(both.subset(SENTENCES[:5]).layers[layer], first.layers[layer])
    uncached = compute_layer_features(model, SENTENCES, progress=False)
    np.testing.assert_allclose(both.subset(SENTENCES).layers[3], uncached.layers[3], atol=1e-5)
    assert len(FeatureStore(tmp_path).where) == len(SENTENCES)
    with pytest.raises(DataError, match="no texts"):
        compute_layer_features(model, [], tmp_path)


def test_distillation_losses_vanish_on_the_target_only() -> None:
    generator = torch.Generator().manual_seed(0)
    target = torch.randn(16, 8, generator=generator)
    assert float(distil_loss(3 * target, target, 1.0, 0.05)) < 1e-5  # scale does not matter
    assert float(structure_loss(target, target, 0.05)) < 1e-6
    other = torch.randn(16, 8, generator=generator)
    assert float(structure_loss(other, target, 0.05)) > 0.1
    assert float(distil_loss(other, target, 0.0, 0.05)) > 0.5


def _synthetic_layers(n: int = 600, d: int = 12, seed: int = 0) -> LayerFeatures:
    """Layer 3 is the 'last layer'; layers 1 and 2 are it under a random invertible map plus
    an offset, so a linear head can recover it."""
    rng = np.random.default_rng(seed)
    last = rng.normal(size=(n, d)).astype(np.float32)
    layers = {3: last}
    for layer in (1, 2):
        mixing = rng.normal(size=(d, d)) + 2 * np.eye(d)
        layers[layer] = (last @ mixing + 3.0).astype(np.float32)
    return LayerFeatures([f"t{i}" for i in range(n)], layers)


def _mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).mean())


def test_ridge_map_and_the_distiller_recover_the_last_layer() -> None:
    features = _synthetic_layers()
    last = features.layers[3]
    weight, bias = ridge_map(features.layers[1], last, 1e-6)
    assert _mean_cosine(features.layers[1] @ weight.T + bias, last) > 0.99
    # From the ridge map a small rate only refines; from the identity it has far to go.
    for init, rate, epochs, gain in (("ridge", 3e-4, 3, 0.5), ("identity", 1e-2, 30, 0.15)):
        distiller = ExitHeadDistiller(
            init=init, epochs=epochs, learning_rate=rate, batch_size=64, progress=False
        ).fit(features)
        assert sorted(distiller.heads_) == [1, 2] and distiller.get_params()["init"] == init
        for layer in (1, 2):
            before = _mean_cosine(features.layers[layer], last)
            after = _mean_cosine(distiller.transform(features.layers[layer], layer), last)
            assert before < 0.5 and after > before + gain, (init, layer, before, after)
        np.testing.assert_array_equal(distiller.transform(last, 3), last)  # no head: unchanged


def test_supervised_heads_alone_learn_from_pairs_and_bad_settings_fail_clearly() -> None:
    features = _synthetic_layers(n=64)
    rows = np.arange(32)
    pairs = PairFeatures("pairs", features, rows, rows + 32, scores=np.linspace(0, 1, 32))
    distiller = ExitHeadDistiller(layers=[2], distil_weight=0.0, epochs=2, batch_size=8,
                                  progress=False).fit(None, [pairs])  # fmt: skip
    assert sorted(distiller.heads_) == [2] and len(distiller.history_) == 2
    assert not np.allclose(distiller.heads_[2][0], np.eye(12))
    with pytest.raises(DataError, match="nothing to fit"):
        ExitHeadDistiller(supervised_weight=0.0).fit(None, [pairs])
    with pytest.raises(DemitasseError, match="layers must lie"):
        ExitHeadDistiller(layers=[3]).fit(features)
    with pytest.raises(DemitasseError, match="init"):
        ExitHeadDistiller(init="pca").fit(features)


def test_cli_distil_trains_heads_on_the_frozen_encoder(
    tiny_model: Path, tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from demitasse.cli.main import main

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(_random_texts(80)), encoding="utf-8")
    argv = ["train", "--model", str(tiny_model), "--data-dir", str(data_dir), "--exit-heads"]
    argv += ["--frozen-encoder", "--distil", "60", "--texts", str(texts), "--head-epochs", "1"]
    assert main([*argv, "--supervised-weight", "0", "--out", str(tmp_path / "run")]) == 0
    assert str(tmp_path / "run" / "best") in capsys.readouterr().out
    _assert_encoder_is_the_original(tmp_path / "run" / "best", tiny_model)
    summary = json.loads((tmp_path / "run" / "training.json").read_text())
    assert summary["unlabeled_texts"] == 60 and summary["sets"] == []
    assert set(summary["dev"]) == {"1", "2"}
    assert main([*argv, "--max-examples", "3", "--out", str(tmp_path / "supervised")]) == 0
    summary = json.loads((tmp_path / "supervised" / "training.json").read_text())
    assert summary["sets"] == [["STS-B/train", 3], ["snli", 3]]
    assert main([a for a in argv if a != "--frozen-encoder"] + ["--out", str(tmp_path / "x")]) == 2
    assert "--exit-heads --frozen-encoder" in capsys.readouterr().err
