"""Tests for demitasse.compress: baselines, quantisers, persistence. Synthetic data only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn import decomposition

import demitasse.persistence as persist
from demitasse.compress import (
    PCA,
    BinaryQuantizer,
    Compressor,
    Float32Quantizer,
    Int8Quantizer,
    Quantizer,
    RandomProjection,
    Truncate,
    compressor_names,
    load_compressor,
    load_quantizer,
    make_compressor,
    make_quantizer,
    quantizer_names,
)
from demitasse.errors import CompressorError, DataError, DemitasseError
from tests.helpers import correlated

D = 24


@pytest.fixture
def x() -> np.ndarray:
    return correlated()


def all_compressors() -> list[Compressor]:
    return [
        Truncate(dim=16),
        PCA(dim=16),
        PCA(dim=12, whiten=True, abtt=2),
        RandomProjection(dim=16, seed=3),
    ]


def all_quantizers() -> list[Quantizer]:
    return [
        Float32Quantizer(),
        Int8Quantizer(),
        Int8Quantizer(calibration="percentile", percentile=99.0),
        BinaryQuantizer(),
        BinaryQuantizer(threshold="mean"),
    ]


def ids(objs: list) -> list[str]:
    return [repr(o) for o in objs]


def assert_one_line(exc: pytest.ExceptionInfo) -> None:
    message = str(exc.value)
    assert message and "\n" not in message


def align_signs(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Flip columns of ``ours`` to match ``reference``'s signs (PCA signs are arbitrary)."""
    signs = np.sign(np.sum(ours * reference, axis=0))
    return ours * signs


# ---- baselines -------------------------------------------------------------------------------


def test_truncate_equals_slicing(x):
    t = Truncate(dim=10).fit(x, fit_data="synthetic")
    assert t.n_features_in_ == D and t.output_dim_ == 10
    np.testing.assert_array_equal(t.transform(x), x[:, :10])
    np.testing.assert_array_equal(t.transform(x, dim=3), x[:, :3])
    half = x.astype(np.float16)
    np.testing.assert_array_equal(t.transform(half), half[:, :10].astype(np.float32))


def test_dim_none_means_input_dim(x):
    for c in (Truncate(), PCA(), RandomProjection()):
        assert c.fit(x).output_dim_ == D
        assert c.transform(x).shape == (len(x), D)


def test_pca_matches_sklearn(x):
    ours = PCA(dim=8).fit(x)
    ref = decomposition.PCA(n_components=8, svd_solver="full").fit(x.astype(np.float64))
    comps = align_signs(ours.components_.T, ref.components_.T).T
    np.testing.assert_allclose(comps, ref.components_, atol=1e-6)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(ours.mean_, ref.mean_, rtol=1e-10)
    out = ours.transform(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(align_signs(out, ref.transform(x)), ref.transform(x), atol=2e-4)
    np.testing.assert_allclose(
        ours.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-8
    )


def test_pca_sign_is_deterministic(x):
    comps = PCA(dim=6).fit(x).components_
    biggest = comps[np.arange(6), np.argmax(np.abs(comps), axis=1)]
    assert (biggest > 0).all()
    np.testing.assert_array_equal(comps, PCA(dim=6).fit(x.copy()).components_)


def test_pca_whitening_gives_identity_covariance(x):
    out = PCA(dim=10, whiten=True).fit_transform(x)
    np.testing.assert_allclose(np.cov(out, rowvar=False), np.eye(10), atol=1e-4)
    np.testing.assert_allclose(out.mean(axis=0), 0, atol=1e-4)


def test_pca_whitening_survives_rank_deficient_data():
    low_rank = correlated(n=10, d=D)  # rank ≤ 9 < 24: most eigenvalues are ~0
    out = PCA(whiten=True).fit_transform(low_rank)
    assert np.isfinite(out).all()


def test_abtt_drops_top_components(x):
    r, d = 3, 7
    ours = PCA(dim=d, abtt=r).fit(x)
    ref = decomposition.PCA(n_components=r + d, svd_solver="full").fit(x.astype(np.float64))
    expected = ref.transform(x)[:, r:]
    np.testing.assert_allclose(align_signs(ours.transform(x), expected), expected, atol=2e-4)
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_[r:], rtol=1e-8)


