"""Loaders for the SentEval sentence-classification sets in their published file formats.

MR, CR (and SUBJ, MPQA) are a pair of line files, one sentence per line, the label given by
the file; SST is ``sentence<TAB>label`` (binary) or ``label sentence`` (fine-grained); TREC is
``COARSE:fine question``; MRPC is a TSV with a header. Fields are split by hand, never with
``csv`` quoting: quotes occur inside sentences.

Encodings: MR and TREC's train file are latin-1 bytes, the rest UTF-8. Every file is read as
UTF-8 when it decodes as such, else as latin-1 (which decodes any byte), the reading SentEval
gives those files. Empty lines carry no sentence and are skipped; CR has four of them, which
SentEval keeps as empty sentences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from demitasse.data.paths import resolve_data_dir
from demitasse.errors import DataError

BINARY_CLASSES: tuple[str, ...] = ("negative", "positive")
SST5_CLASSES: tuple[str, ...] = (
    "very negative",
    "negative",
    "neutral",
    "positive",
    "very positive",
)
TREC_CLASSES: tuple[str, ...] = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
MRPC_CLASSES: tuple[str, ...] = ("not paraphrase", "paraphrase")
_MRPC_COLUMNS = ("Quality", "#1 String", "#2 String")
_HINT = "is --data-dir the shared data folder?"


def _labels_array(
    labels: Sequence[int] | np.ndarray, classes: Sequence[str], name: str
) -> np.ndarray:
    array = np.array(labels, dtype=np.int64).reshape(-1)
    if len(array) and (array.min() < 0 or array.max() >= len(classes)):
        raise ValueError(f"{name}: labels must lie in 0..{len(classes) - 1}")
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class LabeledTexts:
    """Sentences with one class index each; ``classes[label]`` names the class.

    ``eq=False``: comparing thousands of sentences and an array by value is never wanted.
    """

    name: str
    texts: list[str]
    labels: np.ndarray
    classes: tuple[str, ...] = BINARY_CLASSES

    def __post_init__(self) -> None:
        texts = list(self.texts)
        labels = _labels_array(self.labels, self.classes, self.name)
        if len(texts) != len(labels):
            raise ValueError(f"{self.name}: {len(texts)} texts but {len(labels)} labels")
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "classes", tuple(self.classes))

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:
        return f"LabeledTexts(name={self.name!r}, texts={len(self)}, classes={len(self.classes)})"

    def take(self, indices: Sequence[int] | np.ndarray) -> LabeledTexts:
        """The examples at ``indices``, in that order, under the same name."""
        indices = np.asarray(indices, dtype=np.int64)
        return LabeledTexts(
            self.name, [self.texts[i] for i in indices], self.labels[indices], self.classes
        )

    def all_texts(self) -> list[str]:
        return list(self.texts)


@dataclass(frozen=True, eq=False)
class LabeledPairs:
    """Sentence pairs with one class index each (MRPC: 1 = paraphrase)."""

    name: str
    texts1: list[str]
    texts2: list[str]
    labels: np.ndarray
    classes: tuple[str, ...] = MRPC_CLASSES

    def __post_init__(self) -> None:
        texts1, texts2 = list(self.texts1), list(self.texts2)
        labels = _labels_array(self.labels, self.classes, self.name)
        if not len(texts1) == len(texts2) == len(labels):
            raise ValueError(
                f"{self.name}: {len(texts1)} first texts, {len(texts2)} second texts and "
                f"{len(labels)} labels; they must be equal"
            )
        object.__setattr__(self, "texts1", texts1)
        object.__setattr__(self, "texts2", texts2)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "classes", tuple(self.classes))

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:
        return f"LabeledPairs(name={self.name!r}, pairs={len(self)})"

    def take(self, indices: Sequence[int] | np.ndarray) -> LabeledPairs:
        """The pairs at ``indices``, in that order, under the same name."""
        indices = np.asarray(indices, dtype=np.int64)
        return LabeledPairs(
            self.name,
            [self.texts1[i] for i in indices],
            [self.texts2[i] for i in indices],
            self.labels[indices],
            self.classes,
        )

    def all_texts(self) -> list[str]:
        return [*self.texts1, *self.texts2]


Examples = TypeVar("Examples", LabeledTexts, LabeledPairs)


@dataclass(frozen=True, eq=False)
class LabeledSplits(Generic[Examples]):
    """A set published with fixed splits; ``dev`` is None where it has none (TREC, MRPC)."""

    name: str
    train: Examples
    dev: Examples | None
    test: Examples

    def __repr__(self) -> str:
        dev = "None" if self.dev is None else str(len(self.dev))
        return (
            f"LabeledSplits(name={self.name!r}, train={len(self.train)}, dev={dev}, "
            f"test={len(self.test)})"
        )

    def all_texts(self) -> list[str]:
        parts = [self.train, self.dev, self.test]
        return [t for part in parts if part is not None for t in part.all_texts()]


def _senteval_root(data_dir: str | Path | None) -> Path:
    # Accept the shared data folder or its senteval/ subfolder.
    root = resolve_data_dir(data_dir)
    return root / "senteval" if (root / "senteval").is_dir() else root


def _read_lines(path: Path) -> list[tuple[int, str]]:
    """``(line_number, line)`` of every non-blank line, decoded as UTF-8 or else latin-1."""
    if not path.is_file():
        raise DataError(f"{path}: file not found; {_HINT}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    # Split on line feeds only: str.splitlines would also split on characters such as \x1c or
    # \x85 (latin-1 bytes of cp1252 punctuation in MR) inside a sentence.
    lines = (line.removesuffix("\r") for line in text.split("\n"))
    numbered = [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered:
        raise DataError(f"{path}: file is empty")
    return numbered


def _read_sentences(path: Path) -> list[str]:
    return [line.strip() for _, line in _read_lines(path)]


def load_binary_line_files(pos_path: str | Path, neg_path: str | Path, name: str) -> LabeledTexts:
    """A binary set given as two files of one sentence per line: positives (label 1), then
    negatives (label 0), as SentEval orders MR, CR, SUBJ and MPQA."""
    positives = _read_sentences(Path(pos_path).expanduser())
    negatives = _read_sentences(Path(neg_path).expanduser())
    labels = np.r_[np.ones(len(positives), np.int64), np.zeros(len(negatives), np.int64)]
    return LabeledTexts(name, positives + negatives, labels, BINARY_CLASSES)


def load_mr(data_dir: str | Path | None = None) -> LabeledTexts:
    """Movie-review polarity: ``MR/rt-polarity.pos|neg`` (5331 + 5331 sentences)."""
    folder = _senteval_root(data_dir) / "MR"
    return load_binary_line_files(folder / "rt-polarity.pos", folder / "rt-polarity.neg", "MR")


def load_cr(data_dir: str | Path | None = None) -> LabeledTexts:
    """Customer reviews: ``CR/custrev.pos|neg`` (2405 + 1366 non-empty sentences)."""
    folder = _senteval_root(data_dir) / "CR"
    return load_binary_line_files(folder / "custrev.pos", folder / "custrev.neg", "CR")


def _parse_label(text: str, classes: Sequence[str], path: Path, lineno: int) -> int:
    try:
        label = int(text)
    except ValueError:
        label = -1
    if not 0 <= label < len(classes):
        raise DataError(
            f"{path}: line {lineno}: label {text.strip()!r} is not an integer in "
            f"0..{len(classes) - 1}"
        )
    return label


def _read_sst_split(path: Path, name: str, fine: bool) -> LabeledTexts:
    classes = SST5_CLASSES if fine else BINARY_CLASSES
    texts: list[str] = []
    labels: list[int] = []
    for lineno, line in _read_lines(path):
        if fine:  # "3 a sentence"
            label, sep, sentence = line.strip().partition(" ")
        else:  # "a sentence \t1"
            sentence, sep, label = line.rpartition("\t")
        if not sep or not sentence.strip():
            expected = "'label sentence'" if fine else "'sentence<TAB>label'"
            raise DataError(f"{path}: line {lineno}: expected {expected}")
        labels.append(_parse_label(label, classes, path, lineno))
        texts.append(sentence.strip())
    return LabeledTexts(name, texts, np.asarray(labels), classes)


def load_sst(
    data_dir: str | Path | None = None, *, fine: bool = False
) -> LabeledSplits[LabeledTexts]:
    """Stanford Sentiment Treebank: SST-2 from ``SST/binary`` (67349 / 872 / 1821), or SST-5
    from ``SST/fine`` with ``fine=True``."""
    name = "SST-5" if fine else "SST-2"
    folder = _senteval_root(data_dir) / "SST" / ("fine" if fine else "binary")
    train, dev, test = (
        _read_sst_split(folder / f"sentiment-{split}", name, fine)
        for split in ("train", "dev", "test")
    )
    return LabeledSplits(name, train, dev, test)


def load_sst2(data_dir: str | Path | None = None) -> LabeledSplits[LabeledTexts]:
    """SST-2: ``SST/binary/sentiment-{train,dev,test}``, ``sentence<TAB>label``."""
    return load_sst(data_dir, fine=False)


def _read_trec_file(path: Path) -> LabeledTexts:
    texts: list[str] = []
    labels: list[int] = []
    for lineno, line in _read_lines(path):
        coarse, colon, rest = line.partition(":")
        _fine, space, question = rest.partition(" ")
        if not colon or not space or not question.strip():
            raise DataError(f"{path}: line {lineno}: expected 'COARSE:fine question'")
        if coarse not in TREC_CLASSES:
            raise DataError(
                f"{path}: line {lineno}: unknown class {coarse!r}; "
                f"expected one of {', '.join(TREC_CLASSES)}"
            )
        labels.append(TREC_CLASSES.index(coarse))
        texts.append(question.strip())
    return LabeledTexts("TREC", texts, np.asarray(labels), TREC_CLASSES)


def load_trec(data_dir: str | Path | None = None) -> LabeledSplits[LabeledTexts]:
    """TREC question types, 6 coarse classes: ``TREC/train_5500.label`` (5452) and
    ``TREC/TREC_10.label`` (500 test questions)."""
    folder = _senteval_root(data_dir) / "TREC"
    return LabeledSplits(
        "TREC",
        _read_trec_file(folder / "train_5500.label"),
        None,
        _read_trec_file(folder / "TREC_10.label"),
    )


def _read_mrpc_file(path: Path) -> LabeledPairs:
    lines = _read_lines(path)
    header = [h.strip() for h in lines[0][1].split("\t")]
    missing = [c for c in _MRPC_COLUMNS if c not in header]
    if missing:
        raise DataError(f"{path}: header lacks {', '.join(repr(c) for c in missing)}")
    iq, i1, i2 = (header.index(c) for c in _MRPC_COLUMNS)
    texts1: list[str] = []
    texts2: list[str] = []
    labels: list[int] = []
    for lineno, line in lines[1:]:
        fields = line.split("\t")
        if len(fields) != len(header):
            raise DataError(
                f"{path}: line {lineno}: expected {len(header)} tab-separated columns, "
                f"found {len(fields)}"
            )
        labels.append(_parse_label(fields[iq], MRPC_CLASSES, path, lineno))
        texts1.append(fields[i1].strip())
        texts2.append(fields[i2].strip())
    if not labels:
        raise DataError(f"{path}: no sentence pairs")
    return LabeledPairs("MRPC", texts1, texts2, np.asarray(labels), MRPC_CLASSES)


def load_mrpc(data_dir: str | Path | None = None) -> LabeledSplits[LabeledPairs]:
    """Microsoft Research paraphrase corpus: ``MRPC/msr_paraphrase_{train,test}.txt``
    (4076 / 1725 pairs)."""
    folder = _senteval_root(data_dir) / "MRPC"
    return LabeledSplits(
        "MRPC",
        _read_mrpc_file(folder / "msr_paraphrase_train.txt"),
        None,
        _read_mrpc_file(folder / "msr_paraphrase_test.txt"),
    )


ClassificationSet = (
    LabeledTexts | LabeledPairs | LabeledSplits[LabeledTexts] | LabeledSplits[LabeledPairs]
)

CLASSIFICATION_SUITE: tuple[str, ...] = ("MR", "CR", "SST-2", "TREC", "MRPC")
_LOADERS: dict[str, Callable[[str | Path | None], ClassificationSet]] = {
    "MR": load_mr,
    "CR": load_cr,
    "SST-2": load_sst2,
    "SST-5": lambda data_dir: load_sst(data_dir, fine=True),
    "TREC": load_trec,
    "MRPC": load_mrpc,
}
_ALIASES = {"".join(ch for ch in name.lower() if ch.isalnum()): name for name in _LOADERS}
_ALIASES.update({"sst": "SST-2", "sstbinary": "SST-2", "sstfine": "SST-5"})


def canonical_classification_name(name: str) -> str:
    """``"sst2"``, ``"SST-2"``, ``"mr"`` … → the record spelling (``"SST-2"``, ``"MR"``)."""
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    if key not in _ALIASES:
        raise DataError(f"unknown classification set {name!r}: choose from {', '.join(_LOADERS)}")
    return _ALIASES[key]


def load_classification_set(name: str, data_dir: str | Path | None = None) -> ClassificationSet:
    """A SentEval classification set by name, case-insensitive: "MR", "cr", "sst2", "TREC" …"""
    return _LOADERS[canonical_classification_name(name)](data_dir)
