"""Loaders for the STS benchmarks in their published SentEval layout.

Files are split on TAB by hand, never with ``csv`` quoting: quotes occur inside sentences
(STS15 answers-students starts fields with ``"``), and quote handling would merge lines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from demitasse.data._tables import file_stem, table_kind
from demitasse.data._text import open_text, read_lines, require_file
from demitasse.data.files import load_scored_pairs
from demitasse.data.pairs import ScoredPairs, concat_pairs
from demitasse.data.paths import resolve_data_dir
from demitasse.errors import DataError

STS_SUITE: tuple[str, ...] = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R")

_HINT = "is --data-dir the shared data folder?"
_ALIASES: dict[str, str] = {
    **{f"sts{y}": f"STS{y}" for y in range(12, 17)},
    **{f"sts20{y}": f"STS{y}" for y in range(12, 17)},
    "stsb": "STS-B",
    "stsbenchmark": "STS-B",
    "sickr": "SICK-R",
    "sick": "SICK-R",
}
_STSB_SPLITS = {"train": "train", "dev": "dev", "validation": "dev", "test": "test"}
_SICK_SPLITS = {
    "train": "train",
    "trial": "trial",
    "dev": "trial",
    "validation": "trial",
    "test": "test",
}
_SICK_COLUMNS = ("sentence_A", "sentence_B", "relatedness_score")
_SICK_FILES = {
    "train": "SICK_train.txt",
    "trial": "SICK_trial.txt",
    "test": "SICK_test_annotated.txt",
}


def canonical_sts_name(name: str) -> str:
    """``"sts12"``, ``"stsb"``, ``"SICK-R"`` … → the suite spelling (``"STS12"``, ``"STS-B"``)."""
    key = _alnum(name)
    if key not in _ALIASES:
        raise DataError(f"unknown STS set {name!r}: choose from {', '.join(STS_SUITE)}")
    return _ALIASES[key]


def split_name(base: str, split: str) -> str:
    """Test splits carry the bare suite name; other splits are ``"<base>/<split>"``."""
    return base if split == "test" else f"{base}/{split}"


def _senteval_root(root: Path) -> Path:
    # Accept the shared data folder or its senteval/ subfolder.
    if not (root / "senteval").is_dir() and ((root / "STS").is_dir() or (root / "SICK").is_dir()):
        return root
    return root / "senteval"


def _parse_score(text: str, path: Path, lineno: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{path}: line {lineno}: score {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise DataError(f"{path}: line {lineno}: score {text.strip()!r} is not finite")
    return value


def _read_senteval_subset(name: str, input_path: Path) -> ScoredPairs:
    gold_path = input_path.with_name(input_path.name.replace("STS.input.", "STS.gs.", 1))
    if not gold_path.is_file():
        raise DataError(f"{input_path}: gold file {gold_path.name} is missing")
    inputs, golds = read_lines(input_path), read_lines(gold_path)
    if len(inputs) != len(golds):
        raise DataError(
            f"{input_path} has {len(inputs)} lines but {gold_path.name} has {len(golds)}"
        )
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    for lineno, (line, gold) in enumerate(zip(inputs, golds, strict=True), start=1):
        if not gold.strip():  # no gold score for this pair: SentEval skips it
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(
                f"{input_path}: line {lineno}: expected 2 tab-separated sentences, "
                f"found {len(fields)} fields"
            )
        scores.append(_parse_score(gold, gold_path, lineno))
        s1.append(fields[0])
        s2.append(fields[1])
    return ScoredPairs(name, s1, s2, np.asarray(scores))


def load_senteval_sts(year: int, data_dir: str | Path | None = None) -> ScoredPairs:
    """SemEval STS ``year`` (12-16) test sets, subsets concatenated in name order ("all")."""
    yy = year - 2000 if 2012 <= year <= 2016 else year
    if not 12 <= yy <= 16:
        raise DataError(f"no SemEval STS set for year {year}: expected 12-16 or 2012-2016")
    name = f"STS{yy}"
    folder = _senteval_root(resolve_data_dir(data_dir)) / "STS" / f"{name}-en-test"
    inputs = sorted(folder.glob("STS.input.*.txt")) if folder.is_dir() else []
    if not inputs:
        raise DataError(f"no {name} files in {folder} (expected STS.input.*.txt); {_HINT}")
    return concat_pairs(name, [_read_senteval_subset(name, p) for p in inputs])


def normalize_split(canonical: str, split: str) -> str:
    """The split's name as used for ``canonical`` (``"validation"`` → ``"dev"`` for STS-B …)."""
    allowed = {"STS-B": _STSB_SPLITS, "SICK-R": _SICK_SPLITS}.get(canonical, {"test": "test"})
    key = allowed.get(split.lower())
    if key is None:
        choices = ", ".join(dict.fromkeys(allowed.values()))
        raise DataError(f"{canonical} has no split {split!r}: choose from {choices}")
    return key