def test_abtt_caps_output_dim(x):
    assert PCA(abtt=4).fit(x).output_dim_ == D - 4
    with pytest.warns(UserWarning, match="exceeds"):
        assert PCA(dim=D, abtt=4).fit(x).output_dim_ == D - 4
    with pytest.raises(CompressorError) as exc:
        PCA(abtt=D).fit(x)
    assert_one_line(exc)


def test_pca_fit_is_chunked_and_leaves_input_untouched(x, monkeypatch):
    x64 = x.astype(np.float64)
    before = x64.copy()
    full = PCA(dim=5).fit(x64)
    np.testing.assert_array_equal(x64, before)
    monkeypatch.setattr(PCA, "fit_chunk_rows", 7)
    chunked = PCA(dim=5).fit(x64)
    np.testing.assert_allclose(chunked.components_, full.components_, atol=1e-9)
    np.testing.assert_allclose(chunked.mean_, full.mean_, rtol=1e-12)


def test_pca_zero_variance_is_a_data_error():
    with pytest.raises(DataError, match="zero variance"):
        PCA().fit(np.ones((5, 4), np.float32))


def test_random_projection_is_seeded_and_scaled(x):
    a = RandomProjection(dim=16, seed=1).fit(x)
    b = RandomProjection(dim=16, seed=1).fit(x)
    c = RandomProjection(dim=16, seed=2).fit(x)
    np.testing.assert_array_equal(a.transform(x), b.transform(x))
    assert not np.allclose(a.transform(x), c.transform(x))
    wide = np.random.default_rng(0).standard_normal((3, 1000))
    big = RandomProjection(dim=500, seed=0).fit(wide)
    assert np.var(big.components_) == pytest.approx(1 / 500, rel=0.02)


def test_random_projection_prefix_is_a_smaller_projection(x):
    big = RandomProjection(dim=16, seed=5).fit(x)
    small = RandomProjection(dim=4, seed=5).fit(x)
    np.testing.assert_allclose(
        big.transform(x, dim=4) * np.sqrt(16 / 4), small.transform(x), rtol=1e-5, atol=1e-5
    )


def test_bad_out_buffer(x):
    t = Truncate(dim=4).fit(x)
    with pytest.raises(CompressorError):
        t.transform(x, out=np.empty((len(x), 5), np.float32))
    with pytest.raises(CompressorError):
        t.transform(x, out=np.empty((len(x), 4), np.float64))


# ---- validation ------------------------------------------------------------------------------


def test_dim_too_large_or_small(x):
    pca = PCA(dim=8).fit(x)
    with pytest.raises(CompressorError) as exc:
        pca.transform(x, dim=9)
    assert str(exc.value) == "dim 9 > 8, the largest this pca compressor was fitted for"
    for bad in (0, -1, 2.5, True):
        with pytest.raises(CompressorError):
            pca.transform(x, dim=bad)


def test_not_fitted(x, tmp_path):
    for c in all_compressors():
        with pytest.raises(CompressorError, match="not fitted") as exc:
            c.transform(x)
        assert_one_line(exc)
        with pytest.raises(CompressorError, match="not fitted"):
            c.save(tmp_path / "never-written")
    assert not (tmp_path / "never-written").exists()


def test_wrong_number_of_features(x):
    pca = PCA(dim=4).fit(x)
    with pytest.raises(
        CompressorError, match="X has 23 features, but PCA is expecting 24 features as input"
    ):
        pca.transform(x[:, :-1])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_names_the_row(x, bad):
    xb = x.copy()
    xb[123, 4] = bad
    with pytest.raises(DataError, match="row 123 ") as exc:
        PCA().fit(xb)
    assert_one_line(exc)
    pca = PCA().fit(x)
    with pytest.raises(DataError, match="row 123 "):
        pca.transform(xb, chunk_rows=50)
    with pytest.raises(DataError, match="row 123 "):
        Int8Quantizer().fit(xb)


@pytest.mark.parametrize("make", [PCA, lambda: RandomProjection(seed=0)], ids=["pca", "random"])
def test_a_dense_map_checks_its_output_but_names_the_input_row(x, make):
    """PCA and random projections check only their output (a NaN or inf anywhere in a row
    reaches every output of it); the error still names the input row."""
    compressor = make().fit(x)
    for value, row in ((np.nan, 7), (np.inf, 160), (-np.inf, 299)):
        xb = x.astype(np.float32)
        xb[row, 3] = value
        with pytest.raises(DataError, match=f"X row {row} contains NaN or inf") as exc:
            compressor.transform(xb, chunk_rows=64)
        assert_one_line(exc)


