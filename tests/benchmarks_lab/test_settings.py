"""Data for compressor fits, on the shared benchmark data: nothing a fit sees is evaluated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demitasse.data import evaluation_pairs, load_stsb
from demitasse.data.beir import load_beir
from demitasse.data.overlap import pair_keys
from demitasse.encoders import TransformerEncoder
from lab import (
    evaluation_texts,
    held_out_sts_training,
    held_out_unlabeled,
    retrieval_setting,
    scifact_training,
    sts_and_scifact,
    supervised_setting,
    unsupervised_setting,
)
from tests.helpers import build_tiny_model


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> TransformerEncoder:
    path = build_tiny_model(tmp_path_factory.mktemp("settings-encoder"), layers=1, hidden=16)
    return TransformerEncoder(path, cache=False, device="cpu", show_progress=False)


def test_the_judged_tasks_and_their_texts(data_dir: Path) -> None:
    judged = sts_and_scifact(data_dir, [64, 8], [32])
    (sts, sts_dims), (scifact, scifact_dims) = judged
    assert (sts.name, list(sts_dims), scifact.name, list(scifact_dims)) == (
        "sts", [64, 8], "retrieval", [32]
    )  # fmt: skip
    texts = evaluation_texts(task for task, _ in judged)
    assert len(texts) == len(set(texts)) == len(set(sts.texts()) | set(scifact.texts()))
    assert len(sts_and_scifact(data_dir, [8], None)) == 1


def test_the_unlabeled_sample_holds_no_evaluation_or_dev_sentence(data_dir: Path) -> None:
    dev = set(load_stsb("dev", data_dir).texts())
    first = held_out_unlabeled(data_dir, 300, 0, [])
    evaluated = first[:100]  # pretend these were evaluation texts: they must go
    sample = held_out_unlabeled(data_dir, 300, 0, evaluated)
    assert len(sample) == len(set(sample)) == 300
    assert not (set(sample) & (dev | set(evaluated)))
    assert sample == held_out_unlabeled(data_dir, 300, 0, evaluated)  # a fixed sample
    assert sample != held_out_unlabeled(data_dir, 300, 1, evaluated)


def test_the_labelled_training_pairs_hold_no_evaluation_pair(data_dir: Path) -> None:
    stsb, sick = held_out_sts_training(data_dir)
    held_out = evaluation_pairs(data_dir)
    for pairs in (stsb, sick):
        assert len(pairs) > 0
        assert not pair_keys(pairs.sentences1, pairs.sentences2) & held_out
    assert len(stsb) < len(load_stsb("train", data_dir))  # most STS-B train pairs are test pairs


def test_scifact_training_pairs_each_query_with_its_relevant_documents(data_dir: Path) -> None:
    rows, queries, documents, grades = scifact_training(data_dir)
    train = load_beir(data_dir / "beir" / "scifact", split="train")
    assert rows == train.corpus_texts + train.query_texts
    assert len(queries) == len(documents) == len(grades) > len(train.query_ids) / 2
    text_of = dict(zip(train.corpus_ids, train.corpus_texts, strict=True))
    judged = {
        (query, text_of[doc_id], grade)
        for query_id, query in zip(train.query_ids, train.query_texts, strict=True)
        for doc_id, grade in train.qrels[query_id].items()
    }
    triples = set(zip(queries, documents, grades, strict=True))
    assert all(grade > 0 for _, _, grade in triples)
    assert triples <= judged


def test_the_three_settings_give_their_fit_rows_and_supervision(
    data_dir: Path, encoder: TransformerEncoder
) -> None:
    judged = sts_and_scifact(data_dir, [8], [8])
    unlabeled = held_out_unlabeled(data_dir, 1200, 0, [])
    vectors = encoder.encode(unlabeled)
    unsupervised = unsupervised_setting(
        encoder, unlabeled, vectors, seed=0, related_weight=0.5, epochs=3, judged=judged
    )
    assert unsupervised.fit_data == "unlabeled-en-1k+perturbed"
    assert unsupervised.vectors is vectors and unsupervised.params == {"related_weight": 0.5}
    left, right = unsupervised.supervision["related_pairs"]
    assert left is vectors and right.shape == vectors.shape and not np.allclose(left, right)

    stsb, sick = held_out_sts_training(data_dir)
    supervised = supervised_setting(
        encoder, vectors[:100], stsb, sick, cosent_weight=0.5, epochs=3, judged=judged
    )
    labelled = set(stsb.texts() + sick.texts())
    assert len(supervised.vectors) == 100 + len(labelled)
    assert supervised.fit_data == "unlabeled-en-0k+stsb-train+sick-train"
    scores = supervised.supervision["scores"]
    assert len(scores) == len(stsb) + len(sick)
    assert scores.min() >= 0 and scores.max() <= 1  # both scales mapped onto [0, 1]
    assert len(supervised.supervision["pairs"][0]) == len(scores)

    retrieval = retrieval_setting(encoder, data_dir, rank_weight=5.0, epochs=2, judged=judged[1:])
    rows, queries, _, _ = scifact_training(data_dir)
    assert len(retrieval.vectors) == len(rows)
    assert len(retrieval.supervision["relevance"]) == len(queries)
    assert (retrieval.epochs, [task.name for task, _ in retrieval.judged]) == (2, ["retrieval"])
