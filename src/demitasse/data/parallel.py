"""Line-aligned parallel text (bitext): one sentence per line, line ``i`` of each file a pair.

The format of Tatoeba, Multi30k and most OPUS/WMT test sets. Files are UTF-8, plain or
``.gz``. Alignment is only by line number, so files of different lengths are an error rather
than something to trim silently.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from demitasse.data._text import iter_lines, require_file
from demitasse.data.paths import resolve_data_dir
from demitasse.errors import DataError

# ``test.en.gz`` / ``tatoeba.deu-eng.deu`` → the language code is the last name part.
_LANG_SUFFIX = re.compile(r"\.([A-Za-z]{2,3}(?:[-_][A-Za-z]{2,4})?)$")
_NOT_LANGUAGES = frozenset({"txt", "tsv", "csv", "raw", "tok", "src", "tgt", "ref"})


@dataclass(frozen=True, eq=False)
class ParallelTexts:
    """Sentences ``source[i]`` and ``target[i]`` that translate each other."""

    name: str
    source: list[str]
    target: list[str]
    source_lang: str = "src"
    target_lang: str = "tgt"

    def __post_init__(self) -> None:
        source, target = list(self.source), list(self.target)
        if len(source) != len(target):
            raise ValueError(
                f"{self.name}: {len(source)} source and {len(target)} target sentences; "
                "they must be equal"
            )
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "target", target)

    def __len__(self) -> int:
        return len(self.source)

    def __repr__(self) -> str:
        return (
            f"ParallelTexts(name={self.name!r}, {self.source_lang}→{self.target_lang}, "
            f"pairs={len(self)})"
        )

    def texts(self) -> list[str]:
        """Unique sentences of both sides, sources first, in first-seen order."""
        return list(dict.fromkeys([*self.source, *self.target]))

    def head(self, n: int) -> ParallelTexts:
        """The first ``n`` pairs, under the same name."""
        if n < 0:
            raise ValueError(f"head() needs n >= 0, got {n}")
        return ParallelTexts(
            self.name, self.source[:n], self.target[:n], self.source_lang, self.target_lang
        )


def _language_of(path: Path) -> str | None:
    match = _LANG_SUFFIX.search(path.name.removesuffix(".gz").removesuffix(".txt"))
    return match.group(1) if match and match.group(1).lower() not in _NOT_LANGUAGES else None


def _count_rest(lines: Iterator[tuple[int, str]]) -> int:
    return sum(1 for _ in lines)


def load_parallel(
    src_path: str | Path,
    tgt_path: str | Path,
    name: str,
    limit: int | None = None,
    *,
    languages: tuple[str, str] | None = None,
) -> ParallelTexts:
    """Read two line-aligned files (UTF-8, plain or ``.gz``) into :class:`ParallelTexts`.

    ``limit`` keeps the first pairs only; the files are then read no further, so a length
    mismatch beyond ``limit`` goes unnoticed. ``languages`` defaults to the files' last name
    part (``test.en.gz`` → ``"en"``) when both have one and they differ, else
    ``("src", "tgt")``.
    """
    src, tgt = require_file(src_path), require_file(tgt_path)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise DataError(f"limit must be a non-negative integer, got {limit!r}")
    source: list[str] = []
    target: list[str] = []
    src_lines, tgt_lines = iter_lines(src), iter_lines(tgt)
    for pair in itertools.zip_longest(src_lines, tgt_lines):
        if limit is not None and len(source) >= limit:
            break
        left, right = pair
        if left is None or right is None:
            # One file ended first: count the rest of the other to name both lengths.
            n_src = len(source) + (_count_rest(src_lines) + 1 if left is not None else 0)
            n_tgt = len(target) + (_count_rest(tgt_lines) + 1 if right is not None else 0)
            raise DataError(
                f"parallel files differ in length: {src} has {n_src} lines, {tgt} has {n_tgt}"
            )
        source.append(left[1])
        target.append(right[1])
    if not source and limit != 0:
        raise DataError(f"parallel files are empty: {src} and {tgt}")
    if languages is None:
        src_language, tgt_language = _language_of(src), _language_of(tgt)
        known = src_language and tgt_language and src_language != tgt_language
        languages = (str(src_language), str(tgt_language)) if known else ("src", "tgt")
    return ParallelTexts(name, source, target, str(languages[0]), str(languages[1]))


def _multi30k_dir(root: Path, pair: tuple[str, str]) -> Path:
    for base in (root / "parallel", root):
        for folder in (f"{pair[0]}-{pair[1]}", f"{pair[1]}-{pair[0]}"):
            path = base / folder / "multi30k"
            if path.is_dir():
                return path
    raise DataError(
        f"no Multi30k {pair[0]}-{pair[1]} folder under {root} "
        f"(expected parallel/{pair[0]}-{pair[1]}/multi30k); is --data-dir the shared data folder?"
    )


def multi30k_splits(directory: Path, pair: tuple[str, str]) -> list[str]:
    """Splits in ``directory`` that have files for both languages of ``pair``."""
    found = []
    for path in sorted(directory.glob(f"*.{pair[0]}.gz")):
        split = path.name.removesuffix(f".{pair[0]}.gz")
        if (directory / f"{split}.{pair[1]}.gz").is_file():
            found.append(split)
    return found


def load_multi30k(
    data_dir: str | Path | None = None,
    split: str = "test_2016_flickr",
    pair: tuple[str, str] = ("en", "de"),
    limit: int | None = None,
) -> ParallelTexts:
    """Multi30k image captions from ``<data_dir>/parallel/<a>-<b>/multi30k/<split>.<lang>.gz``.

    ``pair`` orders the result: ``("de", "en")`` gives German sources. The set is named
    ``multi30k-<split>``.
    """
    root = resolve_data_dir(data_dir)
    directory = _multi30k_dir(root, pair)
    paths = [directory / f"{split}.{lang}.gz" for lang in pair]
    if not all(p.is_file() for p in paths):
        available = ", ".join(multi30k_splits(directory, pair)) or "none"
        raise DataError(
            f"unknown Multi30k split {split!r} for {pair[0]}-{pair[1]} in {directory}; "
            f"available: {available}"
        )
    return load_parallel(paths[0], paths[1], f"multi30k-{split}", limit, languages=pair)