def test_finite_values_whose_row_sum_overflows_pass_the_finiteness_check():
    from demitasse.arrays import check_finite_chunk

    check_finite_chunk(np.full((4, 8), 3e38, np.float32), 0)  # the quick sum is inf: recheck
    with pytest.raises(DataError, match="X row 2 contains NaN"):
        check_finite_chunk(np.array([[1, 2], [3, 4], [np.nan, 5]], np.float32), 0)


def test_input_shape_and_type_checks(x):
    with pytest.raises(DataError, match="2-D"):
        PCA().fit(x[0])
    with pytest.raises(DataError, match="dtype"):
        PCA().fit(x.astype(str))
    with pytest.raises(CompressorError, match="at least 2 rows"):
        PCA().fit(x[:1])
    # Lists and integer arrays are fine.
    assert Truncate().fit(x.tolist()).n_features_in_ == D
    assert Truncate().fit(np.arange(20).reshape(5, 4)).transform([[1, 2, 3, 4]]).dtype == np.float32


def test_fit_rejects_unknown_supervision(x):
    with pytest.raises(CompressorError, match="accepts: none"):
        PCA().fit(x, labels=[1, 2])


def test_params_are_validated():
    for name, params in [
        ("pca", {"dim": 0}),
        ("pca", {"abtt": -1}),
        ("pca", {"whiten": "yes"}),
        ("random", {"seed": 1.5}),
        ("truncate", {"dim": "8"}),
        ("pca", {"dimension": 8}),
    ]:
        with pytest.raises(CompressorError) as exc:
            make_compressor(name, **params)
        assert_one_line(exc)
    for precision, params in [
        ("int8", {"calibration": "max"}),
        ("int8", {"percentile": 40}),
        ("binary", {"threshold": "median"}),
        ("float32", {"bits": 32}),
    ]:
        with pytest.raises(CompressorError):
            make_quantizer(precision, **params)


def test_registry_and_params():
    assert {"truncate", "pca", "random"} <= set(compressor_names())
    assert quantizer_names() == ["binary", "float32", "int8", "pq", "rq"]
    with pytest.raises(CompressorError, match=r"known: .*pca") as exc:
        make_compressor("svd")
    assert_one_line(exc)
    with pytest.raises(CompressorError, match="known: binary, float32, int8"):
        make_quantizer("int4")
    pca = make_compressor("pca", dim=32, whiten=True)
    assert isinstance(pca, PCA)
    assert pca.get_params() == {"dim": 32, "whiten": True, "abtt": 0}
    assert repr(pca) == "PCA(dim=32, whiten=True)"
    assert pca.set_params(abtt=1).abtt == 1
    assert make_quantizer("int8", calibration="percentile").get_params() == {
        "calibration": "percentile",
        "percentile": 99.9,
    }


def test_metadata(x):
    pca = PCA(dim=4)
    assert pca.metadata["input_dim"] is None
    pca.fit(x, fit_data="stsb-train")
    assert pca.metadata == {
        "method": "pca",
        "params": {"dim": 4, "whiten": False, "abtt": 0},
        "input_dim": D,
        "output_dim": 4,
        "matryoshka": True,
        "fit_data": "stsb-train",
        "n_fit_samples": len(x),
    }


# ---- persistence -----------------------------------------------------------------------------


def test_load_via_wrong_subclass(x, tmp_path):
    Truncate().fit(x).save(tmp_path / "t")
    with pytest.raises(CompressorError, match="holds a truncate compressor, not pca"):
        PCA.load(tmp_path / "t")


def test_numpy_scalar_params_are_saved(x, tmp_path):
    PCA(dim=np.int64(5)).fit(x).save(tmp_path / "p")
    assert load_compressor(tmp_path / "p").transform(x).shape == (len(x), 5)


@pytest.mark.parametrize("quantizer", all_quantizers(), ids=ids(all_quantizers()))
def test_quantizer_round_trip(x, tmp_path, quantizer):
    quantizer.fit(x)
    quantizer.save(tmp_path / "q")
    loaded = load_quantizer(tmp_path / "q")
    assert type(loaded) is type(quantizer)
    assert loaded.get_params() == quantizer.get_params()
    for d in (D, 13):
        np.testing.assert_array_equal(loaded.quantize(x[:, :d]), quantizer.quantize(x[:, :d]))
    codes = quantizer.quantize(x)
    np.testing.assert_array_equal(
        loaded.similarity(codes, codes[::-1]), quantizer.similarity(codes, codes[::-1])
    )


