"""The sentence-transformers export computes what demitasse computes, for every compressor.

Each export is loaded the way its README tells a user to: plain ``SentenceTransformer(path)``
for exports made of built-in modules, ``trust_remote_code=True`` only for the others.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from demitasse.compress import (
    Compressor,
    Pooler,
    built_compressor_names,
    compressor_names,
    make_compressor,
    make_quantizer,
)
from demitasse.encoders.exit_heads import save_exit_heads
from demitasse.errors import DemitasseError
from demitasse.export import export_sentence_transformer
from demitasse.loading import load_encoder
from tests.helpers import WORDS, build_tiny_model

WIDTH = 32
MIN_COSINE = 0.99999

# Small, fast settings; a compressor missing here is fitted with its defaults.
FAST: dict[str, dict[str, Any]] = {
    "truncate": {"dim": 16},
    "pca": {"dim": 16, "whiten": True, "abtt": 2},
    "random": {"dim": 16},
    "isomap": {"dim": 12, "n_neighbors": 10},
    "lle": {"dim": 12, "n_neighbors": 10},
    "adaptor": {"dim": 16, "min_dim": 4, "hidden_dim": 16, "max_epochs": 2, "batch_size": 64},
    "smec": {
        "dim": 16, "min_dim": 4, "hidden_dim": 16, "max_epochs": 2, "batch_size": 64,
        "memory_size": 128,
    },
    "mcr2": {"dim": 8, "n_clusters": 3, "hidden_dim": 16, "max_epochs": 2, "batch_size": 64},
}  # fmt: skip
LEARNED = {"device": "cpu", "progress": False}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = np.random.default_rng(0)
    return list(
        dict.fromkeys(" ".join(rng.choice(WORDS, size=rng.integers(4, 14))) for _ in range(400))
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=3, hidden=WIDTH)


@pytest.fixture(scope="module")
def vectors(tiny: Path, texts: list[str]) -> np.ndarray:
    return load_encoder(tiny, cache=False, device="cpu").encode(texts)


def fitted(name: str, x: np.ndarray) -> Compressor:
    """A fitted compressor of the registry name ``name``."""
    if name == "pooler":  # trained with its encoder, not by fit: a random head will do
        rng = np.random.default_rng(1)
        weight = rng.standard_normal((12, x.shape[1])) / np.sqrt(x.shape[1])
        return Pooler.from_head(weight, rng.standard_normal(12) * 0.1)
    params = dict(FAST.get(name, {}))
    if "max_epochs" in params:
        params |= LEARNED
    return make_compressor(name, **params).fit(x, fit_data="tiny")


def expected(compressor: Compressor | None, x: np.ndarray, dim: int, normalize: bool) -> np.ndarray:
    """demitasse's float vectors: compress to ``dim``, then L2-normalise if asked."""
    out = x[:, :dim] if compressor is None else compressor.transform(x, dim=dim)
    return out / np.linalg.norm(out, axis=1, keepdims=True) if normalize else out


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def load_as_a_user(out: Path) -> Any:
    """Load ``out`` the way its README says: trust_remote_code only where it is needed."""
    from sentence_transformers import SentenceTransformer

    info = json.loads((out / "demitasse_export.json").read_text())
    if not info["trust_remote_code"]:
        types = [m["type"] for m in json.loads((out / "modules.json").read_text())]
        assert all(t.startswith("sentence_transformers.") for t in types)
        assert "trust_remote_code=True" not in (out / "README.md").read_text()
        return SentenceTransformer(str(out), device="cpu")
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(out), device="cpu")
    assert "trust_remote_code=True" in (out / "README.md").read_text()
    return SentenceTransformer(str(out), device="cpu", trust_remote_code=True)


@pytest.mark.parametrize("name", [*compressor_names(), *built_compressor_names()])
def test_every_compressor_exports_to_what_demitasse_computes(
    name: str, tiny: Path, texts: list[str], vectors: np.ndarray, tmp_path: Path
) -> None:
    compressor = fitted(name, vectors)
    full = compressor.output_dim_
    smaller = full // 2 + 1 if compressor.matryoshka else full
    probe = texts[:64]
    for dim, normalize in ((full, False), (smaller, True)):
        out = export_sentence_transformer(
            tiny, tmp_path / f"{dim}", compressor=compressor, dim=dim, normalize=normalize
        )
        theirs = load_as_a_user(out).encode(probe, convert_to_numpy=True)
        ours = expected(compressor, vectors[:64], dim, normalize)
        assert theirs.shape == ours.shape == (len(probe), dim)
        assert min_cosine(theirs, ours) >= MIN_COSINE
        assert (compressor.as_affine(dim) is None) == json.loads(
            (out / "demitasse_export.json").read_text()
        )["trust_remote_code"]
        # The widths a server may serve by truncating (then renormalising) are demitasse's.
        dims = json.loads((out / "config_sentence_transformers.json").read_text())
        assert dims["matryoshka_dims"] == compressor.prefix_dims(dim)
        for k in {dims["matryoshka_dims"][0], dims["matryoshka_dims"][-1]}:
            cut = theirs[:, :k]
            assert min_cosine(cut, expected(compressor, vectors[:64], k, normalize)) >= MIN_COSINE


