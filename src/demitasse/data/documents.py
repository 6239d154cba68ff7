"""A corpus or a set of queries without relevance judgements: the texts a label-free tune or
a search index needs, read the way the retrieval loaders read them."""

from __future__ import annotations

from pathlib import Path

from demitasse.data._retrieval_files import read_id_texts
from demitasse.data._text import require_file
from demitasse.data.files import read_texts


def read_documents(
    path: str | Path, *, with_title: bool = True, what: str = "the corpus"
) -> tuple[list[str], list[str]]:
    """Ids and texts of a documents (or, ``with_title=False``, queries) file, in file order.

    ``.txt`` (or ``.txt.gz``) holds one text per line, blank lines skipped; its ids are the
    line counts of the texts kept (``"1"``, ``"2"``, …). JSON Lines, TSV, CSV and Parquet
    files hold BEIR's ``_id``, ``text`` and optional ``title``, read as
    :func:`~demitasse.data.load_retrieval` reads them (a document is ``title + " " + text``).
    An empty file, or one without texts, is a one-line :class:`DataError`.
    """
    path = require_file(path)
    if path.name.lower().removesuffix(".gz").endswith(".txt"):
        texts = read_texts(path)
        return [str(i) for i in range(1, len(texts) + 1)], texts
    return read_id_texts(path, with_title=with_title, what=what)
