# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Learned compressors on synthetic data: losses, S-XBM queue, ADS, SMRL freezing, persistence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from demitasse.compress.adaptor import MatryoshkaAdaptor
from demitasse.compress.base import load_compressor
from demitasse.compress.smec import SMEC, EmbeddingMemory
from demitasse.errors import CompressorError, DataError
from demitasse.losses import (
    cosent_loss,
    pair_similarity_loss,
    pairwise_similarity_loss,
    rank_loss,
    topk_similarity_loss,
)

FAST = {"max_epochs": 2, "batch_size": 128, "hidden_dim": 32, "device": "cpu"}


def correlated(n: int = 600, d: int = 24, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scales = np.linspace(3.0, 0.2, d)
    return (rng.normal(size=(n, d)) * scales + 0.5).astype(np.float32)


def stage_state(model: SMEC, stage: int) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.network_[stage].state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_similarity_losses_measure_what_they_claim() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(16, 8, generator=gen)
    assert pairwise_similarity_loss(x, x) == pytest.approx(0.0, abs=1e-6)
    assert topk_similarity_loss(x, 3 * x, 4) == pytest.approx(0.0, abs=1e-6)
    assert pairwise_similarity_loss(x, torch.randn(16, 8, generator=gen)) > 0.1

    scores = torch.arange(16, dtype=torch.float32)
    anchor = torch.randn(1, 8, generator=gen).repeat(16, 1)
    direction = torch.randn(1, 8, generator=gen).repeat(16, 1)
    mixes = torch.linspace(0, 1, 16).unsqueeze(1)
    agreeing = anchor * mixes + direction * (1 - mixes)
    assert cosent_loss(anchor, agreeing, scores) < cosent_loss(anchor, agreeing, scores.flip(0))

    queries = torch.randn(8, 8, generator=gen)
    assert rank_loss(queries, queries) < rank_loss(queries, queries.roll(1, dims=0))


def test_memory_is_fifo_and_holds_no_gradients() -> None:
    memory = EmbeddingMemory(5)
    weight = torch.ones(1, requires_grad=True)
    first = torch.arange(3.0).unsqueeze(1) * weight
    memory.push(first, first * 2)
    memory.push(torch.arange(3.0, 7.0).unsqueeze(1) * weight, torch.zeros(4, 1))
    values, doubled = memory.contents()
    assert values.squeeze(1).tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]  # 0 and 1 were evicted
    assert doubled.squeeze(1).tolist() == [4.0, 0.0, 0.0, 0.0, 0.0]
    assert len(memory) == 5
    assert not values.requires_grad and values.grad_fn is None
    memory.push(torch.arange(10.0, 17.0).unsqueeze(1), torch.zeros(7, 1))  # more than capacity
    assert memory.contents()[0].squeeze(1).tolist() == [12.0, 13.0, 14.0, 15.0, 16.0]


def test_ads_selects_the_planted_informative_dimensions() -> None:
    rng = np.random.default_rng(1)
    n, d = 2000, 24
    planted = [3, 10, 17, 21]
    X = rng.normal(scale=0.2, size=(n, d))
    centres = rng.normal(scale=3.0, size=(6, len(planted)))
    X[:, planted] = centres[rng.integers(0, 6, n)] + rng.normal(scale=0.3, size=(n, 4))
    # A uniform prior and no rotation: the planted dims must be found by training alone.
    settings = FAST | {"max_epochs": 4, "batch_size": 64, "patience": 5}
    model = SMEC(dim=4, min_dim=4, rotate=False, ads_prior="uniform", xbm=False, **settings)
    model.fit(X.astype(np.float32))
    assert sorted(model.selected_dims(0).tolist()) == planted