def test_smec_serves_only_the_widths_of_its_last_stage(vectors: np.ndarray) -> None:
    smec = fitted("smec", vectors)
    assert smec.stage_dims_ == [16, 8, 4]
    assert smec.prefix_dims(6) == [5, 6]
    full = smec.transform(vectors, dim=6)
    np.testing.assert_array_equal(smec.transform(vectors, dim=5), full[:, :5])
    assert not np.allclose(smec.transform(vectors, dim=4), full[:, :4])  # another stage


def test_a_layer_cut_carries_its_exit_head_and_compressor(
    tiny: Path, texts: list[str], tmp_path: Path
) -> None:
    model = tmp_path / "headed"
    shutil.copytree(tiny, model)
    rng = np.random.default_rng(2)
    save_exit_heads(model, {2: (np.eye(WIDTH) + 0.2 * rng.standard_normal((WIDTH, WIDTH)),
                                0.1 * rng.standard_normal(WIDTH))})  # fmt: skip
    encoder = load_encoder(model, cache=False, device="cpu")
    layer2 = encoder.encode(texts, layer=2)
    assert 2 in encoder.heads
    for name in ("pca", "adaptor"):
        compressor = fitted(name, layer2)
        out = export_sentence_transformer(
            model, tmp_path / name, layer=2, compressor=compressor, dim=10, normalize=True
        )
        theirs = load_as_a_user(out).encode(texts[:64], convert_to_numpy=True)
        assert min_cosine(theirs, expected(compressor, layer2[:64], 10, True)) >= MIN_COSINE
    no_compressor = export_sentence_transformer(model, tmp_path / "plain", layer=2, dim=12)
    theirs = load_as_a_user(no_compressor).encode(texts[:64], convert_to_numpy=True)
    np.testing.assert_allclose(theirs, layer2[:64, :12], atol=1e-5)


@pytest.mark.parametrize(("activation", "normalize_input"), [("identity", False), ("tanh", True)])
def test_a_pooler_head_becomes_built_in_modules(
    activation: str, normalize_input: bool, tiny: Path, texts: list[str], vectors: np.ndarray,
    tmp_path: Path,
) -> None:  # fmt: skip
    rng = np.random.default_rng(4)
    pooler = Pooler.from_head(
        rng.standard_normal((8, WIDTH)), rng.standard_normal(8), activation, normalize_input
    )
    out = export_sentence_transformer(tiny, tmp_path / "pooler", compressor=pooler)
    theirs = load_as_a_user(out).encode(texts[:64], convert_to_numpy=True)
    assert min_cosine(theirs, pooler.transform(vectors[:64])) >= MIN_COSINE
    modules = [m["path"] for m in json.loads((out / "modules.json").read_text())]
    assert modules[-2:] == (
        ["3_Normalize", "4_Dense"] if normalize_input else ["2_Normalize", "3_Dense"]
    )
    dense = json.loads((out / modules[-1] / "config.json").read_text())
    assert dense["activation_function"] == {
        "identity": "torch.nn.modules.linear.Identity", "tanh": "torch.nn.modules.activation.Tanh"
    }[activation]  # fmt: skip


