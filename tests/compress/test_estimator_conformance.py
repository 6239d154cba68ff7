# ruff: noqa: N806  (scikit-learn convention: matrices are capitalised)
"""Every registered compressor is a scikit-learn transformer and keeps demitasse's contract.

Two batteries run over an instance of every name in ``compressor_names()``: scikit-learn's
estimator checks (small data, small hyperparameters) and the project's own contract
(Matryoshka prefixes, chunking, memmaps, bit-exact save/load, fit leaving hyperparameters
alone). Registering a compressor without adding it to both tables fails
``test_every_registered_compressor_is_covered``. Synthetic data only.
"""

from __future__ import annotations

import copy
import json
from functools import cache

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import check_param_validation, parametrize_with_checks

from demitasse.compress import (
    LLE,
    MCR2,
    PCA,
    SMEC,
    Compressor,
    Isomap,
    MatryoshkaAdaptor,
    Pooler,
    RandomProjection,
    SMECVariant,
    TrainingSettings,
    Truncate,
    compressor_names,
    load_compressor,
    make_compressor,
)
from demitasse.compress.base import built_compressor_names
from demitasse.errors import CompressorError, DemitasseError
from tests.helpers import assert_close32, correlated

D = 24
#: Learned compressors: a tiny network, two epochs, on the CPU.
TRAINING = TrainingSettings(batch_size=16, max_epochs=2, device="cpu", progress=False)
FAST = {"hidden_dim": 8, "training": TRAINING}


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread: None) -> None:
    """Every test here runs on one torch thread."""


# ---- scikit-learn's estimator checks ---------------------------------------------------------

#: One instance per registered name, for data of 1-10 columns and 10-60 rows: dim=None (as
#: wide as the data allows) and few neighbours.
CHECKED: dict[str, Compressor] = {
    "truncate": Truncate(),
    "pca": PCA(),
    "random": RandomProjection(seed=3),
    "isomap": Isomap(n_neighbors=5),
    "lle": LLE(n_neighbors=5),
    "adaptor": MatryoshkaAdaptor(min_dim=2, **FAST),
    "smec": SMEC(min_dim=2, topk=3, variant=SMECVariant(memory_size=64), **FAST),
    "mcr2": MCR2(dim=None, n_clusters=2, **FAST),
}
_ONE_CLUSTER = (
    "the check sets n_clusters=1 (it takes any n_clusters for a clustering size), which MCR2 "
    "rejects: with one cluster the partition's coding rate is the whole rate, and the "
    "objective no longer clusters"
)
_MCR2_EXPECTED_FAILURES = dict.fromkeys(
    (
        "check_dont_overwrite_parameters",
        "check_fit2d_1feature",
        "check_fit2d_1sample",
        "check_fit2d_predict1d",
        "check_methods_subset_invariance",
    ),
    _ONE_CLUSTER,
)


def expected_failed_checks(estimator: Compressor) -> dict[str, str]:
    return {"mcr2": _MCR2_EXPECTED_FAILURES}.get(estimator.method, {})


@parametrize_with_checks(
    [CHECKED[name] for name in compressor_names() if name in CHECKED],
    expected_failed_checks=expected_failed_checks,
    xfail_strict=True,  # a check that starts passing must leave the lists above
)
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_invalid_hyperparameters_fail_fit_as_scikit_learn_and_demitasse_errors(name):
    # scikit-learn's own check: every parameter has a constraint, and fit rejects values
    # outside it with InvalidParameterError. Ours are also one-line CompressorErrors.
    estimator = CHECKED[name]
    check_param_validation(type(estimator).__name__, estimator)
    with pytest.raises(CompressorError) as info:
        clone(estimator).set_params(dim=0).fit(correlated(40))
    assert isinstance(info.value, InvalidParameterError)
    assert isinstance(info.value, DemitasseError)  # the CLI's exit 2
    assert "\n" not in str(info.value)


def test_make_compressor_rejects_bad_hyperparameters_at_once():
    with pytest.raises(CompressorError, match=r"'abtt' parameter of PCA must be an int in the"):
        make_compressor("pca", dim=8, abtt=-1)
    with pytest.raises(CompressorError, match="has no parameter 'dimension'"):
        make_compressor("pca").set_params(dimension=8)


# ---- demitasse's contract --------------------------------------------------------------------

X = correlated()