def test_smrl_freezes_finished_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    X = correlated()
    snapshots: list[list[dict[str, torch.Tensor]]] = []
    original = SMEC._train_group

    def recording(self: SMEC, frozen: list, trained: list, *tensors: torch.Tensor) -> None:
        snapshots.append([stage_state(self, i) for i in range(len(frozen))])
        original(self, frozen, trained, *tensors)

    monkeypatch.setattr(SMEC, "_train_group", recording)
    model = SMEC(dim=16, min_dim=4, **FAST).fit(X)
    assert model.stage_dims_ == [16, 8, 4]
    assert [len(s) for s in snapshots] == [0, 1, 2]  # one stage trained at a time
    for stage, snapshot in enumerate(snapshots[2]):
        assert same(snapshot, stage_state(model, stage))
    assert same(snapshots[1][0], stage_state(model, 0))


def test_a_later_stage_starts_as_the_prefix_of_the_previous_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = SMEC._train_group

    def recording(self: SMEC, frozen: list, trained: list, *tensors: torch.Tensor) -> None:
        original(self, frozen, trained, *tensors)
        H, U, _ = tensors
        if frozen:
            # Re-initialise a copy of the stage just trained: untrained, it must pass through.
            stage = self._build_network()[len(frozen)]
            self._init_stage(stage, H, passthrough=True)
            with torch.no_grad():
                starts.append((stage.eval()(H, U), H[:, : stage.d_out]))

    monkeypatch.setattr(SMEC, "_train_group", recording)
    SMEC(dim=16, min_dim=4, xbm=False, nested_stages=True, **FAST).fit(correlated())
    assert len(starts) == 2
    for output, prefix in starts:
        torch.testing.assert_close(output, prefix)


def test_parallel_training_trains_all_stages_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = SMEC._train_group

    def recording(self: SMEC, frozen: list, trained: list, *tensors: torch.Tensor) -> None:
        calls.append(len(trained))
        original(self, frozen, trained, *tensors)

    monkeypatch.setattr(SMEC, "_train_group", recording)
    SMEC(dim=16, min_dim=4, smrl=False, ads=False, xbm=False, **FAST).fit(correlated())
    assert calls == [3]