def test_unfitted_stateless_quantizer_round_trip(x, tmp_path):
    BinaryQuantizer().save(tmp_path / "b")
    loaded = load_quantizer(tmp_path / "b")
    np.testing.assert_array_equal(loaded.quantize(x), BinaryQuantizer().quantize(x))
    with pytest.raises(CompressorError, match="unfitted int8"):
        Int8Quantizer().save(tmp_path / "i")


def test_kinds_are_not_confused(x, tmp_path):
    Int8Quantizer().fit(x).save(tmp_path / "q")
    PCA().fit(x).save(tmp_path / "c")
    with pytest.raises(CompressorError, match="not a compressor"):
        load_compressor(tmp_path / "q")
    with pytest.raises(CompressorError, match="not a quantizer"):
        load_quantizer(tmp_path / "c")


def test_atomic_save_keeps_previous_on_failure(x, tmp_path, monkeypatch):
    target = tmp_path / "pca"
    first = PCA(dim=4).fit(x)
    first.save(target)
    before = {p.name: p.read_bytes() for p in target.iterdir()}

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(persist, "save_file", explode)
    with pytest.raises(OSError, match="disk full"):
        PCA(dim=8, whiten=True).fit(x).save(target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["pca"]  # no temporary leftovers
    np.testing.assert_array_equal(load_compressor(target).transform(x), first.transform(x))


def test_overwrite_replaces_previous_save(x, tmp_path):
    PCA(dim=4).fit(x).save(tmp_path / "c")
    Truncate(dim=3).fit(x).save(tmp_path / "c")
    assert load_compressor(tmp_path / "c").method == "truncate"
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_save_refuses_to_clobber_unrelated_paths(x, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "thesis.tex").write_text("precious")
    (tmp_path / "file").write_text("x")
    pca = PCA().fit(x)
    for target in ("docs", "file"):
        with pytest.raises(DemitasseError) as exc:
            pca.save(tmp_path / target)
        assert_one_line(exc)
    assert (tmp_path / "docs" / "thesis.tex").read_text() == "precious"


@pytest.fixture
def saved(x, tmp_path) -> Path:
    path = tmp_path / "saved"
    PCA(dim=6).fit(x).save(path)
    return path


def edit_config(path: Path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda p: (p / "state.safetensors").write_bytes(b""), "corrupt state.safetensors"),
        (
            lambda p: (p / "state.safetensors").write_bytes(
                (p / "state.safetensors").read_bytes()[:-100]
            ),
            "corrupt state.safetensors",
        ),
        (
            lambda p: (p / "state.safetensors").write_bytes(b"\x00" * 64),
            "corrupt state.safetensors",
        ),
        (lambda p: (p / "state.safetensors").unlink(), "no state.safetensors"),
        (lambda p: (p / "config.json").write_text("{not json"), "invalid config.json"),
        (lambda p: (p / "config.json").write_text("[1, 2]"), "invalid config.json"),
        (lambda p: (p / "config.json").unlink(), "no config.json"),
        (lambda p: edit_config(p, method="svd"), "unknown compressor 'svd'"),
        (lambda p: edit_config(p, method=None), "'method' should be str"),
        (lambda p: edit_config(p, output_dim=7), "components_ has shape"),
        (lambda p: edit_config(p, input_dim=30), "impossible|has shape"),
        (lambda p: edit_config(p, params={"dim": 6, "colour": "red"}), "unknown parameter"),
        (lambda p: edit_config(p, params={"dim": -6}), "'dim' parameter of PCA must be"),
        (lambda p: edit_config(p, version=99), "newer demitasse"),
        (lambda p: edit_config(p, learned={}), "lacks total_variance_"),
    ],
)
def test_damaged_saves_raise_one_line_errors(saved, damage, match):
    damage(saved)
    with pytest.raises(CompressorError, match=match) as exc:
        load_compressor(saved)
    assert_one_line(exc)


def test_state_with_missing_or_extra_arrays(saved, x):
    from safetensors.numpy import load_file, save_file

    arrays = load_file(saved / "state.safetensors")
    arrays["extra"] = np.zeros(3)
    del arrays["mean_"]
    save_file(arrays, saved / "state.safetensors")
    with pytest.raises(CompressorError, match="missing mean_, unexpected extra") as exc:
        load_compressor(saved)
    assert_one_line(exc)