#: Unfitted compressors for the contract, at least one per registered name. A pooler is not
#: fitted but built from a head (see ``fitted``); ``Pooler(dim=8)`` says how wide.
CONTRACT: list[Compressor] = [
    Truncate(dim=16),
    PCA(dim=16),
    PCA(dim=12, whiten=True, abtt=2),
    RandomProjection(dim=16, seed=3),
    Isomap(dim=8, n_neighbors=8),
    LLE(dim=8, n_neighbors=8),
    MatryoshkaAdaptor(dim=16, min_dim=4, **FAST),
    SMEC(dim=16, min_dim=4, topk=5, variant=SMECVariant(memory_size=128), **FAST),
    MCR2(dim=8, n_clusters=3, **FAST),
    Pooler(dim=8),
]
IDS = [repr(c) for c in CONTRACT]


def fit(compressor: Compressor, data: np.ndarray, fit_data: str | None = None) -> Compressor:
    """``compressor.fit``, except that a pooler is built from a random head of its width."""
    if isinstance(compressor, Pooler):
        rng = np.random.default_rng(7)
        weight = rng.standard_normal((compressor.dim, data.shape[1])) / np.sqrt(data.shape[1])
        return Pooler.from_head(
            weight,
            0.1 * rng.standard_normal(compressor.dim),
            compressor.activation,
            compressor.normalize_input,
            fit_data=fit_data,
        )
    return compressor.fit(data, fit_data=fit_data)


@cache
def fitted(index: int) -> Compressor:
    """``CONTRACT[index]`` fitted on ``X`` (shared: tests only transform and save it)."""
    return fit(clone(CONTRACT[index]), X, fit_data="synthetic")


def prefix_of(compressor: Compressor, k: int) -> int:
    """The width whose output ``transform(dim=k)`` is the first k columns of: the full output,
    except for SMEC, whose stages are chains of their own (a width between two stages is a
    prefix of the wider one)."""
    if isinstance(compressor, SMEC):
        return min(width for width in compressor.stage_dims_ if width >= k)
    return compressor.output_dim_


def test_every_registered_compressor_is_covered():
    assert sorted(CHECKED) == compressor_names(), "add the new compressor to CHECKED"
    assert {c.method for c in CHECKED.values()} == set(CHECKED)
    # A built compressor (a pooler) is no estimator: CONTRACT only, built by ``fit`` above.
    assert "pooler" not in compressor_names() and built_compressor_names() == ["pooler"]
    assert sorted({c.method for c in CONTRACT}) == sorted(
        compressor_names() + built_compressor_names()
    ), "... and to CONTRACT"