@pytest.mark.parametrize(
    ("precision", "params"),
    [("int8", {}), ("int8", {"calibration": "percentile", "percentile": 99.0}),
     ("binary", {}), ("binary", {"threshold": "mean"}), ("float32", {})],
)  # fmt: skip
def test_sentence_transformers_reproduces_the_quantized_codes_from_the_export(
    precision: str, params: dict[str, Any], tiny: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    from safetensors.numpy import load_file
    from sentence_transformers.util import quantize_embeddings

    pca = fitted("pca", vectors)
    quantizer = make_quantizer(precision, **params).fit(pca.transform(vectors))
    out = export_sentence_transformer(
        tiny, tmp_path / "q", compressor=pca, dim=12, quantizer=quantizer
    )
    info = json.loads((out / "demitasse_export.json").read_text())["quantization"]
    assert info["precision"] == precision
    rng = np.random.default_rng(3)
    compressed = pca.transform(vectors, dim=12)
    # Beyond the calibration range too: codes must clip the same way.
    floats = np.concatenate([compressed, 3 * rng.standard_normal((200, 12)).astype(np.float32)])
    ours = quantizer.quantize(floats)
    if precision == "int8":
        ranges = load_file(str(out / info["file"]))["ranges"]
        assert ranges.shape == (2, 12) and ranges.dtype == np.float32
        np.testing.assert_array_equal(quantize_embeddings(floats, "int8", ranges=ranges), ours)
        # The same holds for what the export itself serves.
        served = load_as_a_user(out).encode(["a man is playing guitar", "the dog"])
        theirs = quantize_embeddings(served, "int8", ranges=ranges).astype(int)
        assert np.abs(theirs - quantizer.quantize(served)).max() == 0
    elif precision == "binary" and params:
        thresholds = load_file(str(out / info["file"]))["thresholds"]
        np.testing.assert_array_equal(quantize_embeddings(floats - thresholds, "ubinary"), ours)
    elif precision == "binary":
        np.testing.assert_array_equal(quantize_embeddings(floats, "ubinary"), ours)
    else:
        np.testing.assert_array_equal(quantize_embeddings(floats, "float32"), ours)
    assert f"## Quantisation ({precision})" in (out / "README.md").read_text()


@pytest.mark.parametrize("rotation", ["random", "itq"])
def test_sentence_transformers_reproduces_rotated_binary_codes_from_the_export(
    rotation: str, tiny: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    from safetensors.numpy import load_file
    from sentence_transformers.util import quantize_embeddings

    pca = fitted("pca", vectors)
    quantizer = make_quantizer("binary", rotation=rotation, seed=1)
    quantizer.fit(pca.transform(vectors, dim=12))
    out = export_sentence_transformer(
        tiny, tmp_path / "q", compressor=pca, dim=12, quantizer=quantizer
    )
    info = json.loads((out / "demitasse_export.json").read_text())["quantization"]
    saved = load_file(str(out / info["file"]))
    served = load_as_a_user(out).encode(["a man is playing guitar", "the dog", "a cat"])
    theirs = quantize_embeddings((served - saved["mean"]) @ saved["rotation"], "ubinary")
    np.testing.assert_array_equal(theirs, quantizer.quantize(served))
    assert f"a {rotation} rotation" in (out / "README.md").read_text()
    with pytest.raises(DemitasseError, match="rotation spans all 12 dims") as exc:
        export_sentence_transformer(
            tiny, tmp_path / "narrow", compressor=pca, dim=8, quantizer=quantizer
        )
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "narrow").exists()


def test_exports_that_cannot_be_carried_fail_in_one_line_and_write_nothing(
    tiny: Path, vectors: np.ndarray, tmp_path: Path
) -> None:
    pca = fitted("pca", vectors)
    wide = make_compressor("truncate").fit(np.hstack([vectors, vectors]))
    bad: list[dict[str, Any]] = [
        {"compressor": wide},  # fitted on 64-d vectors, the model's are 32-d
        {"compressor": pca, "dim": 17},  # wider than the compressor's output
        {"compressor": fitted("mcr2", vectors), "dim": 4},  # one width only
        {"compressor": make_compressor("pca", dim=4)},  # not fitted
        {"compressor": pca, "quantizer": make_quantizer("int8").fit(vectors[:, :8])},
        {"dim": 33},
        {"layer": 4},
    ]
    for index, kwargs in enumerate(bad):
        target = tmp_path / f"bad{index}"
        with pytest.raises(DemitasseError) as exc:
            export_sentence_transformer(tiny, target, **kwargs)
        assert "\n" not in str(exc.value), str(exc.value)
        assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_the_command_line_exports_a_model_directory(
    tiny: Path, texts: list[str], tmp_path: Path
) -> None:
    from demitasse import CompressedModel
    from demitasse.cli.main import main

    smec = make_compressor("smec", **FAST["smec"], **LEARNED)
    model = CompressedModel(tiny, compressor=smec, precision="int8", normalize=True)
    model.fit(texts).save(tmp_path / "m")
    assert main(["export", str(tmp_path / "m"), "--dim", "8", "--out", str(tmp_path / "x")]) == 0
    info = json.loads((tmp_path / "x" / "demitasse_export.json").read_text())
    assert info["compressor"]["method"] == "smec" and info["matryoshka_dims"] == [5, 6, 7, 8]
    assert (tmp_path / "x" / "int8_ranges.safetensors").is_file()
