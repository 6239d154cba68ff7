"""Data for compressor benchmarks: what fits are judged on, the unlabeled sample kept apart
from it, and the three fit settings (unsupervised, supervised, retrieval).

No fit ever sees an evaluation sentence: the unlabeled sample excludes every evaluation text
and STS-B dev (where hyperparameters are chosen), and the labelled STS training pairs exclude
every STS test or dev pair (most STS-B train pairs are STS12–16 test pairs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from demitasse.data import (
    ScoredPairs,
    evaluation_pairs,
    load_sickr,
    load_sts_suite,
    load_stsb,
    load_unlabeled,
    perturb_sentences,
    without_pairs,
)
from demitasse.data.beir import load_beir
from demitasse.encoders import Encoder
from demitasse.evaluation import STSTask, Task
from demitasse.evaluation.retrieval import RetrievalTask
from lab.fitting import FitSetting, Judged

logger = logging.getLogger(__name__)


def sts_and_scifact(
    data_dir: Path, dims: Sequence[int], retrieval_dims: Sequence[int] | None
) -> list[tuple[Task, Sequence[int]]]:
    """The 7 STS test sets at ``dims`` and, unless ``retrieval_dims`` is None, SciFact test
    at those."""
    judged: list[tuple[Task, Sequence[int]]] = [(STSTask(load_sts_suite(data_dir)), dims)]
    if retrieval_dims is not None:
        scifact = RetrievalTask(load_beir(data_dir / "beir" / "scifact"))
        judged.append((scifact, retrieval_dims))
    return judged


def evaluation_texts(tasks: Iterable[Task]) -> list[str]:
    """Every text the tasks score, once each, in task order."""
    return list(dict.fromkeys(text for task in tasks for text in task.texts()))


def held_out_unlabeled(data_dir: Path, n: int, seed: int, evaluation: Iterable[str]) -> list[str]:
    """``n`` unlabeled sentences (seeded sample of ``unlabeled/en``), none of them an
    evaluation text or an STS-B dev sentence. The same arguments give the same sample, so
    benchmarks that share it also share its embedding cache."""
    exclude = set(evaluation) | set(load_stsb("dev", data_dir).texts())
    return load_unlabeled(data_dir, n, seed, exclude)


def held_out_sts_training(data_dir: Path) -> tuple[ScoredPairs, ScoredPairs]:
    """STS-B train and SICK train, less every STS test or dev pair."""
    held_out = evaluation_pairs(data_dir)
    stsb = without_pairs(load_stsb("train", data_dir), held_out)
    sick = without_pairs(load_sickr("train", data_dir), held_out)
    return stsb, sick


def unsupervised_setting(
    encoder: Encoder,
    unlabeled: list[str],
    vectors: np.ndarray,
    *,
    seed: int,
    related_weight: float,
    epochs: int,
    judged: Judged,
) -> FitSetting:
    """Fit on the unlabeled sentences; a learned compressor also keeps the backbone's cosine
    between each sentence and a perturbed copy of it (near-paraphrase pairs that random
    batches lack)."""
    logger.info("encoding a perturbed copy of each of the %d unlabeled sentences", len(unlabeled))
    perturbed = encoder.encode(perturb_sentences(unlabeled, seed=seed))
    return FitSetting(
        "unsupervised",
        vectors,
        f"unlabeled-en-{len(unlabeled) // 1000}k+perturbed",
        judged,
        supervision={"related_pairs": (vectors, perturbed)},
        params={"related_weight": related_weight},
        epochs=epochs,
    )


def supervised_setting(
    encoder: Encoder,
    unlabeled_vectors: np.ndarray,
    stsb: ScoredPairs,
    sick: ScoredPairs,
    *,
    cosent_weight: float,
    epochs: int,
    judged: Judged,
) -> FitSetting:
    """Fit on ``unlabeled_vectors`` plus the sentences of the STS-B and SICK pairs; a learned
    compressor also gets a CoSENT term on those pairs."""
    labelled = list(dict.fromkeys(stsb.texts() + sick.texts()))
    vectors = np.concatenate([unlabeled_vectors, encoder.encode(labelled)])
    # CoSENT only compares scores within a batch; map both scales onto [0, 1] so mixed
    # batches of STS-B (0–5) and SICK (1–5) pairs rank consistently.
    left = encoder.encode(stsb.sentences1 + sick.sentences1)
    right = encoder.encode(stsb.sentences2 + sick.sentences2)
    scores = np.concatenate([np.asarray(stsb.scores) / 5.0, (np.asarray(sick.scores) - 1.0) / 4.0])
    n_unlabeled = len(unlabeled_vectors)
    return FitSetting(
        "supervised",
        vectors,
        f"unlabeled-en-{n_unlabeled // 1000}k+stsb-train+sick-train",
        judged,
        supervision={"pairs": (left, right), "scores": scores},
        params={"cosent_weight": cosent_weight},
        epochs=epochs,
    )


def retrieval_setting(
    encoder: Encoder, data_dir: Path, *, rank_weight: float, epochs: int, judged: Judged
) -> FitSetting:
    """Search-Adaptor's setting: fit on the SciFact corpus and train queries; a learned
    compressor also gets the rank loss on the train qrels."""
    fit_texts, queries, documents, grades = scifact_training(data_dir)
    logger.info("encoding the SciFact corpus, train queries and %d relevant pairs", len(queries))
    return FitSetting(
        "retrieval",
        encoder.encode(fit_texts),
        "scifact-corpus+train-queries+train-qrels",
        judged,
        supervision={
            "queries": encoder.encode(queries),
            "documents": encoder.encode(documents),
            "relevance": np.asarray(grades),
        },
        params={"rank_weight": rank_weight},
        epochs=epochs,
    )


def scifact_training(data_dir: Path) -> tuple[list[str], list[str], list[str], list[float]]:
    """SciFact corpus and train queries (fit rows), and the train (query, document, grade)s."""
    train = load_beir(data_dir / "beir" / "scifact", split="train")
    position = {doc_id: i for i, doc_id in enumerate(train.corpus_ids)}
    queries, documents, grades = [], [], []
    for query_id, query in zip(train.query_ids, train.query_texts, strict=True):
        for doc_id, grade in train.qrels[query_id].items():
            if grade > 0:
                queries.append(query)
                documents.append(train.corpus_texts[position[doc_id]])
                grades.append(float(grade))
    return train.corpus_texts + train.query_texts, queries, documents, grades
