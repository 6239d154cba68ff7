"""SNLI in the SentEval layout: ``s1.<split>``, ``s2.<split>``, ``labels.<split>``, line-aligned.

SNLI is not an evaluation set in demitasse, so any of its splits may train a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demitasse.data._text import read_lines
from demitasse.data.paths import resolve_data_dir
from demitasse.errors import DataError

NLI_LABELS = ("entailment", "neutral", "contradiction")


@dataclass(frozen=True, eq=False)
class NLIPairs:
    """Premise–hypothesis pairs with their NLI label."""

    premises: list[str]
    hypotheses: list[str]
    labels: list[str]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True, eq=False)
class Triples:
    """(anchor, positive, hard negative) sentence triples."""

    anchors: list[str]
    positives: list[str]
    negatives: list[str]

    def __len__(self) -> int:
        return len(self.anchors)


def load_snli(
    data_dir: str | Path | None = None, splits: Sequence[str] = ("dev", "test")
) -> NLIPairs:
    """SNLI pairs of the given splits, concatenated in order."""
    folder = resolve_data_dir(data_dir) / "nli" / "snli"
    premises: list[str] = []
    hypotheses: list[str] = []
    labels: list[str] = []
    for split in splits:
        columns = []
        for stem in ("s1", "s2", "labels"):
            path = folder / f"{stem}.{split}"
            if not path.is_file():
                raise DataError(f"{path}: file not found; is --data-dir the shared data folder?")
            columns.append([line.strip() for line in read_lines(path)])
        if not len(columns[0]) == len(columns[1]) == len(columns[2]):
            raise DataError(f"{folder}: s1/s2/labels.{split} have different line counts")
        unknown = sorted(set(columns[2]) - set(NLI_LABELS))
        if unknown:
            raise DataError(f"{folder}/labels.{split}: unknown label {unknown[0]!r}")
        premises += columns[0]
        hypotheses += columns[1]
        labels += columns[2]
    return NLIPairs(premises, hypotheses, labels)


def nli_triples(pairs: NLIPairs) -> Triples:
    """One triple per (premise, entailed hypothesis): a contradiction of that premise as the
    hard negative (premises without a contradiction are dropped), as SimCSE and AnglE do."""
    contradiction: dict[str, str] = {}
    for premise, hypothesis, label in zip(
        pairs.premises, pairs.hypotheses, pairs.labels, strict=True
    ):
        if label == "contradiction":
            contradiction.setdefault(premise, hypothesis)
    anchors: list[str] = []
    positives: list[str] = []
    negatives: list[str] = []
    for premise, hypothesis, label in zip(
        pairs.premises, pairs.hypotheses, pairs.labels, strict=True
    ):
        if label == "entailment" and premise in contradiction:
            anchors.append(premise)
            positives.append(hypothesis)
            negatives.append(contradiction[premise])
    return Triples(anchors, positives, negatives)
