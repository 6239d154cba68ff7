"""The unlabeled English sentences of the shared data (``unlabeled/en/*.txt.gz``)."""

from __future__ import annotations

import random
from collections.abc import Collection
from pathlib import Path

from demitasse.data.files import read_corpus
from demitasse.data.paths import resolve_data_dir
from demitasse.errors import DataError


def load_unlabeled(
    data_dir: str | Path | None = None,
    n: int | None = None,
    seed: int = 0,
    exclude: Collection[str] = (),
    min_words: int = 3,
) -> list[str]:
    """``n`` distinct sentences of at least ``min_words`` words (all of them when ``n`` is
    None), none of them in ``exclude``, in a shuffled order fixed by ``seed``."""
    folder = resolve_data_dir(data_dir) / "unlabeled" / "en"
    if not any(folder.glob("*.txt.gz")):
        raise DataError(f"no unlabeled corpora (*.txt.gz) in {folder}")
    excluded = set(exclude)
    pool = [t for t in read_corpus(folder) if t not in excluded and len(t.split()) >= min_words]
    random.Random(seed).shuffle(pool)
    return pool if n is None else pool[:n]