@pytest.mark.parametrize("refresh", [False, True])
def test_memory_holds_stale_outputs_or_row_indices(
    refresh: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushed: list[tuple[torch.Tensor, ...]] = []
    original = EmbeddingMemory.push

    def recording(self: EmbeddingMemory, *tensors: torch.Tensor) -> None:
        pushed.append(tensors)
        original(self, *tensors)

    monkeypatch.setattr(EmbeddingMemory, "push", recording)
    settings = FAST | {"memory_size": 300, "batch_size": 64}
    SMEC(dim=8, min_dim=4, refresh_memory=refresh, nested_stages=refresh, **settings).fit(
        correlated()
    )
    embedded, *payload = pushed[-1]
    assert torch.allclose(embedded.norm(dim=1), torch.ones(len(embedded)))
    if refresh:  # fit-row indices: neighbours are compressed again by the current stages
        assert len(payload) == 1 and payload[0].dtype == torch.int64
    else:  # compressed vectors as they were when stored
        assert [p.shape[1] for p in payload] == [4] and payload[0].is_floating_point()


@pytest.mark.parametrize(
    "model",
    [MatryoshkaAdaptor(dim=16, min_dim=4, **FAST), SMEC(dim=16, min_dim=4, **FAST)],
    ids=["adaptor", "smec"],
)
def test_save_load_round_trip(model: MatryoshkaAdaptor | SMEC, tmp_path: Path) -> None:
    X = correlated()
    model.fit(X, fit_data="synthetic")
    model.save(tmp_path / "c")
    loaded = load_compressor(tmp_path / "c")
    assert type(loaded) is type(model)
    for dim in (16, 8, 5, 4):
        np.testing.assert_array_equal(loaded.transform(X, dim), model.transform(X, dim))
    assert loaded.metadata["fit_data"] == "synthetic"


def test_extend_resumes_a_loaded_compressor_without_retraining(tmp_path: Path) -> None:
    X = correlated()
    SMEC(dim=16, min_dim=8, **FAST).fit(X).save(tmp_path / "c")
    model = load_compressor(tmp_path / "c")
    assert isinstance(model, SMEC)
    before = [stage_state(model, i) for i in range(2)]
    at_8 = model.transform(X, 8)
    model.extend(X, 2)
    assert model.stage_dims_ == [16, 8, 4, 2]
    assert all(same(b, stage_state(model, i)) for i, b in enumerate(before))
    np.testing.assert_array_equal(model.transform(X, 8), at_8)
    assert model.transform(X, 2).shape == (len(X), 2)
    model.save(tmp_path / "d")
    np.testing.assert_array_equal(
        load_compressor(tmp_path / "d").transform(X, 2), model.transform(X, 2)
    )
    with pytest.raises(CompressorError, match="min_dim"):
        model.extend(X, 4)


def test_distilled_width_networks_follow_the_chain_they_were_fitted_to(tmp_path: Path) -> None:
    X = correlated(n=1500)
    model = SMEC(dim=16, min_dim=4, inference="distilled", **FAST).fit(X)
    chain = SMEC(dim=16, min_dim=4, inference="chain", **FAST).fit(X)
    for dim in (16, 12, 8, 4):
        distilled, reference = model.transform(X, dim), model.chain_transform(X, dim)
        # The chain trains as without distillation (the width networks are fitted after it).
        np.testing.assert_allclose(reference, chain.transform(X, dim), atol=1e-5)
        error = np.linalg.norm(distilled - reference) / np.linalg.norm(reference)
        assert error < 0.05, (dim, error)
        assert not np.array_equal(distilled, reference)  # a separate network, not the chain
    assert len(model.network_) == 2 * len(model.stage_dims_)
    model.save(tmp_path / "c")
    loaded = load_compressor(tmp_path / "c")
    np.testing.assert_array_equal(loaded.transform(X, 4), model.transform(X, 4))
    model.extend(X, 2)
    assert len(model.network_) == 2 * len(model.stage_dims_) == 8
    error = np.linalg.norm(model.transform(X, 2) - model.chain_transform(X, 2))
    assert error < 0.05 * np.linalg.norm(model.chain_transform(X, 2))
    with pytest.raises(CompressorError, match="features"):
        model.chain_transform(X[:, :5], 4)


def test_supervision_is_used_and_checked() -> None:
    X = correlated()
    rng = np.random.default_rng(2)
    pairs = (X[:50], X[50:100])
    scores = rng.random(50)
    model = MatryoshkaAdaptor(dim=8, min_dim=4, **FAST)
    model.fit(X, pairs=pairs, scores=scores, queries=X[100:140], documents=X[140:180])
    assert model.transform(X, 4).shape == (len(X), 4)
    with pytest.raises(DataError, match="scores"):
        model.fit(X, pairs=pairs)
    with pytest.raises(DataError, match="features"):
        model.fit(X, queries=X[:10, :5], documents=X[:10, :5])
    with pytest.raises(CompressorError, match="unknown fit"):
        model.fit(X, labels=scores)


@pytest.mark.parametrize("smrl", [True, False], ids=["smrl", "parallel"])
def test_gradient_recording_leaves_the_fit_unchanged(smrl: bool) -> None:
    X = correlated()
    plain = SMEC(dim=16, min_dim=4, smrl=smrl, **FAST).fit(X)
    logged = SMEC(dim=16, min_dim=4, smrl=smrl, record_gradients=True, **FAST).fit(X)
    for dim in (16, 8, 4):
        np.testing.assert_array_equal(logged.transform(X, dim), plain.transform(X, dim))
    assert not hasattr(plain, "history_")
    history = logged.history_
    n_trained = 1 if smrl else 3  # modules trained by each run_training call
    assert len({entry["run"] for entry in history}) == (3 if smrl else 1)
    assert all(len(entry["grad_sq_norm"]) == n_trained for entry in history)
    windows = [entry["grad_variance"] for entry in history if "grad_variance" in entry]
    assert windows and all(v >= -1e-6 for variances in windows for v in variances)
    assert all(entry["grad_sq_norm"][0] > 0 for entry in history)


def related_copies(X: np.ndarray, seed: int = 3) -> np.ndarray:
    """Copies of X that differ only in the low-variance tail, which a short prefix drops."""
    rng = np.random.default_rng(seed)
    copies = X.copy()
    copies[:, -8:] += rng.normal(scale=2.0, size=(len(X), 8)).astype(np.float32)
    return copies


def related_gap(model: MatryoshkaAdaptor | SMEC, A: np.ndarray, B: np.ndarray, dim: int) -> float:
    def cosines(U: np.ndarray, V: np.ndarray) -> np.ndarray:
        return (U * V).sum(1) / (np.linalg.norm(U, axis=1) * np.linalg.norm(V, axis=1))

    a, b = model.transform(A, dim), model.transform(B, dim)
    return float(np.abs(cosines(a, b) - cosines(A, B)).mean())


def test_pair_similarity_loss_is_the_cosine_gap() -> None:
    gen = torch.Generator().manual_seed(0)
    left, right = torch.randn(10, 6, generator=gen), torch.randn(10, 6, generator=gen)
    cos = torch.nn.functional.cosine_similarity(left, right, dim=-1)
    assert pair_similarity_loss(left, right, cos) == pytest.approx(0.0, abs=1e-6)
    assert pair_similarity_loss(left, right, cos + 0.25) == pytest.approx(0.25, abs=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: MatryoshkaAdaptor(dim=8, min_dim=4, **kw),
        lambda **kw: SMEC(dim=8, min_dim=4, nested_stages=True, refresh_memory=True, **kw),
    ],
    ids=["adaptor", "smec"],
)
def test_related_pairs_keep_their_original_cosine(make) -> None:  # type: ignore[no-untyped-def]
    X = correlated()
    A, B = X[:300], related_copies(X[:300])
    settings = {**FAST, "max_epochs": 10, "patience": 11, "learning_rate": 1e-2}
    plain = make(**settings).fit(X)
    related = make(related_weight=4.0, **settings).fit(X, related_pairs=(A, B))
    # Truncation keeps the high-variance head, where A and B agree, so the plain fit maps each
    # pair almost onto one point; the related-pair term has to restore their original cosine.
    assert related_gap(related, A, B, 4) < 0.6 * related_gap(plain, A, B, 4)


