"""Codebook codes (pq<B>, rq<B>): sized precision names, exact bytes, asymmetric scores that
match the decoded vectors, save/load bit for bit, and one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from demitasse.compress import (
    ProductQuantizer,
    ResidualQuantizer,
    is_precision,
    load_quantizer,
    make_quantizer,
    precision_help,
    quantizer_names,
    resolve_precision,
)
from demitasse.compress.codebooks import _balanced_slices, kmeans
from demitasse.errors import CompressorError


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def embeddings(n: int, seed: int) -> np.ndarray:
    """Unit vectors with a decaying spectrum and a common offset, like sentence embeddings."""
    scales = np.linspace(2.0, 0.1, 32)
    mixing = np.linalg.qr(np.random.default_rng(0).standard_normal((32, 32)))[0]
    rng = np.random.default_rng(seed)
    return unit((rng.standard_normal((n, 32)) * scales @ mixing + 0.5).astype(np.float32))


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return embeddings(600, 1)


@pytest.fixture(scope="module")
def held_out() -> np.ndarray:
    return embeddings(400, 2)


def error(quantizer, rows: np.ndarray) -> float:
    return float(np.linalg.norm(quantizer.decode(quantizer.quantize(rows)) - rows, axis=1).mean())


FAST = {"iterations": 8, "seed": 1}
CODES = [("pq8", {**FAST, "opq_iterations": 2}), ("rq6", {**FAST, "refine_iterations": 1})]


@pytest.fixture(scope="module", params=CODES, ids=[name for name, _ in CODES])
def fitted(request, vectors):
    name, params = request.param
    return make_quantizer(name, **params).fit(vectors)


def test_sized_precision_names():
    assert {"pq", "rq"} <= set(quantizer_names())
    assert resolve_precision("pq16") == (ProductQuantizer, {"code_bytes": 16})
    assert resolve_precision("rq8") == (ResidualQuantizer, {"code_bytes": 8})
    assert is_precision("int8") and is_precision("rq3")
    for bad in ("pq", "int4", "binary8", "pq-3", "PQ8", 8):
        assert not is_precision(bad)
    assert "pq<bytes>" in precision_help() and "int8" in precision_help()
    with pytest.raises(CompressorError, match=r"unknown precision 'pq'.*pq<bytes>"):
        make_quantizer("pq")
    with pytest.raises(CompressorError, match="sets code_bytes already"):
        make_quantizer("pq8", code_bytes=4)
    assert make_quantizer("rq12").precision == "rq12"


def test_codes_and_bytes(fitted, vectors):
    codes = fitted.quantize(vectors)
    width = fitted.code_bytes
    assert codes.dtype == np.uint8 and codes.shape == (len(vectors), width)
    assert fitted.bytes_per_vector(vectors.shape[1]) == width == fitted.code_width(32)
    assert fitted.n_codebooks == width - 1  # the norm byte


def test_asymmetric_scores_are_cosines_of_decoded_documents(fitted, vectors):
    codes = fitted.quantize(vectors)
    queries = vectors[:7] * 3.0  # cosine ignores the queries' length
    decoded = fitted.decode(codes)
    expected = unit(queries) @ unit(decoded).T
    np.testing.assert_allclose(fitted.score(queries, codes), expected, atol=2e-3)
    # dot and l2 agree with the decoded vectors up to the norm byte's rounding
    dots = queries @ decoded.T
    np.testing.assert_allclose(fitted.score(queries, codes, "dot"), dots, rtol=3e-3, atol=3e-3)
    distances = ((queries[:, None, :] - decoded[None]) ** 2).sum(axis=2)
    np.testing.assert_allclose(fitted.score(queries, codes, "l2"), -distances, rtol=3e-3, atol=3e-3)


def test_codes_keep_most_of_the_ranking(fitted, vectors):
    """The decoded documents are close: exact top-1 neighbours mostly survive."""
    codes = fitted.quantize(vectors)
    exact = (vectors[:100] @ vectors.T).argsort(axis=1)[:, -5:]
    found = fitted.score(vectors[:100], codes).argmax(axis=1)
    assert np.mean([f in row for f, row in zip(found, exact, strict=True)]) > 0.7
    assert error(fitted, vectors) < 0.6


def test_more_bytes_keep_more(vectors, held_out):
    errors = [
        error(make_quantizer(f"{family}{size}", **FAST).fit(vectors), held_out)
        for family in ("pq", "rq")
        for size in (3, 5, 9)
    ]
    assert errors[0] > errors[1] > errors[2] and errors[3] > errors[4] > errors[5]


def test_beam_search_lowers_the_error(vectors, held_out):
    def rq(beam):
        return make_quantizer("rq4", norm="none", beam=beam, refine_iterations=0, **FAST)

    assert error(rq(8).fit(vectors), held_out) < error(rq(1).fit(vectors), held_out)


def test_opq_rotation_beats_no_rotation(vectors):
    """OPQ lowers the error it minimises, on the rows it was fitted on."""

    def pq(rotation):
        return make_quantizer("pq4", norm="none", rotation=rotation, **FAST).fit(vectors)

    assert error(pq("opq"), vectors) < error(pq("none"), vectors)


def test_save_load_bit_identical(fitted, vectors, tmp_path):
    fitted.save(tmp_path / "q")
    loaded = load_quantizer(tmp_path / "q")
    assert type(loaded) is type(fitted) and loaded.precision == fitted.precision
    np.testing.assert_array_equal(loaded.quantize(vectors), fitted.quantize(vectors))
    codes = fitted.quantize(vectors)
    queries = vectors[:3]
    np.testing.assert_array_equal(loaded.score(queries, codes), fitted.score(queries, codes))


def test_paired_similarity_is_cosine_of_decoded(fitted, vectors):
    codes = fitted.quantize(vectors)
    decoded = unit(fitted.decode(codes))
    expected = (decoded[:50] * decoded[50:100]).sum(axis=1)
    np.testing.assert_allclose(fitted.similarity(codes[:50], codes[50:100]), expected, atol=1e-5)


def test_deterministic(vectors):
    a = make_quantizer("pq4", **FAST).fit(vectors).quantize(vectors)
    b = make_quantizer("pq4", **FAST).fit(vectors).quantize(vectors)
    np.testing.assert_array_equal(a, b)


def test_few_rows_learn_fewer_codewords(vectors, tmp_path):
    q = make_quantizer("rq3", **FAST).fit(vectors[:40])
    assert q.n_codewords_ == 40
    codes = q.quantize(vectors)
    assert codes[:, :2].max() < 40
    q.save(tmp_path / "few")
    np.testing.assert_array_equal(load_quantizer(tmp_path / "few").quantize(vectors), codes)


def test_balanced_slices_spread_the_variance():
    slices = _balanced_slices(np.array([16.0, 8.0, 4.0, 2.0, 1.0, 0.5]), 2)
    assert sorted(len(s) for s in slices) == [3, 3]
    assert {0, 1} not in [set(s[:2]) for s in slices]  # the two largest go apart


def test_kmeans_finds_separated_clusters():
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]], np.float32)
    points = np.concatenate([c + 0.1 * rng.standard_normal((50, 2)) for c in centres])
    found = kmeans(points.astype(np.float32), 3, 10, np.random.default_rng(1))
    assert np.abs(np.sort(found[:, 0]) - np.sort(centres[:, 0])).max() < 0.2


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("pq1", {}, "leaves no byte for codewords"),
        ("rq4", {"beam": 0}, "beam must be"),
        ("pq4", {"rotation": "itq"}, "rotation must be one of"),
        ("rq4", {"norm": "float"}, "norm must be one of"),
    ],
)
def test_bad_params_one_line(name, params, message, vectors):
    with pytest.raises(CompressorError, match=message) as exc:
        make_quantizer(name, **params).fit(vectors)
    assert "\n" not in str(exc.value)


def test_bad_inputs_one_line(fitted, vectors):
    codes = fitted.quantize(vectors[:10])
    with pytest.raises(CompressorError, match="take exactly that many"):
        fitted.quantize(vectors[:, :16])
    with pytest.raises(CompressorError, match="queries have 16 dims"):
        fitted.score(vectors[:2, :16], codes)
    with pytest.raises(CompressorError, match="must be a uint8 array"):
        fitted.score(vectors[:2], codes[:, :-1])
    with pytest.raises(CompressorError, match="metric must be one of"):
        fitted.score(vectors[:2], codes, "hamming")
    with pytest.raises(CompressorError, match="not fitted"):
        make_quantizer("pq4").score(vectors[:2], codes)
    with pytest.raises(CompressorError, match="at least 9 dims"):
        make_quantizer("pq10", **FAST).fit(vectors[:, :8])


@pytest.mark.parametrize("damage", ["missing", "truncated", "wrong shape"])
def test_damaged_saved_codes_fail_in_one_line(fitted, tmp_path, damage):
    fitted.save(tmp_path / "q")
    state = tmp_path / "q" / "state.safetensors"
    if damage == "missing":
        state.unlink()
    elif damage == "truncated":
        state.write_bytes(state.read_bytes()[:100])
    else:
        from safetensors.numpy import load_file, save_file

        arrays = load_file(state)
        arrays["codebooks_"] = arrays["codebooks_"][..., :-1]
        save_file(arrays, state)
    with pytest.raises(CompressorError) as exc:
        load_quantizer(tmp_path / "q")
    assert "\n" not in str(exc.value)
