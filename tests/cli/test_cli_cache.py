"""One embedding cache for every command (issue #50 item 4): after one command embedded a
corpus, ``encode``, ``index``, ``embed`` and ``tune`` embed none of it again (counted by the
cache's statistics); ``index --vectors`` takes vectors computed already; ``demitasse cache``
shows the cache and ``--clear`` empties it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli import main
from demitasse.encoders.cache import STATS, shared_root
from tests.helpers import random_documents, write_beir

pytestmark = pytest.mark.usefixtures("one_torch_thread")
needs_lancedb = pytest.mark.skipif(
    importlib.util.find_spec("lancedb") is None, reason="lancedb (the vectordb extra) is absent"
)
needs_faiss = pytest.mark.skipif(
    importlib.util.find_spec("faiss") is None, reason="faiss-cpu (the eval extra) is absent"
)


@pytest.fixture(autouse=True)
def _isolated(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMITASSE_QUIET", "1")


@pytest.fixture
def fitted(tiny_encoder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A PCA model fitted on texts of its own, and documents none of them."""
    fit_texts, docs = tmp_path / "fit.txt", tmp_path / "docs.txt"
    fit_texts.write_text("\n".join(random_documents(40, seed=1)) + "\n")
    docs.write_text("\n".join(dict.fromkeys(random_documents(50, seed=2))) + "\n")
    model = tmp_path / "model"
    argv = ["fit", "--model", str(tiny_encoder), "--texts", str(fit_texts), "--compressor", "pca",
            "--dim", "8", "--out", str(model)]  # fmt: skip
    assert main(argv) == 0
    return model, docs


def _misses(argv: list[str]) -> int:
    """Texts the command's encoders had to run on (the cache lacked them)."""
    STATS.reset()
    assert main(argv) == 0
    return STATS.misses


@needs_lancedb
def test_after_encode_index_and_embed_embed_nothing(
    fitted: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, docs = fitted
    encode = ["encode", str(model), "--input", str(docs), "--out", str(tmp_path / "a.npy")]
    assert _misses(encode) == len(docs.read_text().splitlines())
    assert _misses(["index", str(model), "--input", str(docs), "--db", str(tmp_path / "db")]) == 0
    embed = ["embed", str(model), "--input", str(docs), "--out", str(tmp_path / "shards"),
             "--quiet"]  # fmt: skip
    assert _misses(embed) == 0
    assert STATS.hits == len(docs.read_text().splitlines())
    capsys.readouterr()
    # What the cache holds, then cleared: the next command embeds everything again.
    assert main(["cache"]) == 0
    shown = capsys.readouterr().out
    assert str(shared_root()) in shown and "bound 2.0 GiB" in shown
    assert "90 texts" in shown  # the fit texts and the documents, under one encoder
    assert main(["cache", "--clear"]) == 0
    cleared = capsys.readouterr().out.strip()
    assert cleared.startswith(f"cleared the embedding cache at {shared_root()}: ")
    assert "\n" not in cleared and "freed" in cleared
    assert not list(shared_root().rglob("shard-*"))
    assert _misses([*encode, "--overwrite"]) == len(docs.read_text().splitlines())


def test_a_bound_of_zero_caches_nothing(
    fitted: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, docs = fitted
    monkeypatch.setenv("DEMITASSE_CACHE_MAX_BYTES", "0")
    fitted_on = list(shared_root().rglob("shard-*"))  # by the fixture, before
    encode = ["encode", str(model), "--input", str(docs), "--out", str(tmp_path / "a.npy")]
    assert main(encode) == 0
    STATS.reset()
    assert main([*encode, "--overwrite"]) == 0
    assert STATS.hits == STATS.misses == 0  # no cache read at all
    assert list(shared_root().rglob("shard-*")) == fitted_on


@needs_lancedb
def test_index_takes_vectors_computed_already(
    fitted: tuple[Path, Path],
    tiny_encoder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model, docs = fitted
    vectors = tmp_path / "encoder.npy"  # the encoder's output, as published
    assert main(["encode", str(tiny_encoder), "--input", str(docs), "--out", str(vectors)]) == 0
    assert main(["cache", "--clear"]) == 0
    given = ["index", str(model), "--input", str(docs), "--db", str(tmp_path / "given")]
    STATS.reset()
    assert main([*given, "--vectors", str(vectors)]) == 0
    assert STATS.hits == STATS.misses == 0  # nothing encoded, nothing read
    assert main(["index", str(model), "--input", str(docs), "--db", str(tmp_path / "encoded")]) == 0
    # Appended to a table holding some of the documents: the rows of the others are taken.
    head = tmp_path / "head.txt"
    head.write_text("\n".join(docs.read_text().splitlines()[:20]) + "\n")
    assert main(["index", str(model), "--input", str(head), "--db", str(tmp_path / "some")]) == 0
    capsys.readouterr()
    assert main([*given[:-1], str(tmp_path / "some"), "--vectors", str(vectors),
                 "--skip-existing"]) == 0  # fmt: skip
    assert capsys.readouterr().out.startswith("added 30 documents")
    results = []
    for db in ("given", "encoded", "some"):
        search = ["search", str(model), "--db", str(tmp_path / db), "--json"]
        assert main([*search, "--query", docs.read_text().splitlines()[3]]) == 0
        results.append(capsys.readouterr().out)
    assert results[0] == results[1] == results[2]
    # Vectors that cannot be the encoder's output for these documents: one line each.
    np.save(tmp_path / "narrow.npy", np.ones((50, 5), np.float32))
    np.save(tmp_path / "short.npy", np.load(vectors)[:10])
    for name, expected in [("narrow", "vectors 5 wide, but"), ("short", "10 vectors for the")]:
        argv = ["index", str(model), "--input", str(docs), "--db", str(tmp_path / name),
                "--vectors", str(tmp_path / f"{name}.npy")]  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("demitasse: error:") and expected in err and "\n" not in err, err


@needs_faiss
def test_a_tune_after_an_eval_of_the_same_data_embeds_nothing(
    tiny_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    beir = write_beir(tmp_path / "beir")
    fit = tmp_path / "fit.txt"
    fit.write_text("\n".join(random_documents(40, seed=1)) + "\n")
    evaluate = ["eval", "--model", str(tiny_encoder), "--beir", str(beir), "--dims", "32",
                "--fit-data", str(fit), "--out", str(tmp_path / "results")]  # fmt: skip
    assert _misses(evaluate) > 0
    tune = ["tune", "--model", str(tiny_encoder), "--beir", str(beir), "--min-retention", "0.9",
            "--compressors", "truncate", "--out", str(tmp_path / "chosen"),
            "--work-dir", str(tmp_path / "work")]  # fmt: skip
    assert _misses(tune) == 0
    assert STATS.hits > 0
    capsys.readouterr()