def test_related_pairs_are_checked() -> None:
    X = correlated()
    model = SMEC(dim=8, min_dim=4, **FAST)
    with pytest.raises(DataError, match="related_pairs"):
        model.fit(X, related_pairs=X[:10])
    with pytest.raises(DataError, match="related_pairs"):
        model.fit(X, related_pairs=(X[:10], X[:9]))
    with pytest.raises(DataError, match="related_pairs"):
        model.fit(X, related_pairs=(X[:3], X[3:6]))
    for weight in ("related_weight", "pairwise_weight"):
        with pytest.raises(CompressorError, match=weight):
            SMEC(dim=8, min_dim=4, **{weight: -1.0}).fit(X)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MatryoshkaAdaptor(dim=8, min_dim=4, pairwise_weight=0.0, **FAST),
        lambda: SMEC(dim=8, min_dim=4, pairwise_weight=0.0, **FAST),
        lambda: SMEC(dim=8, min_dim=4, pairwise_weight=0.0, xbm=False, **FAST),
        lambda: SMEC(dim=8, min_dim=4, pairwise_weight=0.25, nested_stages=True, **FAST),
    ],
    ids=["adaptor", "smec", "smec-no-xbm", "smec-nested"],
)
def test_the_all_pairs_term_can_be_weighted_down_or_off(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    X = correlated()
    model = make().fit(X, related_pairs=(X[:50], related_copies(X[:50])))
    reduced = model.transform(X, 4)
    assert reduced.shape == (len(X), 4) and np.isfinite(reduced).all()
    default = type(model)(dim=8, min_dim=4, **FAST).fit(X)
    assert not np.array_equal(default.transform(X, 4), reduced)
    model.save(tmp_path / "c")
    loaded = load_compressor(tmp_path / "c")
    assert loaded.get_params()["pairwise_weight"] == model.pairwise_weight
    np.testing.assert_array_equal(loaded.transform(X, 4), reduced)


@pytest.mark.parametrize("patience", [1, 2])
def test_patience_counts_the_epochs_without_improvement_before_stopping(patience: int) -> None:
    # At learning rate 0 (and no ADS logits, whose steps have their own rate) the weights never
    # move, so the first epoch's validation loss is never beaten: training must stop after
    # 1 + patience epochs, as the shared loop counts patience.
    model = SMEC(dim=8, min_dim=8, ads=False, learning_rate=0.0, record_gradients=True, **FAST)
    model.set_params(max_epochs=10, patience=patience).fit(correlated())
    assert sorted({entry["epoch"] for entry in model.history_}) == list(range(1 + patience))


def test_a_compressor_saved_in_another_format_version_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    SMEC(dim=8, min_dim=4, patience=3, **FAST).fit(correlated()).save(tmp_path / "c")
    assert load_compressor(tmp_path / "c").get_params()["patience"] == 3
    config = json.loads((tmp_path / "c" / "config.json").read_text())
    assert config["version"] == SMEC.version == 2
    config["version"] = 1
    (tmp_path / "c" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CompressorError) as caught:
        load_compressor(tmp_path / "c")
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / "c") in message
    assert "smec format version 1; this demitasse reads version 2" in message