@pytest.mark.parametrize("index", range(len(CONTRACT)), ids=IDS)
def test_matryoshka_prefix(index):
    compressor = fitted(index)
    full = compressor.transform(X)
    assert full.shape == (len(X), compressor.output_dim_) and full.dtype == np.float32
    if not compressor.matryoshka:
        with pytest.raises(CompressorError, match="only produces dim"):
            compressor.transform(X, dim=compressor.output_dim_ - 1)
        return
    for k in sorted({1, 3, 5, compressor.output_dim_ // 2, compressor.output_dim_}):
        wider = compressor.transform(X, dim=prefix_of(compressor, k))
        assert_close32(compressor.transform(X, dim=k), wider[:, :k])


@pytest.mark.parametrize("index", range(len(CONTRACT)), ids=IDS)
def test_chunked_transform_equals_one_chunk(index):
    compressor = fitted(index)
    assert_close32(compressor.transform(X, chunk_rows=7), compressor.transform(X))
    assert compressor.transform(X[:0]).shape == (0, compressor.output_dim_)


@pytest.mark.parametrize("index", range(len(CONTRACT)), ids=IDS)
def test_memmap_in_and_out(index, tmp_path):
    compressor = fitted(index)
    np.save(tmp_path / "emb.npy", X)
    mm = np.load(tmp_path / "emb.npy", mmap_mode="r")
    expected = compressor.transform(X)
    assert_close32(compressor.transform(mm, chunk_rows=50), expected)
    k = prefix_of(compressor, 4) if compressor.matryoshka else compressor.output_dim_
    out = np.lib.format.open_memmap(
        tmp_path / "out.npy", mode="w+", dtype=np.float32, shape=(len(X), k)
    )
    result = compressor.transform(mm, dim=k, chunk_rows=64, out=out)
    assert result is out
    out.flush()
    assert_close32(np.load(tmp_path / "out.npy"), compressor.transform(X, dim=k))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("index", range(len(CONTRACT)), ids=IDS)
def test_fit_on_a_memmap_equals_fit_in_memory(index, dtype, tmp_path):
    if isinstance(CONTRACT[index], Pooler):
        pytest.skip("a pooler is not fitted on vectors")
    data = X.astype(dtype)
    np.save(tmp_path / "emb.npy", data)
    mm = np.load(tmp_path / "emb.npy", mmap_mode="r")
    from_disk = clone(CONTRACT[index]).fit(mm, fit_data="memmap")
    in_memory = clone(CONTRACT[index]).fit(data)
    assert_close32(from_disk.transform(data), in_memory.transform(data))


@pytest.mark.parametrize("index", range(len(CONTRACT)), ids=IDS)
def test_save_load_is_bit_exact(index, tmp_path):
    compressor = fitted(index)
    compressor.save(tmp_path / "c")
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [
        ".demitasse-output.json",
        "config.json",
        "state.safetensors",
    ]
    config = json.loads((tmp_path / "c" / "config.json").read_text())
    assert config["method"] == compressor.method
    assert config["params"] == compressor.metadata["params"]  # a group as a dict of its fields
    assert list(config["params"]) == compressor._param_names()  # in __init__ order
    assert config["input_dim"] == D and config["output_dim"] == compressor.output_dim_
    assert config["matryoshka"] is compressor.matryoshka and config["fit_data"] == "synthetic"
    assert config["n_fit_samples"] == compressor.n_fit_samples_ and config["demitasse_version"]

    loaded = load_compressor(tmp_path / "c")
    assert type(loaded) is type(compressor)
    assert loaded.get_params() == compressor.get_params()
    assert loaded.metadata == compressor.metadata
    dims = {None, prefix_of(compressor, 3), 3} if compressor.matryoshka else {None}
    for dim in dims:
        np.testing.assert_array_equal(loaded.transform(X, dim), compressor.transform(X, dim))
    again = type(compressor).load(tmp_path / "c")
    np.testing.assert_array_equal(again.transform(X), compressor.transform(X))


@pytest.mark.parametrize("index", range(len(CONTRACT)), ids=IDS)
def test_fit_never_changes_a_hyperparameter(index):
    compressor = clone(CONTRACT[index])
    before = copy.deepcopy(compressor.get_params())
    if isinstance(compressor, Pooler):
        with pytest.raises(CompressorError, match="from_head"):
            compressor.fit(X)
    else:
        compressor.fit(X, fit_data="synthetic")
    after = compressor.get_params()
    assert after == before
    assert {k: type(v) for k, v in after.items()} == {k: type(v) for k, v in before.items()}


# ---- in scikit-learn pipelines -----------------------------------------------------------------


@pytest.fixture(scope="module")
def labelled() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(
        n_samples=300, n_features=D, n_informative=6, n_redundant=4, random_state=0
    )


def test_clone_gives_an_unfitted_compressor_with_the_same_hyperparameters():
    for index in range(len(CONTRACT)):
        original = fitted(index)
        copied = clone(original)
        assert type(copied) is type(original) and not copied.is_fitted
        assert copied.get_params() == original.get_params()


def test_a_compressor_is_a_pipeline_step(labelled):
    X_cls, y = labelled
    pipe = Pipeline([("c", make_compressor("pca", dim=8)), ("lr", LogisticRegression())])
    pipe.fit(X_cls, y, c__fit_data="synthetic")  # fit keywords reach the compressor
    assert pipe.named_steps["c"].fit_data_ == "synthetic"
    assert pipe.score(X_cls, y) > 0.7
    assert pipe[:-1].transform(X_cls).shape == (len(X_cls), 8)
    assert list(pipe[:-1].get_feature_names_out()) == [f"pca{i}" for i in range(8)]


def test_grid_search_tunes_the_output_width(labelled):
    X_cls, y = labelled
    pipe = Pipeline([("c", make_compressor("pca", dim=8)), ("lr", LogisticRegression())])
    search = GridSearchCV(pipe, {"c__dim": [1, 8]}, cv=3).fit(X_cls, y)
    assert search.best_params_ == {"c__dim": 8}
    assert search.best_estimator_.named_steps["c"].output_dim_ == 8
    assert pipe.named_steps["c"].dim == 8 and not pipe.named_steps["c"].is_fitted


def test_grid_search_tunes_a_grouped_setting(labelled):
    X_cls, y = labelled
    adaptor = MatryoshkaAdaptor(dim=4, min_dim=4, **FAST)
    pipe = Pipeline([("c", adaptor), ("lr", LogisticRegression())])
    grid = {"c__training": [TRAINING, TrainingSettings(max_epochs=1, device="cpu")]}
    search = GridSearchCV(pipe, grid, cv=2).fit(X_cls, y)
    assert search.best_params_["c__training"] in grid["c__training"]
    assert adaptor.training is TRAINING and not adaptor.is_fitted
