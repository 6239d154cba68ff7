"""Translation retrieval: parallel loaders, tie-aware accuracy, chunking, precisions."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from demitasse.cli.specs import parse_compressor_specs
from demitasse.compress import make_quantizer
from demitasse.data.parallel import ParallelTexts, load_multi30k, load_parallel
from demitasse.errors import DataError
from demitasse.evaluation.grid import evaluate_grid
from demitasse.evaluation.tasks import EmbeddedTexts
from demitasse.evaluation.translation import TranslationTask, translation_accuracy
from tests.helpers import FakeEncoder


def _aligned(n: int, dim: int, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    source = rng.standard_normal((n, dim)).astype(np.float32)
    target = source + noise * rng.standard_normal((n, dim)).astype(np.float32)
    return source, target


def _embedded(corpus: ParallelTexts, source: np.ndarray, target: np.ndarray, precision: str):
    texts = [*corpus.source, *corpus.target]
    vectors = np.vstack([source, target])
    quantizer = make_quantizer(precision)
    if quantizer.needs_fit:
        quantizer.fit(vectors)
    return EmbeddedTexts(texts, quantizer.quantize(vectors), quantizer, vectors.shape[1])


def _corpus(n: int) -> ParallelTexts:
    return ParallelTexts(
        "toy", [f"s{i}" for i in range(n)], [f"t{i}" for i in range(n)], "en", "de"
    )


def _brute_force(quantizer, queries: np.ndarray, candidates: np.ndarray, dim: int) -> float:
    """Tie-aware accuracy from the quantizer's own paired similarity, pair by pair."""
    credit = 0.0
    for i in range(len(queries)):
        sims = quantizer.similarity(
            np.repeat(queries[i : i + 1], len(candidates), axis=0), candidates, dim=dim
        )
        best = np.flatnonzero(sims == sims.max())
        credit += (i in best) / len(best)
    return 100 * credit / len(queries)


@pytest.mark.parametrize("precision", ["float32", "int8", "binary"])
def test_aligned_vectors_are_found_and_shuffled_ones_are_not(precision: str) -> None:
    corpus = _corpus(200)
    source, target = _aligned(200, 64, noise=0.05)
    scores = TranslationTask(corpus).evaluate(_embedded(corpus, source, target, precision))
    assert [s.dataset for s in scores] == ["toy en→de", "toy de→en", "avg"]
    assert all(s.metric == "accuracy" and s.score == pytest.approx(100.0) for s in scores)
    shuffled = target[np.random.default_rng(1).permutation(200)]
    scores = TranslationTask(corpus).evaluate(_embedded(corpus, source, shuffled, precision))
    assert all(s.score < 5.0 for s in scores)  # chance is 0.5


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_matrix_search_agrees_with_the_quantizer_similarity(precision: str) -> None:
    # Few dimensions and heavy noise: errors and (for binary) ties are common.
    source, target = _aligned(60, 12, noise=0.8, seed=2)
    quantizer = make_quantizer(precision).fit(np.vstack([source, target]))
    q_codes, c_codes = quantizer.quantize(source), quantizer.quantize(target)
    if precision == "binary":
        q_feat = np.unpackbits(q_codes, axis=1, count=12).astype(np.float32)
        c_feat = np.unpackbits(c_codes, axis=1, count=12).astype(np.float32)
    else:  # int8 codes compare as their bucket centres
        q_feat, c_feat = quantizer.dequantize(q_codes), quantizer.dequantize(c_codes)
    fast = translation_accuracy(q_feat, c_feat, np.arange(60), hamming=precision == "binary")
    assert fast == pytest.approx(_brute_force(quantizer, q_codes, c_codes, 12))
    assert 0 < fast < 100


def test_chunking_gives_identical_results() -> None:
    source, target = _aligned(150, 16, noise=0.7, seed=3)
    gold = np.arange(150)
    for hamming in (False, True):
        q, c = (source > 0, target > 0) if hamming else (source, target)
        whole = translation_accuracy(q, c, gold, hamming=hamming)
        assert whole == translation_accuracy(q, c, gold, hamming=hamming, chunk_rows=7)
        assert whole == translation_accuracy(q, c, gold, hamming=hamming, chunk_rows=1)