def load_stsb(split: str = "test", data_dir: str | Path | None = None) -> ScoredPairs:
    """STS Benchmark ``train`` / ``dev`` / ``test`` from ``sts-<split>.csv`` (TAB-separated)."""
    split = normalize_split("STS-B", split)
    path = _senteval_root(resolve_data_dir(data_dir)) / "STS" / "STSBenchmark" / f"sts-{split}.csv"
    if not path.is_file():
        raise DataError(f"no STS-B file {path}; {_HINT}")
    return read_stsb_file(path, split_name("STS-B", split))


def read_stsb_file(path: Path, name: str) -> ScoredPairs:
    """Pairs of a file in the STS Benchmark layout: no header, TAB-separated columns genre,
    file, year, id, score, sentence 1, sentence 2 (and sometimes source columns after them)."""
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 7:
            raise DataError(
                f"{path}: line {lineno}: expected at least 7 tab-separated columns, "
                f"found {len(fields)}"
            )
        scores.append(_parse_score(fields[4], path, lineno))
        s1.append(fields[5])
        s2.append(fields[6])
    if not scores:
        raise DataError(f"{path}: no sentence pairs")
    return ScoredPairs(name, s1, s2, np.asarray(scores))


def load_sickr(split: str = "test", data_dir: str | Path | None = None) -> ScoredPairs:
    """SICK relatedness (SICK-R) ``train`` / ``trial`` / ``test``."""
    split = normalize_split("SICK-R", split)
    path = _senteval_root(resolve_data_dir(data_dir)) / "SICK" / _SICK_FILES[split]
    if not path.is_file():
        raise DataError(f"no SICK-R file {path}; {_HINT}")
    return read_sick_file(path, split_name("SICK-R", split))


def read_sick_file(path: Path, name: str) -> ScoredPairs:
    """Pairs of a file in the SICK layout: TAB-separated with a header naming
    ``sentence_A``, ``sentence_B`` and ``relatedness_score`` among other columns."""
    lines = read_lines(path)
    header = lines[0].split("\t") if lines else []
    missing = [c for c in _SICK_COLUMNS if c not in header]
    if missing:
        raise DataError(f"{path}: header lacks {', '.join(missing)}")
    ia, ib, iscore = (header.index(c) for c in _SICK_COLUMNS)
    width = max(ia, ib, iscore) + 1
    s1: list[str] = []
    s2: list[str] = []
    scores: list[float] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < width:
            raise DataError(
                f"{path}: line {lineno}: expected {len(header)} tab-separated columns, "
                f"found {len(fields)}"
            )
        scores.append(_parse_score(fields[iscore], path, lineno))
        s1.append(fields[ia])
        s2.append(fields[ib])
    if not scores:
        raise DataError(f"{path}: no sentence pairs")
    return ScoredPairs(name, s1, s2, np.asarray(scores))


def load_sts(name: str, data_dir: str | Path | None = None, split: str = "test") -> ScoredPairs:
    """A suite member by name, case-insensitive: "sts12", "STS-B", "stsb", "sickr", …"""
    canonical = canonical_sts_name(name)
    if canonical == "STS-B":
        return load_stsb(split, data_dir)
    if canonical == "SICK-R":
        return load_sickr(split, data_dir)
    normalize_split(canonical, split)
    return load_senteval_sts(int(canonical[3:]), data_dir)