def test_max_normalized_steps_move_the_largest_coordinate_by_the_learning_rate() -> None:
    from demitasse.compress.optimisers import MaxNormalizedSGD, compressor_optimisers

    logits = torch.nn.Parameter(torch.zeros(3))
    weights = torch.nn.Parameter(torch.zeros(2))
    step = MaxNormalizedSGD([logits], lr=0.5)
    logits.grad = torch.tensor([0.04, -0.02, 0.0])
    step.step()
    torch.testing.assert_close(logits.detach(), torch.tensor([-0.5, 0.25, 0.0]))

    groups = [{"params": [weights]}, {"params": [logits], "lr": 0.1, "max_normalized": True}]
    adamw, normalized = compressor_optimisers(groups, lr=1e-3, weight_decay=0.0)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.param_groups[0]["params"] == [weights]
    assert isinstance(normalized, MaxNormalizedSGD)
    assert normalized.param_groups[0]["params"] == [logits]
    assert normalized.param_groups[0]["lr"] == 0.1


def test_a_diverging_fit_stops_with_one_line_naming_the_compressor() -> None:
    model = MatryoshkaAdaptor(dim=8, min_dim=4, learning_rate=1e30, **FAST)
    with pytest.raises(CompressorError, match=r"^adaptor: training: loss became (inf|nan) at step"):
        model.fit(correlated())


def test_rows_past_gradient_rows_are_computed_without_gradient() -> None:
    from demitasse.compress.smec_stage import SelectionStage

    torch.manual_seed(0)
    stage = SelectionStage(16, 8, 16, 12, ads=True, tau=0.5).train()
    with torch.no_grad():
        stage.out.weight.normal_()  # the MLP starts at zero: give it something to compute
    h, context = torch.randn(10, 16), torch.randn(10, 16)
    torch.manual_seed(1)
    everything = stage(h, context)
    stage.gradient_rows = 4
    torch.manual_seed(1)  # the same ADS sample
    split = stage(h, context)
    assert torch.allclose(split, everything, atol=1e-6)  # the same vectors either way
    split[4:].sum().backward(retain_graph=True)  # the neighbour rows: no path to the weights
    assert stage.hidden.weight.grad is None or not stage.hidden.weight.grad.any()
    split[:4].sum().backward()
    assert stage.hidden.weight.grad is not None and stage.hidden.weight.grad.any()


def test_smec_without_memory_gradients_fits() -> None:
    X = correlated()
    settings = FAST | {"memory_size": 300, "batch_size": 64}
    model = SMEC(dim=8, min_dim=4, nested_stages=True, refresh_memory=True,
                 memory_gradients=False, **settings).fit(X)  # fmt: skip
    assert np.isfinite(model.transform(X[:5], dim=4)).all()
