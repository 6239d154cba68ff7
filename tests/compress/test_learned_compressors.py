# ruff: noqa: N803, N806  (scikit-learn convention: matrices are capitalised)
"""Learned compressors on synthetic data: losses, S-XBM queue, ADS, SMRL freezing, persistence."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from demitasse.compress import TrainingSettings, make_compressor
from demitasse.compress.adaptor import MatryoshkaAdaptor
from demitasse.compress.base import load_compressor
from demitasse.compress.learned_loop import TrainingStep
from demitasse.compress.mcr2 import MCR2
from demitasse.compress.smec import SMEC, EmbeddingMemory, SMECVariant
from demitasse.errors import CompressorError, DataError
from demitasse.losses import (
    cosent_loss,
    pair_similarity_loss,
    pairwise_similarity_loss,
    rank_loss,
    topk_similarity_loss,
)

FAST = TrainingSettings(max_epochs=2, batch_size=128, device="cpu")
#: A small network trained briefly on the CPU.
SMALL: dict[str, Any] = {"hidden_dim": 32, "training": FAST}


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
    training = replace(FAST, max_epochs=4, batch_size=64, patience=5)
    variant = SMECVariant(ads_prior="uniform", xbm=False)
    model = SMEC(dim=4, min_dim=4, hidden_dim=32, rotate=False, variant=variant, training=training)
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
    model = SMEC(dim=16, min_dim=4, **SMALL).fit(X)
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
    variant = SMECVariant(xbm=False, nested_stages=True)
    SMEC(dim=16, min_dim=4, variant=variant, **SMALL).fit(correlated())
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
    variant = SMECVariant(smrl=False, ads=False, xbm=False)
    SMEC(dim=16, min_dim=4, variant=variant, **SMALL).fit(correlated())
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
    variant = SMECVariant(memory_size=300, refresh_memory=refresh, nested_stages=refresh)
    training = replace(FAST, batch_size=64)
    SMEC(dim=8, min_dim=4, hidden_dim=32, variant=variant, training=training).fit(correlated())
    embedded, *payload = pushed[-1]
    assert torch.allclose(embedded.norm(dim=1), torch.ones(len(embedded)))
    if refresh:  # fit-row indices: neighbours are compressed again by the current stages
        assert len(payload) == 1 and payload[0].dtype == torch.int64
    else:  # compressed vectors as they were when stored
        assert [p.shape[1] for p in payload] == [4] and payload[0].is_floating_point()


@pytest.mark.parametrize(
    "model",
    [MatryoshkaAdaptor(dim=16, min_dim=4, **SMALL), SMEC(dim=16, min_dim=4, **SMALL)],
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
    SMEC(dim=16, min_dim=8, **SMALL).fit(X).save(tmp_path / "c")
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
    model = SMEC(dim=16, min_dim=4, variant=SMECVariant(inference="distilled"), **SMALL).fit(X)
    chain = SMEC(dim=16, min_dim=4, variant=SMECVariant(inference="chain"), **SMALL).fit(X)
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
    model = MatryoshkaAdaptor(dim=8, min_dim=4, **SMALL)
    model.fit(X, pairs=pairs, scores=scores, queries=X[100:140], documents=X[140:180])
    assert model.transform(X, 4).shape == (len(X), 4)
    with pytest.raises(DataError, match="scores"):
        model.fit(X, pairs=pairs)
    with pytest.raises(DataError, match="features"):
        model.fit(X, queries=X[:10, :5], documents=X[:10, :5])
    with pytest.raises(CompressorError, match="unknown fit"):
        model.fit(X, labels=scores)


class SteppedSMEC(SMEC):
    """SMEC that keeps what its step hook sees."""

    def _fit(self, X: np.ndarray, **supervision: Any) -> None:
        self.steps: list[TrainingStep] = []
        super()._fit(X, **supervision)

    def _after_backward(self, step: TrainingStep) -> None:
        assert all(p.grad is not None for m in step.modules for p in m.parameters())
        self.steps.append(step)


@pytest.mark.parametrize("smrl", [True, False], ids=["smrl", "parallel"])
def test_the_step_hook_sees_every_step_of_the_stages_and_changes_nothing(smrl: bool) -> None:
    X = correlated()
    variant = SMECVariant(smrl=smrl)
    plain = SMEC(dim=16, min_dim=4, variant=variant, **SMALL).fit(X)
    hooked = SteppedSMEC(dim=16, min_dim=4, variant=variant, **SMALL).fit(X)
    for dim in (16, 8, 4):
        np.testing.assert_array_equal(hooked.transform(X, dim), plain.transform(X, dim))
    runs = [step.run for step in hooked.steps]
    # The stages' runs only: the distilled width networks' fits are not observed.
    assert set(runs) == ({"smec: stage 16", "smec: stage 8", "smec: stage 4"} if smrl
                         else {"smec: stage 16→8→4"})  # fmt: skip
    assert all(len(step.modules) == (1 if smrl else 3) for step in hooked.steps)
    for run in set(runs):
        steps = [step.step for step in hooked.steps if step.run == run]
        assert steps == list(range(1, len(steps) + 1))  # counted from 1 in each run


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
        lambda **kw: SMEC(
            dim=8, min_dim=4, variant=SMECVariant(nested_stages=True, refresh_memory=True), **kw
        ),
    ],
    ids=["adaptor", "smec"],
)
def test_related_pairs_keep_their_original_cosine(make) -> None:  # type: ignore[no-untyped-def]
    X = correlated()
    A, B = X[:300], related_copies(X[:300])
    settings = {
        "hidden_dim": 32,
        "training": replace(FAST, max_epochs=10, patience=11, learning_rate=1e-2),
    }
    plain = make(**settings).fit(X)
    related = make(related_weight=4.0, **settings).fit(X, related_pairs=(A, B))
    # Truncation keeps the high-variance head, where A and B agree, so the plain fit maps each
    # pair almost onto one point; the related-pair term has to restore their original cosine.
    assert related_gap(related, A, B, 4) < 0.6 * related_gap(plain, A, B, 4)


def test_related_pairs_are_checked() -> None:
    X = correlated()
    model = SMEC(dim=8, min_dim=4, **SMALL)
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
        lambda: MatryoshkaAdaptor(dim=8, min_dim=4, pairwise_weight=0.0, **SMALL),
        lambda: SMEC(dim=8, min_dim=4, pairwise_weight=0.0, **SMALL),
        lambda: SMEC(
            dim=8, min_dim=4, pairwise_weight=0.0, variant=SMECVariant(xbm=False), **SMALL
        ),
        lambda: SMEC(
            dim=8,
            min_dim=4,
            pairwise_weight=0.25,
            variant=SMECVariant(nested_stages=True),
            **SMALL,
        ),
    ],
    ids=["adaptor", "smec", "smec-no-xbm", "smec-nested"],
)
def test_the_all_pairs_term_can_be_weighted_down_or_off(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    X = correlated()
    model = make().fit(X, related_pairs=(X[:50], related_copies(X[:50])))
    reduced = model.transform(X, 4)
    assert reduced.shape == (len(X), 4) and np.isfinite(reduced).all()
    default = type(model)(dim=8, min_dim=4, **SMALL).fit(X)
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
    training = replace(FAST, learning_rate=0.0)
    model = SteppedSMEC(dim=8, min_dim=8, hidden_dim=32, variant=SMECVariant(ads=False))
    model.set_params(training=replace(training, max_epochs=10, patience=patience))
    model.fit(correlated())
    assert sorted({step.epoch for step in model.steps}) == list(range(1 + patience))


def test_a_compressor_saved_in_another_format_version_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    SMEC(dim=8, min_dim=4, **SMALL).fit(correlated()).save(tmp_path / "c")
    config = json.loads((tmp_path / "c" / "config.json").read_text())
    assert config["version"] == SMEC.version == 3
    config["version"] = 2
    (tmp_path / "c" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CompressorError) as caught:
        load_compressor(tmp_path / "c")
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / "c") in message
    assert "smec format version 2; this demitasse reads version 3" in message


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
    training = replace(FAST, learning_rate=1e30)
    model = MatryoshkaAdaptor(dim=8, min_dim=4, hidden_dim=32, training=training)
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
    variant = SMECVariant(
        memory_size=300, nested_stages=True, refresh_memory=True, memory_gradients=False
    )
    training = replace(FAST, batch_size=64)
    model = SMEC(dim=8, min_dim=4, hidden_dim=32, variant=variant, training=training).fit(X)
    assert np.isfinite(model.transform(X[:5], dim=4)).all()


# ---- the grouped parameters --------------------------------------------------------------------

#: SMEC's ablation switches and research settings, and the analysis hook it no longer takes.
RESEARCH = {"smrl", "ads", "xbm", "memory_size", "refresh_memory", "memory_gradients",
            "nested_stages", "temperature", "ads_learning_rate", "ads_prior", "inference",
            "distilled_hidden_dim", "record_gradients"}  # fmt: skip
#: The trainer's settings, which every learned compressor takes in ``training``.
TRAINER = {"batch_size", "max_epochs", "patience", "learning_rate", "weight_decay",
           "validation_fraction", "seed", "device", "progress"}  # fmt: skip
LEARNED = [MatryoshkaAdaptor, SMEC, MCR2]


def test_smec_signature_is_short_and_holds_no_research_switch() -> None:
    names = list(inspect.signature(SMEC).parameters)
    assert len(names) <= 12, names
    assert not (set(names) & (RESEARCH | TRAINER))
    assert names[-2:] == ["variant", "training"]
    assert set(SMECVariant.field_names()) == RESEARCH - {"record_gradients"}
    for cls in LEARNED:
        params = set(inspect.signature(cls).parameters)
        assert "training" in params and not params & TRAINER, cls
        assert set(TrainingSettings.field_names()) == TRAINER
        fields = [name for group in cls._param_groups.values() for name in group.field_names()]
        # A field's own name says which group it sets: no parameter or other field has it.
        assert len(set(fields)) == len(fields) and not set(fields) & params


def test_the_defaults_are_the_method_as_shipped() -> None:
    shipped = {"smrl": True, "ads": True, "xbm": True, "memory_size": 5000,
               "refresh_memory": False, "memory_gradients": True, "nested_stages": False,
               "temperature": 0.5, "ads_learning_rate": 0.05, "ads_prior": "variance",
               "inference": "distilled", "distilled_hidden_dim": 128}  # fmt: skip
    assert SMECVariant().as_dict() == shipped
    expected = {"batch_size": 256, "max_epochs": 20, "patience": 3, "learning_rate": 1e-3,
                "weight_decay": 0.0, "validation_fraction": 0.1, "seed": 0, "device": "auto",
                "progress": False}  # fmt: skip
    assert SMEC()._training._asdict() == expected
    assert MatryoshkaAdaptor(training=TrainingSettings(seed=4))._training._asdict() == {
        **expected,
        "seed": 4,
    }
    # MCR²'s own defaults, for the fields a TrainingSettings leaves None too.
    mcr2 = {**expected, "batch_size": 512, "max_epochs": 30, "patience": 11}
    assert MCR2()._training._asdict() == mcr2
    assert MCR2(training=TrainingSettings(max_epochs=3))._training._asdict() == {
        **mcr2,
        "max_epochs": 3,
    }


def test_grouped_parameters_clone_and_set_like_any_other() -> None:
    from sklearn.base import clone

    variant, training = SMECVariant(smrl=False), TrainingSettings(max_epochs=3, device="cpu")
    model = SMEC(dim=8, variant=variant, training=training)
    params = model.get_params()
    assert params["variant"] is variant and params["training"] is training
    copied = clone(model)
    assert copied.get_params() == params and copied.training is not training
    assert repr(copied) == (
        "SMEC(dim=8, variant=SMECVariant(smrl=False), "
        "training=TrainingSettings(max_epochs=3, device='cpu'))"
    )
    copied.set_params(training=replace(training, max_epochs=5))
    assert copied.training == TrainingSettings(max_epochs=5, device="cpu")
    assert model.training is training  # the original is untouched
    # By its own name, a setting goes into its group, over the group's current value.
    copied.set_params(seed=2, smrl=True, min_dim=4)
    assert copied.training == TrainingSettings(max_epochs=5, device="cpu", seed=2)
    assert copied.variant == SMECVariant() and copied.min_dim == 4
    with pytest.raises(CompressorError, match="has no parameter 'epochs'; its parameters are"):
        copied.set_params(epochs=5)
    with pytest.raises(CompressorError, match="The 'max_epochs' parameter of SMEC must be an int"):
        copied.set_params(training=TrainingSettings(max_epochs=0)).fit(correlated())
    assert copied.set_params(variant={"smrl": False}).variant == SMECVariant(smrl=False)
    with pytest.raises(CompressorError, match="The 'variant' parameter of SMEC must be an inst"):
        copied.set_params(training=None, variant="paper").fit(correlated())


def test_by_name_each_setting_goes_into_its_group() -> None:
    model = make_compressor("smec", dim=8, max_epochs=3, nested_stages=True, related_weight=0.5)
    assert model.get_params()["training"] == TrainingSettings(max_epochs=3)
    assert model.get_params()["variant"] == SMECVariant(nested_stages=True)
    assert model.related_weight == 0.5
    # A group given as a dict (as config.json holds it), a field on its own over it.
    model = make_compressor("adaptor", training={"seed": 2, "max_epochs": 9}, max_epochs=3)
    assert model.training == TrainingSettings(seed=2, max_epochs=3)
    for params, message in [
        ({"epochs": 3}, r"unknown parameter\(s\) epochs; its parameters are: .*training \(batch_"),
        ({"training": {"epochs": 3}}, "TrainingSettings has no setting"),
        ({"smrl": False}, r"MatryoshkaAdaptor got unknown parameter\(s\) smrl"),
    ]:
        with pytest.raises(CompressorError, match=message) as caught:
            make_compressor("adaptor", **params)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "model",
    [
        MatryoshkaAdaptor(dim=8, min_dim=4, hidden_dim=16, training=replace(FAST, seed=5)),
        SMEC(
            dim=8,
            min_dim=4,
            hidden_dim=16,
            training=replace(FAST, patience=2),
            variant=SMECVariant(nested_stages=True, inference="chain"),
        ),
        MCR2(dim=4, n_clusters=2, hidden_dim=16, training=replace(FAST, batch_size=64)),
    ],
    ids=["adaptor", "smec", "mcr2"],
)
def test_grouped_parameters_survive_save_and_load(model: Any, tmp_path: Path) -> None:
    X = correlated()
    model.fit(X).save(tmp_path / "c")
    config = json.loads((tmp_path / "c" / "config.json").read_text())
    assert config["params"]["training"] == model.training.as_dict()
    if isinstance(model, SMEC):
        assert config["params"]["variant"] == model.variant.as_dict()
    loaded = load_compressor(tmp_path / "c")
    assert loaded.get_params() == model.get_params()
    assert type(loaded.get_params()["training"]) is TrainingSettings
    np.testing.assert_array_equal(loaded.transform(X), model.transform(X))
