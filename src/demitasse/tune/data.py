"""The user's data a tune decides on, in one of three kinds.

- ``"retrieval"``: a corpus, queries and relevance judgements (a BEIR folder, or three files);
  quality is nDCG@10 of the configuration's search.
- ``"pairs"``: scored sentence pairs (STS-like); quality is the Spearman correlation of the
  configuration's similarities with the scores.
- ``"label-free"``: only a corpus (and optionally queries); quality is the label-free estimate,
  how many of the full model's top-10 neighbours the configuration's search keeps.

Compressors and quantisers are always fitted on the corpus (the pairs' sentences when pairs
come alone), never on queries or judgements.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from demitasse.data import (
    BeirDataset,
    ScoredPairs,
    load_beir,
    load_retrieval,
    load_sts_path,
    read_documents,
)
from demitasse.data.beir import first_split
from demitasse.errors import DataError

logger = logging.getLogger(__name__)

KINDS = ("retrieval", "pairs", "label-free")


@dataclass(frozen=True)
class TuneData:
    """What a tune fits on (``corpus``) and scores on (``queries`` with ``dataset``'s
    judgements, ``pairs``, or the corpus itself)."""

    kind: str
    name: str
    corpus: list[str]
    queries: list[str]
    dataset: BeirDataset | None = None
    pairs: ScoredPairs | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DataError(f"unknown tune data kind {self.kind!r}")
        if len(self.corpus) < 2:
            raise DataError(
                f"{self.name}: the corpus has {len(self.corpus)} text(s); fitting a compressor "
                "and calibrating codes needs at least 2"
            )

    def texts(self) -> list[str]:
        """Every text to embed, each once."""
        pair_texts = [] if self.pairs is None else self.pairs.texts()
        return list(dict.fromkeys([*self.corpus, *self.queries, *pair_texts]))

    def fingerprint(self) -> str:
        """A hash of everything the scores depend on: texts, judgements, scores."""
        digest = hashlib.sha256(self.kind.encode())
        for part in (self.corpus, self.queries):
            digest.update(json.dumps(part, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if self.dataset is not None:
            digest.update(json.dumps(self.dataset.qrels, sort_keys=True).encode())
            digest.update(json.dumps(self.dataset.query_ids).encode())
        if self.pairs is not None:
            sides = (self.pairs.sentences1, self.pairs.sentences2)
            digest.update(json.dumps(sides, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            digest.update(self.pairs.scores.astype("float64").tobytes())
        return digest.hexdigest()[:24]

    def describe(self) -> str:
        if self.kind == "retrieval":
            return f"{self.name}: {len(self.corpus)} documents, {len(self.queries)} judged queries"
        if self.kind == "pairs":
            assert self.pairs is not None
            return (
                f"{self.name}: {len(self.pairs)} scored pairs, fitted on {len(self.corpus)} texts"
            )
        queries = f"{len(self.queries)} queries" if self.queries else "documents as queries"
        return f"{self.name}: {len(self.corpus)} documents, {queries}, no judgements"


def load_tune_data(
    *,
    beir: str | Path | None = None,
    split: str | None = None,
    corpus: str | Path | None = None,
    queries: str | Path | None = None,
    qrels: str | Path | None = None,
    pairs: str | Path | None = None,
) -> TuneData:
    """The data a tune decides on, from exactly one of: a BEIR folder (``beir`` + ``split``,
    see :func:`tune_split`); ``corpus`` + ``queries`` + ``qrels`` files; scored ``pairs``
    (fitted on ``corpus`` when given, else on the pairs' sentences); or ``corpus`` alone,
    optionally with ``queries`` (label-free)."""
    _check_combination(beir, corpus, queries, qrels, pairs)
    if beir is not None:
        return _retrieval(load_beir(beir, tune_split(beir, split)))
    if qrels is not None:
        assert corpus is not None and queries is not None
        return _retrieval(load_retrieval(corpus, queries, qrels, name=_stem(corpus)))
    if pairs is not None:
        scored = load_sts_path(pairs)
        fit_texts = scored.texts() if corpus is None else _documents(corpus)
        return TuneData("pairs", scored.name, list(dict.fromkeys(fit_texts)), [], pairs=scored)
    assert corpus is not None
    query_texts = [] if queries is None else _documents(queries, queries=True)
    return TuneData("label-free", _stem(corpus), _documents(corpus), query_texts)


def tune_split(beir: str | Path, split: str | None) -> str:
    """The judgements of a BEIR folder a tune decides on: ``split`` when given, else its
    train judgements, else its dev ones. Test judgements only when named: a configuration
    chosen on the queries it is then evaluated with scores optimistically there."""
    if split is None:
        split = first_split(beir, ("train", "dev"))
        if split is None:
            raise DataError(
                f"{beir} has no train or dev judgements: tuning on its test judgements "
                "chooses on the queries you evaluate with; give --split test to do so knowingly"
            )
    if split == "test":
        logger.warning(
            "tuning on the test judgements: figures measured on them afterwards are optimistic"
        )
    return split


def _check_combination(
    beir: object, corpus: object, queries: object, qrels: object, pairs: object
) -> None:
    given = {
        "--beir": beir,
        "--corpus": corpus,
        "--queries": queries,
        "--qrels": qrels,
        "--pairs": pairs,
    }
    named = [flag for flag, value in given.items() if value is not None]
    if not named:
        raise DataError(
            "give the data to tune on: --beir DIR, --corpus/--queries/--qrels files, "
            "--pairs FILE, or --corpus FILE alone (label-free)"
        )
    if beir is not None and len(named) > 1:
        raise DataError(f"--beir holds corpus, queries and qrels: give it without {named[1]}")
    if pairs is not None and (queries is not None or qrels is not None):
        raise DataError("--pairs are scored on their own: give them without --queries/--qrels")
    if qrels is not None and (corpus is None or queries is None):
        raise DataError("--qrels judge documents of --corpus for --queries: give all three")
    if queries is not None and corpus is None:
        raise DataError("--queries search a corpus: give --corpus too")


def _retrieval(dataset: BeirDataset) -> TuneData:
    return TuneData(
        "retrieval",
        dataset.name,
        list(dict.fromkeys(dataset.corpus_texts)),
        list(dataset.query_texts),
        dataset=dataset,
    )


def _documents(path: str | Path, *, queries: bool = False) -> list[str]:
    what = "the queries file" if queries else "the corpus"
    _, texts = read_documents(path, with_title=not queries, what=what)
    kept = [text for text in texts if text]
    if not kept:
        raise DataError(f"{path}: {what} holds no text")
    return list(dict.fromkeys(kept)) if not queries else kept


def _stem(path: str | Path) -> str:
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".parquet", ".tsv", ".csv", ".txt"):
        name = name.removesuffix(suffix)
    return name or "corpus"