def test_missing_or_non_directory(tmp_path):
    with pytest.raises(CompressorError, match="no saved compressor"):
        load_compressor(tmp_path / "nothing")
    (tmp_path / "f").write_text("x")
    with pytest.raises(CompressorError, match="not a directory"):
        load_compressor(tmp_path / "f")
    with pytest.raises(CompressorError, match="no saved quantizer"):
        load_quantizer(tmp_path / "nothing")


# ---- quantisers ------------------------------------------------------------------------------


def test_float32_quantizer_is_identity_cosine(x):
    q = Float32Quantizer()
    codes = q.quantize(x)
    np.testing.assert_array_equal(codes, x)
    a, b = x[:200], x[200:]
    expected = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    sims = q.similarity(q.quantize(a), q.quantize(b))
    assert sims.dtype == np.float64 and sims.shape == (200,)
    np.testing.assert_allclose(sims, expected, rtol=1e-5)
    zero = np.zeros((1, D), np.float32)
    assert q.similarity(zero, x[:1])[0] == 0.0


def test_int8_codes_and_similarity():
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((2000, 64)).astype(np.float32)
    q = Int8Quantizer().fit(calib)
    a = rng.standard_normal((500, 64)).astype(np.float32)
    b = a + rng.standard_normal((500, 64)).astype(np.float32) * rng.uniform(0.2, 2, (500, 1))
    ca, cb = q.quantize(a), q.quantize(b)
    assert ca.dtype == np.int8 and ca.shape == (500, 64)
    assert ca.min() >= -128 and ca.max() <= 127
    cos = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    sims = q.similarity(ca, cb)
    assert sims.dtype == np.float64
    assert spearmanr(sims, cos).statistic > 0.95
    # Calibration extremes map to the ends of the code range (the maximum lands in bucket 254
    # or 255, as float32 rounds (hi - lo) / step either side of 255).
    ends = q.quantize(np.stack([calib.min(axis=0), calib.max(axis=0)]))
    assert (ends[0] == -128).all() and (ends[1] >= 126).all()


def test_int8_formula_and_clipping():
    calib = np.array([[0.0, -1.0], [1.0, 1.0]], np.float32)
    q = Int8Quantizer().fit(calib)
    x = np.array([[0.5, 0.0], [5.0, -9.0], [0.0, 1.0], [0.999, 0.99]], np.float32)
    step = np.float32([1, 2]) / np.float32(255)
    expected = np.clip(np.floor((x - np.float32([0, -1])) / step), 0, 255) - 128
    np.testing.assert_array_equal(q.quantize(x), expected.astype(np.int8))
    assert q.quantize(x).tolist() == [[-1, -1], [127, -128], [-128, 126], [126, 125]]


def test_int8_percentile_ignores_outliers():
    rng = np.random.default_rng(1)
    calib = rng.standard_normal((5000, 8)).astype(np.float32)
    calib[0] = 1000.0
    mm = Int8Quantizer().fit(calib)
    pc = Int8Quantizer(calibration="percentile", percentile=99.0).fit(calib)
    assert (mm.hi_ == 1000.0).all()
    np.testing.assert_allclose(pc.hi_, np.percentile(calib, 99.0, axis=0), rtol=1e-5)
    np.testing.assert_allclose(pc.lo_, np.percentile(calib, 1.0, axis=0), rtol=1e-5)
    assert np.unique(pc.quantize(calib[1:])).size > np.unique(mm.quantize(calib[1:])).size


def test_int8_constant_dimension_codes_to_zero():
    calib = np.column_stack([np.full(10, 3.0), np.arange(10.0), np.full(10, -3e9)])
    codes = Int8Quantizer().fit(calib.astype(np.float32)).quantize(calib)
    assert (codes[:, 0] == 0).all() and (codes[:, 2] == 0).all()


def test_quantizers_accept_prefixes_but_not_wider_input(x):
    for q in all_quantizers():
        q.fit(x)
        prefix = q.quantize(x[:, :10])
        assert prefix.shape == (len(x), q.code_width(10))
        with pytest.raises(CompressorError, match="fitted on 24") as exc:
            q.quantize(np.hstack([x, x[:, :1]]))
        assert_one_line(exc)


