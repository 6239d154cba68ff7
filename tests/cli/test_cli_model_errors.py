"""Bad input to the model commands: one line on stderr, exit code 2, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from tests.helpers import WORDS, build_tiny_model


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    tiny = build_tiny_model(root / "tiny")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=6)) for _ in range(120)]
    (root / "texts.txt").write_text("\n".join(texts) + "\n")
    np.save(root / "vectors.npy", rng.standard_normal((50, 32)).astype(np.float32))
    np.save(root / "narrow.npy", rng.standard_normal((50, 7)).astype(np.float32))
    fit = ["fit", "--model", str(tiny), "--texts", str(root / "texts.txt")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMITASSE_CACHE", str(root / "cache"))
        assert main([*fit, "--compressor", "pca", "--dim", "8", "--out", str(root / "pca")]) == 0
        assert main(["fit", "--vectors", str(root / "vectors.npy"), "--compressor", "pca",
                     "--out", str(root / "api")]) == 0  # fmt: skip
    return {"root": root, "tiny": tiny, "pca": root / "pca", "api": root / "api"}


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip()
    assert err.startswith("demitasse: error:") and "\n" not in err, err
    assert needle in err, err


def test_requests_outside_the_fit(
    workspace: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root, pca = workspace["root"], str(workspace["pca"])
    texts, out = str(root / "texts.txt"), tmp_path / "out.npy"
    encode = ["encode", pca, "--input", texts, "--out", str(out)]
    _fails(capsys, [*encode, "--dim", "9"], "dim 9 is not available")
    _fails(capsys, [*encode, "--precision", "int8"], "precision 'int8' is not available")
    _fails(capsys, [*encode, "--dim", "0"], "must be an integer >= 1")
    transform = ["transform", pca, "--out", str(out), "--input"]
    _fails(capsys, [*transform, str(root / "narrow.npy")], "7 dimensions but this model takes 32")
    _fails(capsys, ["encode", str(workspace["api"]), "--input", texts, "--out", str(out)],
           "vectors-only")  # fmt: skip
    assert not out.exists() and not list(tmp_path.iterdir())


def test_damaged_model_directories(
    workspace: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    texts, out = str(workspace["root"] / "texts.txt"), tmp_path / "out.npy"
    for damage, needle in [
        (lambda d: shutil.rmtree(d / "compressor"), "no saved compressor"),
        (lambda d: (d / "compressor" / "state.safetensors").write_bytes(b"\x00" * 9), "corrupt"),
        (lambda d: (d / "config.json").write_text('{"kind": "demitasse-model"}'), "invalid"),
        (lambda d: (d / "config.json").write_text("[1, 2"), "invalid config.json"),
    ]:
        broken = tmp_path / f"broken-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(workspace["pca"], broken)
        damage(broken)
        _fails(capsys, ["encode", str(broken), "--input", texts, "--out", str(out)], needle)
    _fails(capsys, ["encode", str(tmp_path / "nothing"), "--input", texts, "--out",
                    str(out)], "no saved model")  # fmt: skip
    assert not out.exists()


def test_exports_that_cannot_carry_the_model(
    workspace: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pca, api = str(workspace["pca"]), str(workspace["api"])
    out = tmp_path / "export"
    _fails(capsys, ["export", pca, "--format", "model2vec", "--out", str(out)], "model2vec")
    _fails(capsys, ["export", api, "--out", str(out)], "vectors-only")
    _fails(capsys, ["export", pca, "--dim", "9", "--out", str(out)], "not available")
    _fails(capsys, ["export", pca, "--layer", "2", "--out", str(out)], "--layer")
    assert not out.exists()


def test_outputs_never_replace_foreign_folders(
    workspace: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("precious")
    (tmp_path / "notes.txt").write_text("mine")
    pca = str(workspace["pca"])
    _fails(capsys, ["export", pca, "--out", str(victim)], "refusing to replace")
    _fails(capsys, ["export", pca, "--out", str(tmp_path / "notes.txt")], "refusing")
    _fails(capsys, ["fit", "--vectors", str(workspace["root"] / "vectors.npy"), "--compressor",
                    "pca", "--out", str(victim)], "refusing to replace")  # fmt: skip
    _fails(capsys, ["encode", pca, "--input", str(workspace["root"] / "texts.txt"),
                    "--out", str(victim)], "unsupported output type")  # fmt: skip
    victim_npy = victim / "data.npy"
    victim_npy.mkdir()
    _fails(capsys, ["encode", pca, "--input", str(workspace["root"] / "texts.txt"),
                    "--out", str(victim_npy)], "directory")  # fmt: skip
    victim_npy.rmdir()
    assert (victim / "thesis.tex").read_text() == "precious"
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "victim"]


def test_an_encoder_is_a_model_to_every_command_that_uses_one(
    workspace: dict[str, Path], tmp_path: Path
) -> None:
    """``encode``, ``transform`` and ``embed`` take an encoder by name or directory as it is
    published: no compressor, float32 at its full width, as ``serve`` and ``export`` do."""
    from demitasse.loading import load_encoder

    root, tiny = workspace["root"], workspace["tiny"]
    out = tmp_path / "plain.npy"
    assert main(["encode", str(tiny), "--input", str(root / "texts.txt"), "--out", str(out)]) == 0
    texts = (root / "texts.txt").read_text().splitlines()
    expected = load_encoder(tiny, cache=False).encode(texts)
    np.testing.assert_allclose(np.load(out), expected, atol=1e-5)
    assert (
        main(["transform", str(tiny), "--input", str(out), "--out", str(tmp_path / "t.npy")]) == 0
    )
    np.testing.assert_allclose(np.load(tmp_path / "t.npy"), np.load(out), atol=1e-6)
    shards = tmp_path / "shards"
    assert main(["embed", str(tiny), "--input", str(root / "texts.txt"), "--out", str(shards)]) == 0
    assert list(shards.rglob("*.parquet"))
