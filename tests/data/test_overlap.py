"""Evaluation pairs are kept out of training data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demitasse.data import ScoredPairs, load_sts_suite, load_stsb, stsb_fit_sentences
from demitasse.data.overlap import (
    evaluation_pairs,
    evaluation_sentences,
    pair_keys,
    unordered_pair,
    without_pairs,
)
from demitasse.errors import DataError
from demitasse.training.recipes import TRAINING_SETS, load_training_sets
from demitasse.training.trainer import TrainingSet


def test_pair_key_ignores_order() -> None:
    assert unordered_pair("b", "a") == unordered_pair("a", "b") == ("a", "b")


def test_without_pairs_drops_held_out_pairs_in_either_order() -> None:
    train = ScoredPairs("t", ["a", "c", "e", "g"], ["b", "d", "f", "h"], np.array([1.0, 2, 3, 4]))
    held_out = pair_keys(["d", "e"], ["c", "x"])  # (c, d) reversed; (e, x) shares only "e"
    kept = without_pairs(train, held_out)
    assert kept.name == "t"
    assert kept.sentences1 == ["a", "e", "g"]
    assert kept.sentences2 == ["b", "f", "h"]
    np.testing.assert_array_equal(kept.scores, [1.0, 3.0, 4.0])


def test_training_set_drops_examples_whose_positive_or_negative_is_held_out() -> None:
    triples = TrainingSet("nli", list("abcd"), list("pqrs"), list("wxyz"))
    kept = triples.without_pairs({unordered_pair("q", "b"), unordered_pair("c", "y")})
    assert (kept.anchors, kept.positives, kept.negatives) == (["a", "d"], ["p", "s"], ["w", "z"])
    scored = TrainingSet("sts", ["a", "b", "c"], ["p", "q", "r"], scores=np.array([0.1, 0.2, 0.3]))
    kept = scored.without_pairs({unordered_pair("a", "p")})
    assert kept.anchors == ["b", "c"]
    np.testing.assert_allclose(kept.scores, [0.2, 0.3])
    labelled = TrainingSet("nli", list("abc"), list("pqr"), labels=np.array([0, 2, 1]))
    np.testing.assert_array_equal(labelled.without_pairs({("b", "q")}).labels, [0, 1])
    with pytest.raises(DataError, match="1 of 3 examples left"):
        labelled.without_pairs({("b", "q"), ("a", "p")})


def test_head_keeps_the_first_examples_of_every_field() -> None:
    labelled = TrainingSet("nli", list("abc"), list("pqr"), list("xyz"), labels=np.array([0, 2, 1]))
    first = labelled.head(2)
    assert (first.name, first.anchors, first.positives, first.negatives) == (
        "nli",
        ["a", "b"],
        ["p", "q"],
        ["x", "y"],
    )
    np.testing.assert_array_equal(first.labels, [0, 2])
    assert labelled.head(3) is labelled and labelled.head(10) is labelled


def test_max_examples_caps_each_set_after_the_evaluation_pairs_are_removed(
    data_dir: Path,
) -> None:
    full = load_training_sets(["stsb-train", "snli"], data_dir)
    capped = load_training_sets(["stsb-train", "snli"], data_dir, max_examples=1000)
    assert len(full[0]) == len(capped[0]) == 990  # fewer left than the cap
    assert len(full[1]) > 1000 and len(capped[1]) == 1000
    assert capped[1].anchors == full[1].anchors[:1000]
    assert capped[1].negatives == full[1].negatives[:1000]


def test_named_training_sets_share_no_pair_with_the_sts_test_and_dev_splits(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    held_out = evaluation_pairs(data_dir)
    test_pairs = set().union(
        *(pair_keys(p.sentences1, p.sentences2) for p in load_sts_suite(data_dir).values())
    )
    assert test_pairs <= held_out
    stsb_raw = TRAINING_SETS["stsb-train"](data_dir)
    # STS-B train was drawn from the STS12–16 tasks: most of its pairs are test pairs there.
    assert len(pair_keys(stsb_raw.anchors, stsb_raw.positives) & test_pairs) > 4000
    with caplog.at_level("INFO", logger="demitasse.training.recipes"):
        cleaned = load_training_sets(list(TRAINING_SETS), data_dir)
    reported = [r.getMessage() for r in caplog.records if r.name == "demitasse.training.recipes"]
    assert reported[0] == (
        "stsb-train: 990 of 5749 examples kept; the other 4759 are STS test or dev pairs"
    )
    assert len(reported) == 2  # SNLI shares no pair with the STS sets
    for clean in cleaned:
        assert not pair_keys(clean.anchors, clean.positives) & held_out
        assert len(clean) >= 900


def test_default_fit_sentences_hold_no_evaluation_sentence(data_dir: Path) -> None:
    held_out = evaluation_sentences(data_dir)
    fit = stsb_fit_sentences(data_dir)
    assert fit and not set(fit) & held_out
    assert len(fit) == len(set(load_stsb("train", data_dir).texts()) - held_out)
