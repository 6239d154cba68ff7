"""Loaders for retrieval data sets: BEIR-layout folders, and the user's own three files.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``, any other fields ignored),
``queries.jsonl`` (``_id``, ``text``), each possibly gzipped, and ``qrels/<split>.tsv``
(header ``query-id corpus-id score``; CRLF line ends are fine). Documents are embedded as
``title + " " + text`` (stripped), as BEIR and MTEB do; only queries judged in the split are
kept, as BEIR evaluates no others.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demitasse.data._retrieval_files import Judgement, read_id_texts, read_judgements
from demitasse.errors import DataError

logger = logging.getLogger(__name__)

#: What to do with qrels that name ids missing from the corpus or the queries.
UNKNOWN_IDS = ("error", "warn", "auto")
#: ``"auto"`` takes a published set's few unknown ids (ArguAna's qrels name documents missing
#: from its corpus, NFCorpus's name queries missing from its queries file) up to this share of
#: the judgements; more means the files do not belong together.
TOLERATED_UNKNOWN = 0.05

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


def _unknown_ids_error(
    rows: list[Judgement], bad: list[Judgement], kind: str, where_known: Path
) -> DataError:
    """``kind`` is ``"query"`` or ``"corpus"``: say how many ids are unknown, with examples."""
    key = "query_id" if kind == "query" else "doc_id"
    unknown = list(dict.fromkeys(getattr(r, key) for r in bad))
    total = len({getattr(r, key) for r in rows})
    examples = ", ".join(repr(i) for i in unknown[:3])
    return DataError(
        f"{bad[0].where}: {kind} id {unknown[0]!r} is not in {where_known}; "
        f"{len(unknown)} of the {total} {kind} ids in these qrels are unknown (e.g. {examples})"
    )


def _judgements(
    rows: list[Judgement],
    query_ids: set[str],
    doc_ids: set[str],
    paths: tuple[Path, Path, Path],
    unknown_ids: str,
) -> dict[str, dict[str, int]]:
    """``{query_id: {doc_id: grade}}`` for the known queries (see :func:`load_retrieval` for
    unknown ids)."""
    corpus_path, queries_path, qrels_path = paths
    bad_queries = [r for r in rows if r.query_id not in query_ids]
    bad_docs = [r for r in rows if r.doc_id not in doc_ids]
    checks = ((bad_queries, "query", queries_path), (bad_docs, "corpus", corpus_path))
    share = sum(r.query_id not in query_ids or r.doc_id not in doc_ids for r in rows) / len(rows)
    for bad, kind, known in checks:
        if not bad:
            continue
        error = _unknown_ids_error(rows, bad, kind, known)
        if unknown_ids == "error":
            raise error
        if unknown_ids == "auto" and share > TOLERATED_UNKNOWN:
            raise DataError(
                f"{error}; {100 * share:.1f} % of the judgements name unknown ids, more than "
                f"the {100 * TOLERATED_UNKNOWN:g} % a published set may have: do these files "
                "belong together?"
            )
        consequence = (
            "their judgements are left out"
            if kind == "query"
            else "kept as relevant documents no search can find, as BEIR and MTEB score them"
        )
        logger.warning("%s; %s", error, consequence)
    qrels: dict[str, dict[str, int]] = {}
    for row in rows:
        if row.query_id in query_ids:
            # A repeated pair overrides the earlier grade, as BEIR's loader does.
            qrels.setdefault(row.query_id, {})[row.doc_id] = row.grade
    if not qrels:
        raise DataError(f"{qrels_path}: no judgement names a query of {queries_path}")
    return qrels


def _judged_queries(
    query_ids: list[str],
    query_texts: list[str],
    qrels: dict[str, dict[str, int]],
    queries_path: Path,
    judged_elsewhere: set[str],
) -> tuple[list[str], list[str]]:
    """The judged queries in file order; the others are left out, with a warning for those
    that no split judges (a BEIR folder's queries file serves all its splits)."""
    judged = [(q, t) for q, t in zip(query_ids, query_texts, strict=True) if q in qrels]
    unjudged = [q for q in query_ids if q not in qrels and q not in judged_elsewhere]
    if unjudged:
        logger.warning(
            "%s: %d of its %d queries have no relevance judgement and are left out (e.g. %r)",
            queries_path, len(unjudged), len(query_ids), unjudged[0],
        )  # fmt: skip
    return [q for q, _ in judged], [t for _, t in judged]


def _find(folder: Path, name: str) -> Path | None:
    """``folder/name`` or its gzipped copy, whichever exists."""
    paths = (folder / name, folder / f"{name}.gz")
    return next((path for path in paths if path.is_file()), None)


def _corpus_path(folder: Path) -> Path:
    found = _find(folder, "corpus.jsonl")
    if found is not None:
        return found
    nested = sorted(
        p.name for p in folder.iterdir() if p.is_dir() and _find(p, "corpus.jsonl") is not None
    )
    if nested:  # CQADupStack ships one BEIR folder per forum
        raise DataError(
            f"{folder}: no corpus.jsonl here, but its sub-folders {', '.join(nested[:12])} are "
            "BEIR folders: pass one of those (eval's --beir takes the folder and scores each)"
        )
    raise DataError(f"{folder}: no corpus.jsonl or corpus.jsonl.gz (is this a BEIR folder?)")


def _split_files(folder: Path) -> dict[str, Path]:
    qrels = folder / "qrels"
    if not qrels.is_dir():
        return {}
    tables = [
        p for p in qrels.iterdir() if p.is_file() and p.name.removesuffix(".gz").endswith(".tsv")
    ]
    # Sorted in reverse, so that where both exist the plain "x.tsv" overrides "x.tsv.gz".
    files = {
        p.name.removesuffix(".gz").removesuffix(".tsv"): p for p in sorted(tables, reverse=True)
    }
    return dict(sorted(files.items()))


def beir_splits(folder: str | Path) -> list[str]:
    """The splits with a ``qrels/<split>.tsv`` (or ``.tsv.gz``) file, sorted."""
    return list(_split_files(Path(folder).expanduser()))


#: The judgements an evaluation reads when no split is named: test, or dev where a folder has
#: no test judgements (BEIR's MS MARCO folder, which BEIR and MTEB evaluate on dev).
EVALUATION_SPLITS = ("test", "dev")


def first_split(folder: str | Path, candidates: Sequence[str]) -> str | None:
    """The first of ``candidates`` that ``folder`` has judgements for, or None."""
    have = beir_splits(folder)
    return next((split for split in candidates if split in have), None)


def _query_ids_of(path: Path) -> set[str]:
    """The query ids an other split judges; an unreadable file judges none."""
    try:
        return {row.query_id for row in read_judgements(path)}
    except DataError:
        return set()


def load_beir(
    folder: str | Path,
    split: str = "test",
    name: str | None = None,
    *,
    unknown_ids: str = "auto",
) -> BeirDataset:
    """Load a BEIR-layout folder as published: ``corpus.jsonl`` and ``queries.jsonl`` (each
    may be gzipped), ``qrels/<split>.tsv`` (or ``.tsv.gz``). ``name`` defaults to the BEIR
    spelling of the folder name; splits other than ``test`` are named ``"<name>/<split>"``, as
    the STS loaders do. ``unknown_ids`` as in :func:`load_retrieval`.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DataError(f"BEIR folder {folder} does not exist")
    corpus_path = _corpus_path(folder)
    queries_path = _find(folder, "queries.jsonl")
    if queries_path is None:
        raise DataError(f"{folder}: no queries.jsonl (is this a BEIR folder?)")
    splits = _split_files(folder)
    if split not in splits:
        known = ", ".join(splits) or "none"
        raise DataError(f"{folder}: unknown split {split!r} (no qrels/{split}.tsv); have: {known}")
    elsewhere = set().union(*(_query_ids_of(p) for s, p in splits.items() if s != split))
    base = name or beir_name(folder)
    return _load(
        (corpus_path, queries_path, splits[split]),
        name=base if split == "test" else f"{base}/{split}",
        split=split,
        unknown_ids=unknown_ids,
        judged_elsewhere=elsewhere,
    )


def load_beir_folders(
    folders: Sequence[str | Path], split: str | None = None, *, unknown_ids: str = "auto"
) -> list[BeirDataset]:
    """One data set per BEIR folder (see :func:`load_beir`); their names must differ.
    ``split`` None: each folder's first of :data:`EVALUATION_SPLITS` (test, else dev).

    A folder without a corpus whose sub-folders are BEIR folders (CQADupStack ships one per
    forum) stands for all of them, each named ``"<folder>/<sub-folder>"``: BEIR reports
    CQADupStack as the average over its forums, which the retrieval task's ``avg`` row is
    when the folder is the only one given.
    """
    if isinstance(folders, str | Path):
        folders = [folders]
    if not folders:
        raise DataError("no BEIR folders given")
    datasets: list[BeirDataset] = []
    origin: dict[str, Path] = {}
    for folder, name in (part for f in folders for part in _beir_parts(Path(f).expanduser())):
        chosen = split or first_split(folder, EVALUATION_SPLITS) or "test"
        if split is None and chosen != "test":
            logger.info("%s: no test judgements; evaluating its %s split", folder, chosen)
        dataset = load_beir(folder, chosen, name, unknown_ids=unknown_ids)
        if dataset.name in origin:
            raise DataError(
                f"{folder}: a second data set named {dataset.name!r} (the first is "
                f"{origin[dataset.name]}); rename one folder"
            )
        origin[dataset.name] = Path(folder)
        datasets.append(dataset)
    return datasets


def _beir_parts(folder: Path) -> list[tuple[Path, str | None]]:
    """``folder`` itself, or the BEIR folders inside it when it holds no corpus."""
    if not folder.is_dir() or _find(folder, "corpus.jsonl") is not None:
        return [(folder, None)]
    nested = sorted(p for p in folder.iterdir() if p.is_dir() and _find(p, "corpus.jsonl"))
    if not nested:
        return [(folder, None)]  # load_beir says what is missing
    logger.info("%s: %d BEIR folders inside, each scored", folder, len(nested))
    return [(p, f"{beir_name(folder)}/{p.name}") for p in nested]


def load_retrieval(
    corpus: str | Path,
    queries: str | Path,
    qrels: str | Path,
    name: str = "retrieval",
    split: str = "test",
    *,
    unknown_ids: str = "auto",
) -> BeirDataset:
    """A retrieval set from three files: documents and queries as JSON Lines (BEIR's
    ``_id``, ``text``, optional ``title``), TSV, CSV or Parquet tables with those columns, and
    qrels as BEIR's TSV (query-id, corpus-id, score; header optional) or a table with those
    columns; all but Parquet may be gzipped (see ``demitasse.data._retrieval_files``).

    Only judged queries are kept; the others are left out with a logged warning. Some
    published sets have qrels that name a few ids missing from the other files (ArguAna's
    name documents missing from its corpus, NFCorpus's queries missing from its queries file).
    With ``unknown_ids="auto"`` (the default) such judgements are taken with a logged warning
    (how many, with examples) while they are at most 5 % of the judgements and a judged
    query remains; more is a one-line error, as the files then hardly belong together.
    ``"warn"`` takes any number, ``"error"`` none. Taken judgements of unknown queries are
    left out; unknown documents stay judged relevant, unreachable, as BEIR and MTEB score them.
    """
    paths = [Path(p).expanduser() for p in (corpus, queries, qrels)]
    for path in paths:
        if not path.is_file():
            raise DataError(f"{path} does not exist or is not a file")
    return _load(
        (paths[0], paths[1], paths[2]),
        name=name,
        split=split,
        unknown_ids=unknown_ids,
        judged_elsewhere=set(),
    )


def _load(
    paths: tuple[Path, Path, Path],
    *,
    name: str,
    split: str,
    unknown_ids: str,
    judged_elsewhere: set[str],
) -> BeirDataset:
    if unknown_ids not in UNKNOWN_IDS:
        raise DataError(f"unknown_ids must be one of {', '.join(UNKNOWN_IDS)}, got {unknown_ids!r}")
    corpus_path, queries_path, qrels_path = paths
    corpus_ids, corpus_texts = read_id_texts(corpus_path, with_title=True, what="the corpus")
    all_ids, all_texts = read_id_texts(queries_path, with_title=False, what="the queries file")
    judgements = _judgements(
        read_judgements(qrels_path), set(all_ids), set(corpus_ids), paths, unknown_ids
    )
    query_ids, query_texts = _judged_queries(
        all_ids, all_texts, judgements, queries_path, judged_elsewhere
    )
    return BeirDataset(
        name=name,
        corpus_ids=corpus_ids,
        corpus_texts=corpus_texts,
        query_ids=query_ids,
        query_texts=query_texts,
        qrels=judgements,
        split=split,
    )