def test_int8_prefix_uses_first_ranges(x):
    q = Int8Quantizer().fit(x)
    np.testing.assert_array_equal(q.quantize(x[:, :10]), q.quantize(x)[:, :10])


def test_quantize_needs_fit_when_stateful(x):
    for q in (Int8Quantizer(), BinaryQuantizer(threshold="mean")):
        with pytest.raises(CompressorError, match="not fitted"):
            q.quantize(x)
    assert BinaryQuantizer().quantize(x).shape == (len(x), 3)


def test_quantize_chunked_and_into_out(x):
    for q in all_quantizers():
        q.fit(x)
        full = q.quantize(x)
        np.testing.assert_array_equal(q.quantize(x, chunk_rows=7), full)
        out = np.empty_like(full)
        assert q.quantize(x, out=out) is out
        np.testing.assert_array_equal(out, full)


def naive_binary(x: np.ndarray, threshold: np.ndarray | float = 0.0) -> list[list[int]]:
    return [
        [int(v > t) for v, t in zip(row, np.broadcast_to(threshold, row.shape), strict=True)]
        for row in x
    ]


@pytest.mark.parametrize("d", [1, 7, 8, 9, 13, 24])
def test_binary_packing_and_hamming(d):
    rng = np.random.default_rng(d)
    a = rng.standard_normal((50, d)).astype(np.float32)
    b = rng.standard_normal((50, d)).astype(np.float32)
    q = BinaryQuantizer()
    ca, cb = q.quantize(a), q.quantize(b)
    assert ca.dtype == np.uint8 and ca.shape == (50, -(-d // 8))
    bits_a, bits_b = naive_binary(a), naive_binary(b)
    np.testing.assert_array_equal(np.unpackbits(ca, axis=1, count=d), bits_a)
    # Bit counts: padding bits stay 0.
    assert np.unpackbits(ca, axis=1).sum() == sum(map(sum, bits_a))
    expected = [
        d - sum(x != y for x, y in zip(ra, rb, strict=True))
        for ra, rb in zip(bits_a, bits_b, strict=True)
    ]
    np.testing.assert_array_equal(q.similarity(ca, cb, dim=d), expected)
    # Fitted at width d, the bit count is known without dim=.
    q.fit(a)
    np.testing.assert_array_equal(q.similarity(ca, cb), expected)
    np.testing.assert_array_equal(q.similarity(ca, ca), np.full(50, d))


def test_binary_mean_threshold(x):
    q = BinaryQuantizer(threshold="mean").fit(x)
    np.testing.assert_allclose(q.thresholds_, x.mean(axis=0), rtol=1e-5)
    codes = q.quantize(x)
    np.testing.assert_array_equal(
        np.unpackbits(codes, axis=1, count=D), naive_binary(x, x.mean(axis=0).astype(np.float32))
    )
    # Data with a large offset: "zero" gives mostly ones; "mean" gives balanced bits.
    assert np.unpackbits(BinaryQuantizer().quantize(x), axis=1, count=D).mean() > 0.9
    assert 0.3 < np.unpackbits(codes, axis=1, count=D).mean() < 0.7


def test_similarity_checks_codes(x):
    q = Int8Quantizer().fit(x)
    codes = q.quantize(x)
    with pytest.raises(CompressorError, match="dtype"):
        q.similarity(x, x)
    with pytest.raises(CompressorError, match="same shape"):
        q.similarity(codes, codes[:10])
    with pytest.raises(CompressorError, match="does not match"):
        BinaryQuantizer().similarity(codes.view(np.uint8), codes.view(np.uint8), dim=5)


def test_bytes_per_vector():
    assert Float32Quantizer().bytes_per_vector(384) == 1536
    assert Int8Quantizer().bytes_per_vector(384) == 384
    assert BinaryQuantizer().bytes_per_vector(384) == 48
    assert BinaryQuantizer().bytes_per_vector(385) == 49
    assert BinaryQuantizer().bytes_per_vector(1) == 1
    with pytest.raises(CompressorError):
        Int8Quantizer().bytes_per_vector(0)


def test_compressor_then_quantizer_pipeline(x):
    pca = PCA(dim=16).fit(x)
    q = Int8Quantizer().fit(pca.transform(x))
    small = pca.transform(x, dim=8)
    codes = q.quantize(small)
    assert codes.shape == (len(x), 8)
    assert q.similarity(codes[:200], codes[200:]).shape == (200,)