def load_sts_set(item: str, data_dir: str | Path | None = None) -> ScoredPairs:
    """A suite member's test split by name (:func:`load_sts`), a SemEval folder of the data
    folder by name (``sts17``: ``senteval/STS/STS17-en-test``), or the pairs of a file or
    folder (:func:`load_sts_path`): anything with a file suffix or a path separator, or that
    exists."""
    if Path(item).suffix or "/" in item or Path(item).expanduser().exists():
        return load_sts_path(item)
    try:
        canonical = canonical_sts_name(item)
    except DataError:
        # Not a suite member: a SemEval folder of that name in the data folder, if there is
        # one (``sts17`` → ``senteval/STS/STS17-en-test``).
        folder = _semeval_folder(item, data_dir)
        if folder is None:
            raise
        return load_sts_path(folder)
    return load_sts(canonical, data_dir)


def _semeval_folder(name: str, data_dir: str | Path | None) -> Path | None:
    root = _senteval_root(resolve_data_dir(data_dir)) / "STS"
    key = _alnum(name)
    folders = sorted(root.iterdir()) if root.is_dir() else []
    return next(
        (f for f in folders if f.is_dir() and _alnum(f.name.removesuffix("-en-test")) == key),
        None,
    )


def _alnum(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def load_sts_path(path: str | Path) -> ScoredPairs:
    """Scored pairs from a file or folder in a published STS layout, or from a pairs table.

    * a folder of SemEval STS files (SentEval's layout: ``STS.input.<subset>.txt`` beside
      ``STS.gs.<subset>.txt``): the subsets concatenated in name order, named after the
      folder without ``-en-test`` (``STS17-en-test`` → ``STS17``); a folder holding
      ``sts-test.csv`` (STS Benchmark) or ``SICK_test_annotated.txt``: that test file, named
      after the folder;
    * one ``STS.input.<subset>.txt``: that subset;
    * a file in the STS Benchmark layout (no header; genre, file, year, id, score, sentence 1,
      sentence 2, TAB-separated) or the SICK layout (a TAB header naming ``sentence_A``,
      ``sentence_B`` and ``relatedness_score``), whatever its suffix;
    * any other .csv / .tsv / .jsonl / .parquet table with columns sentence1, sentence2, score.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        return _load_sts_folder(path)
    require_file(path)
    if path.name.startswith("STS.input."):
        subset = path.name.removeprefix("STS.input.").removesuffix(".txt")
        return _read_senteval_subset(subset, path)
    layout = _text_layout(path)
    if layout == "sick":
        return read_sick_file(path, file_stem(path))
    if layout == "stsb":
        return read_stsb_file(path, file_stem(path))
    return load_scored_pairs(path)


def _load_sts_folder(folder: Path) -> ScoredPairs:
    inputs = sorted(folder.glob("STS.input.*.txt"))
    if inputs:
        name = folder.name.removesuffix("-en-test")
        return concat_pairs(name, [_read_senteval_subset(name, p) for p in inputs])
    if (folder / "sts-test.csv").is_file():
        return read_stsb_file(folder / "sts-test.csv", folder.name)
    if (folder / _SICK_FILES["test"]).is_file():
        return read_sick_file(folder / _SICK_FILES["test"], folder.name)
    raise DataError(
        f"{folder}: no STS files in this folder (expected STS.input.*.txt with STS.gs.*.txt, "
        f"sts-test.csv or {_SICK_FILES['test']})"
    )


def _text_layout(path: Path) -> str:
    """``"sick"``, ``"stsb"`` or ``"table"`` (header-named columns), from the first line of a
    plain text file; JSON Lines, Parquet and gzipped files are tables."""
    if path.name.endswith(".gz") or table_kind(path) in ("jsonl", "parquet"):
        return "table"
    try:
        with open_text(path) as handle:
            first = handle.readline().rstrip("\r\n")
    except UnicodeDecodeError:
        return "table"  # the table reader names the line that is not UTF-8
    fields = first.split("\t")
    if all(column in fields for column in _SICK_COLUMNS):
        return "sick"
    if len(fields) >= 7 and _is_number(fields[4]):
        return "stsb"
    return "table"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_sts_suite(
    data_dir: str | Path | None = None, names: Iterable[str] = STS_SUITE
) -> dict[str, ScoredPairs]:
    """The test splits of ``names`` (default: the whole suite), keyed by suite name, in order."""
    root = resolve_data_dir(data_dir)
    suite: dict[str, ScoredPairs] = {}
    for name in names:
        canonical = canonical_sts_name(name)
        suite[canonical] = load_sts(canonical, root)
    return suite