def test_ties_are_split_and_duplicate_candidates_are_one() -> None:
    bits = np.array([[1, 0], [0, 1]], dtype=np.float32)
    same = np.ones((2, 2), dtype=np.float32)  # every candidate ties for both queries
    assert translation_accuracy(bits, same, [0, 1], hamming=True) == pytest.approx(50.0)
    # Two identical target texts are one candidate, so both queries find it.
    corpus = ParallelTexts("dup", ["a", "b", "c"], ["x", "x", "z"], "en", "de")
    source = np.array([[1, 0], [1, 0.1], [0, 1]], dtype=np.float32)
    target = np.array([[1, 0.05], [1, 0.05], [0, 1]], dtype=np.float32)
    scores = TranslationTask(corpus).evaluate(_embedded(corpus, source, target, "float32"))
    assert scores[0].score == pytest.approx(100.0)
    assert scores[0].extra == {"queries": 3, "candidates": 2}
    with pytest.raises(DataError, match="gold indices"):
        translation_accuracy(bits, same, [0, 2])


def test_translation_runs_inside_the_grid() -> None:
    # Identical texts on both sides get identical vectors from the fake encoder.
    texts = [f"sentence {i}" for i in range(30)]
    corpus = ParallelTexts("same", texts, list(texts), "en", "en2")
    records = evaluate_grid(
        FakeEncoder(dim=16),
        [TranslationTask(corpus, chunk_rows=4)],
        specs=parse_compressor_specs("none"),
        dims=[16],
        precisions=["float32", "int8", "binary"],
        fit_texts=[f"fit {i}" for i in range(20)],
    )
    assert len(records) == 3 * 3
    assert all(r.task == "translation" and r.score == pytest.approx(100.0) for r in records)


def _write(path: Path, lines: list[str]) -> Path:
    data = "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def test_load_parallel_plain_gz_limit_and_languages(tmp_path: Path) -> None:
    src = _write(tmp_path / "dev.en.gz", ["A dog .", "Two cats .", "Über"])
    tgt = _write(tmp_path / "dev.de", ["Ein Hund .", "Zwei Katzen .", "Over"])
    corpus = load_parallel(src, tgt, "dev")
    assert corpus.source == ["A dog .", "Two cats .", "Über"]
    assert corpus.target[2] == "Over"
    assert (corpus.source_lang, corpus.target_lang) == ("en", "de")
    assert len(load_parallel(src, tgt, "dev", limit=2)) == 2
    plain = load_parallel(_write(tmp_path / "a.txt", ["x"]), _write(tmp_path / "b.txt", ["y"]), "p")
    assert (plain.source_lang, plain.target_lang) == ("src", "tgt")


def test_load_parallel_errors(tmp_path: Path) -> None:
    src = _write(tmp_path / "s.en", ["a", "b", "c"])
    short = _write(tmp_path / "s.de", ["a", "b"])
    with pytest.raises(DataError, match=r"s\.en has 3 lines, .*s\.de has 2") as info:
        load_parallel(src, short, "x")
    assert "\n" not in str(info.value)
    with pytest.raises(DataError, match=r"s\.de has 2 lines, .*s\.en has 3"):
        load_parallel(short, src, "x")
    empty = _write(tmp_path / "e.de", [])
    with pytest.raises(DataError, match="empty"):
        load_parallel(empty, _write(tmp_path / "e.en", []), "x")
    with pytest.raises(DataError, match="file not found"):
        load_parallel(tmp_path / "missing.en", src, "x")
    (tmp_path / "bad.de").write_bytes(b"ok\n\xff\xfe\n")
    pairs = load_parallel(_write(tmp_path / "two.en", ["a", "b"]), tmp_path / "bad.de", "x")
    assert "\ufffd" in pairs.target[1]  # invalid UTF-8 replaced, as everywhere
    with pytest.raises(ValueError, match="2 source and 1 target"):
        ParallelTexts("x", ["a", "b"], ["c"])


def test_multi30k_splits_on_real_files(data_dir: Path) -> None:
    for split, n in (("test_2016_flickr", 1000), ("val", 1014), ("train", 29000)):
        assert len(load_multi30k(data_dir, split)) == n
    test = load_multi30k(data_dir, pair=("de", "en"))
    assert test.name == "multi30k-test_2016_flickr"
    assert (test.source_lang, test.target_lang) == ("de", "en")
    assert test.target[0] == load_multi30k(data_dir).source[0]
    with pytest.raises(DataError, match=r"available: .*test_2016_flickr.*val"):
        load_multi30k(data_dir, "test_2099")
    with pytest.raises(DataError, match="no Multi30k en-fr folder"):
        load_multi30k(data_dir, pair=("en", "fr"))
