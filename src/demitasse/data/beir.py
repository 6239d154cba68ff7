"""Loader for retrieval data sets in the BEIR layout.

A BEIR folder holds ``corpus.jsonl`` or ``corpus.jsonl.gz`` (``_id``, ``title``, ``text``),
``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv`` (header
``query-id corpus-id score``). Documents are embedded as ``title + " " + text`` (stripped), as
BEIR and MTEB do; only queries judged in the split are kept, as BEIR evaluates no others.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demitasse.data._text import iter_lines, parse_json_line
from demitasse.errors import DataError

# The spelling MTEB and the BEIR paper use, so records name data sets as papers print them.
BEIR_NAMES: dict[str, str] = {
    "arguana": "ArguAna",
    "climate-fever": "ClimateFEVER",
    "cqadupstack": "CQADupstack",
    "dbpedia-entity": "DBPedia",
    "fever": "FEVER",
    "fiqa": "FiQA2018",
    "hotpotqa": "HotpotQA",
    "msmarco": "MSMARCO",
    "nfcorpus": "NFCorpus",
    "nq": "NQ",
    "quora": "QuoraRetrieval",
    "scidocs": "SCIDOCS",
    "scifact": "SciFact",
    "trec-covid": "TRECCOVID",
    "webis-touche2020": "Touche2020",
}


@dataclass(frozen=True)
class BeirDataset:
    """A retrieval data set: documents, the split's judged queries and their relevance grades.

    ``qrels[query_id][doc_id]`` is the graded relevance (0 = judged not relevant).
    """

    name: str
    corpus_ids: list[str]
    corpus_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]
    split: str = "test"

    def __repr__(self) -> str:
        judgements = sum(len(docs) for docs in self.qrels.values())
        return (
            f"BeirDataset({self.name!r}, split={self.split!r}, documents={len(self.corpus_ids)}, "
            f"queries={len(self.query_ids)}, qrels={judgements})"
        )


def beir_name(folder: str | Path) -> str:
    """``scifact`` → ``SciFact``; unknown folder names are kept as they are."""
    name = Path(folder).expanduser().resolve().name
    return BEIR_NAMES.get(name.lower(), name)


def _records(path: Path, fields: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line_number, object)`` for each non-blank JSON Lines record with ``fields``."""
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        record = parse_json_line(line, f"{path}:{lineno}")
        if not isinstance(record, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object")
        for name in fields:
            if name not in record:
                raise DataError(f"{path}:{lineno}: missing field {name!r}")
            if not isinstance(record[name], str | int) or isinstance(record[name], bool):
                raise DataError(f"{path}:{lineno}: field {name!r} must be a string")
        yield lineno, record


def _read_id_texts(path: Path, *, with_title: bool) -> tuple[list[str], list[str]]:
    ids: list[str] = []
    texts: list[str] = []
    seen: dict[str, int] = {}
    for lineno, record in _records(path, ("_id", "text")):
        doc_id = str(record["_id"])
        if doc_id in seen:
            raise DataError(
                f"{path}:{lineno}: duplicate _id {doc_id!r} (first on line {seen[doc_id]})"
            )
        seen[doc_id] = lineno
        text = str(record["text"])
        title = record.get("title") if with_title else None
        if title is not None and not isinstance(title, str):
            raise DataError(f"{path}:{lineno}: field 'title' must be a string")
        ids.append(doc_id)
        texts.append(f"{title} {text}".strip() if title else text.strip())
    if not ids:
        raise DataError(f"{path}: no records")
    return ids, texts


def _read_qrels(
    path: Path, query_ids: set[str], doc_ids: set[str], queries_path: Path, corpus_path: Path
) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in iter_lines(path):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) < 3:
            raise DataError(
                f"{path}:{lineno}: expected 3 tab-separated fields "
                f"(query-id, corpus-id, score), got {len(fields)}"
            )
        query_id, doc_id, grade = fields[:3]
        try:
            score = int(grade)
        except ValueError:
            if lineno == 1:  # the header
                continue
            raise DataError(f"{path}:{lineno}: score {grade!r} is not an integer") from None
        if query_id not in query_ids:
            raise DataError(f"{path}:{lineno}: query id {query_id!r} is not in {queries_path}")
        if doc_id not in doc_ids:
            raise DataError(f"{path}:{lineno}: corpus id {doc_id!r} is not in {corpus_path}")
        # A repeated pair overrides the earlier grade, as BEIR's loader does.
        qrels.setdefault(query_id, {})[doc_id] = score
    if not qrels:
        raise DataError(f"{path}: no relevance judgements")
    return qrels


def _corpus_path(folder: Path) -> Path:
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    raise DataError(f"{folder}: no corpus.jsonl or corpus.jsonl.gz (is this a BEIR folder?)")


def beir_splits(folder: str | Path) -> list[str]:
    """The splits with a ``qrels/<split>.tsv`` file, sorted."""
    return sorted(p.stem for p in (Path(folder).expanduser() / "qrels").glob("*.tsv"))


def load_beir(folder: str | Path, split: str = "test", name: str | None = None) -> BeirDataset:
    """Load a BEIR-layout folder; ``name`` defaults to the BEIR spelling of the folder name.

    Splits other than ``test`` are named ``"<name>/<split>"``, as the STS loaders do.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DataError(f"BEIR folder {folder} does not exist")
    corpus_path = _corpus_path(folder)
    queries_path = folder / "queries.jsonl"
    if not queries_path.is_file():
        raise DataError(f"{folder}: no queries.jsonl (is this a BEIR folder?)")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        known = ", ".join(beir_splits(folder)) or "none"
        raise DataError(f"{folder}: unknown split {split!r} (no qrels/{split}.tsv); have: {known}")

    base = name or beir_name(folder)
    return load_retrieval(
        corpus_path,
        queries_path,
        qrels_path,
        name=base if split == "test" else f"{base}/{split}",
        split=split,
    )


def load_retrieval(
    corpus: str | Path,
    queries: str | Path,
    qrels: str | Path,
    name: str = "retrieval",
    split: str = "test",
) -> BeirDataset:
    """A retrieval set from the three BEIR files: ``corpus.jsonl`` and ``queries.jsonl``
    (``_id``, ``text``, optional ``title``; ``.gz`` too) and a ``qrels`` TSV
    (query-id, corpus-id, score; header optional)."""
    paths = [Path(p).expanduser() for p in (corpus, queries, qrels)]
    for path in paths:
        if not path.is_file():
            raise DataError(f"{path} does not exist or is not a file")
    corpus_path, queries_path, qrels_path = paths
    corpus_ids, corpus_texts = _read_id_texts(corpus_path, with_title=True)
    all_query_ids, all_query_texts = _read_id_texts(queries_path, with_title=False)
    judgements = _read_qrels(
        qrels_path, set(all_query_ids), set(corpus_ids), queries_path, corpus_path
    )
    # Queries in file order, restricted to the judged ones.
    judged = [
        (q, t) for q, t in zip(all_query_ids, all_query_texts, strict=True) if q in judgements
    ]
    return BeirDataset(
        name=name,
        corpus_ids=corpus_ids,
        corpus_texts=corpus_texts,
        query_ids=[q for q, _ in judged],
        query_texts=[t for _, t in judged],
        qrels=judgements,
        split=split,
    )
