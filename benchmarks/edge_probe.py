"""Trust at the edges (issue #49): bad inputs, tampered models, signals, hostile requests.

Each case is checked from outside, as a user meets it: the command line and the server.

A work folder is built once: two tiny random transformer encoders, models fitted on them and on
random vectors (with an ONNX graph, without one, vectors-only), a LanceDB table, good and bad
inputs of every kind the commands read, and files of the user's. Then each case runs
``demitasse`` in a subprocess (OMP_NUM_THREADS=1, HF_HUB_OFFLINE=1, DEMITASSE_CACHE inside the
work folder), with the work folder hashed before and after, and is classified:

- ok-refused: exit 2, one line on stderr, no traceback; ok-succeeded: exit 0 where success is
  right; ok-interrupted: a signal ended it with 128 + the signal's number and at most one line;
- traceback, other-exit, multi-line-error, timeout; files-lost-or-changed (a file or folder
  demitasse did not write was removed, changed or written into, or a pickle in an input ran);
  left-files (a refused run left files, or any run left a ``.dt-`` temporary);
  accepted-bad-input (exit 0 where it must refuse: a changed encoder, a damaged directory);
  refused-good-input (exit 2 where it must succeed).

Cases whose right answer is open (success or a refusal are both defensible) pass either way;
those that succeeded are listed on the page for a human to judge. The server is started once
(``--body-timeout 2``) and sent hostile requests over raw sockets; every answer must be a 2xx,
or a 4xx / 503 with OpenAI's ``{"error": {...}}`` JSON: never a 500, never another body, and
the server keeps serving (server outcomes: http-5xx, non-json-answer, bad-error-body,
other-status, no-answer, server-died, and traceback for one in the server's log).

    python benchmarks/edge_probe.py                  # everything: ~1,380 cases, about an hour
    python benchmarks/edge_probe.py --jobs 2         # on an idle machine of 2 cores or more
    python benchmarks/edge_probe.py --only encode/ --every 5 --work /tmp/edge --keep

A run with ``--only``, ``--every`` or ``--limit`` prints its page and writes nothing unless
``--write``; ``--list`` names every case without building anything.
To reproduce a failing case: run it alone with ``--work DIR --keep`` and rerun the command the
page shows with ``W=DIR``, the environment of the page's header and the case's folder kept.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import hashlib
import io
import itertools
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from _common import HERE, RESULTS_MD, log, page_head
from demitasse.evaluation import ResultRecord, machine_description, write_records
from demitasse.report import markdown_table
from lab.results_file import update_section

NAME = "edge_probe"

# Expectations.
SUCCEED, REFUSE, EITHER, INTERRUPT = "succeed", "refuse", "either", "interrupt"

# Outcomes: the good ones, then the failures.
OK_REFUSED, OK_SUCCEEDED, OK_INTERRUPTED = "ok-refused", "ok-succeeded", "ok-interrupted"
TRACEBACK, OTHER_EXIT, MULTI_LINE = "traceback", "other-exit", "multi-line-error"
LOST, LEFT_FILES, TIMEOUT = "files-lost-or-changed", "left-files", "timeout"
ACCEPTED_BAD, REFUSED_GOOD = "accepted-bad-input", "refused-good-input"
HTTP_500, NON_JSON, BAD_ERROR = "http-5xx", "non-json-answer", "bad-error-body"
NO_ANSWER, SERVER_DIED, OTHER_STATUS = "no-answer", "server-died", "other-status"
GOOD = (OK_REFUSED, OK_SUCCEEDED, OK_INTERRUPTED)
FAILURES = (
    TRACEBACK, LOST, ACCEPTED_BAD, TIMEOUT, HTTP_500, SERVER_DIED, NO_ANSWER, NON_JSON,
    BAD_ERROR, OTHER_EXIT, OTHER_STATUS, MULTI_LINE, REFUSED_GOOD, LEFT_FILES,
)  # fmt: skip
OUTCOMES = (*GOOD, *FAILURES)

#: Top-level folders of the work folder that no case's snapshot covers: the cache (demitasse's
#: own), the cases' folders (each case snapshots its own) and the server's log.
UNWATCHED = frozenset({"cache", "cases", "server"})
TEMPORARY_PREFIX = ".dt-"
TRACEBACK_LINE = "Traceback (most recent call last)"

WORDS = (
    "a the man woman dog cat is are playing guitar piano running eating food plays sits on mat"
    " . , and in park child girl boy car red blue"
).split()


# --------------------------------------------------------------------------------------------
# Cases and results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One run of the command line. Paths are absolute (the case folder is known in advance);
    ``{PORT}`` in an argument becomes a free loopback port."""

    name: str
    argv: tuple[str, ...]
    expect: str
    prepare: Callable[[Path], None] | None = None
    #: Paths (relative to the work folder) that may change, honoured only on exit 0.
    may_change: tuple[str, ...] = ()
    #: Paths under which new files may appear whatever the exit code (a resumable output).
    may_add: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    signal: tuple[int, float] | None = None
    timeout: float = 60.0
    serves: bool = False


@dataclass
class Result:
    name: str
    expect: str
    outcome: str
    command: str
    detail: str
    seconds: float
    returncode: int | None = None
    notes: list[str] = field(default_factory=list)


def slug(name: str) -> str:
    """A case's folder name: its name with every character but [A-Za-z0-9.-] as ``_`` (at most
    80 of them) and a short hash of the whole name, so that no two cases share a folder."""
    plain = "".join(c if c.isascii() and (c.isalnum() or c in ".-") else "_" for c in name)
    return f"{plain[:80]}-{hashlib.sha1(name.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"


def label(value: str, work: Path | None = None) -> str:
    """A value as a case's name shows it: the work folder as ``$W``, long ones cut."""
    if work is not None:
        value = value.replace(str(work), "$W")
    shown = repr(value)
    return shown if len(shown) <= 48 else f"{shown[:24]}…({len(value)} chars)"


def stderr_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def classify_cli(
    expect: str,
    returncode: int | None,
    stderr: str,
    *,
    lost: bool = False,
    left: bool = False,
    timed_out: bool = False,
    signum: int | None = None,
) -> str:
    """The outcome of one command-line run (the order is the order of severity)."""
    if timed_out:
        return TIMEOUT
    if lost:
        return LOST
    if TRACEBACK_LINE in stderr:
        return TRACEBACK
    lines = stderr_lines(stderr)
    if returncode == 0:
        if expect == REFUSE:
            return ACCEPTED_BAD
        return LEFT_FILES if left else OK_SUCCEEDED
    if expect == INTERRUPT and signum is not None and returncode in (128 + signum, -signum):
        if len(lines) > 1:
            return MULTI_LINE
        return LEFT_FILES if left else OK_INTERRUPTED
    if returncode == 2 and expect != INTERRUPT:
        if expect == SUCCEED:
            return REFUSED_GOOD
        if len(lines) != 1:
            return MULTI_LINE
        return LEFT_FILES if left else OK_REFUSED
    return OTHER_EXIT


def is_openai_error(body: Any) -> bool:
    """``{"error": {"message": str, "type": str, "param": ..., "code": ...}}``."""
    if not isinstance(body, dict) or set(body) != {"error"}:
        return False
    error = body["error"]
    return (
        isinstance(error, dict)
        and {"message", "type", "param", "code"} <= set(error)
        and isinstance(error["message"], str)
        and isinstance(error["type"], str)
    )


def classify_http(expect: str, status: int | None, body: bytes) -> str:
    """The outcome of one answer of the server."""
    if status is None:
        return NO_ANSWER
    if status >= 500 and status != 503:
        return HTTP_500
    if not (200 <= status < 300 or 400 <= status < 500 or status == 503):
        return OTHER_STATUS
    try:
        parsed = json.loads(body)
    except ValueError:
        return NON_JSON
    if 200 <= status < 300:
        return ACCEPTED_BAD if expect == REFUSE else OK_SUCCEEDED
    if not is_openai_error(parsed):
        return BAD_ERROR
    return REFUSED_GOOD if expect == SUCCEED else OK_REFUSED


def worst(outcomes: Iterable[str]) -> str:
    """The most severe of several outcomes (the order of :data:`OUTCOMES`, failures last)."""
    found = list(outcomes)
    failures = [o for o in FAILURES if o in found]
    if failures:
        return failures[0]
    return next((o for o in (OK_SUCCEEDED, OK_REFUSED, OK_INTERRUPTED) if o in found), NO_ANSWER)


# --------------------------------------------------------------------------------------------
# Snapshots of the user's files
# --------------------------------------------------------------------------------------------


def _entry(path: Path) -> str:
    if path.is_symlink():
        return "link:" + str(path.readlink())
    if path.is_dir():
        return "dir"
    if path.is_file():
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()
    return "special"


def snapshot(root: Path, prefix: str = "", skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """Every file, folder and link under ``root`` (links not followed) → its content hash,
    ``dir`` or ``link:TARGET``; keys relative to ``root``, with ``prefix``; top-level names in
    ``skip`` left out."""
    entries: dict[str, str] = {}
    if not root.is_dir():
        return entries
    for folder, dirnames, filenames in os.walk(root):
        relative = Path(folder).relative_to(root)
        if not relative.parts:
            dirnames[:] = sorted(d for d in dirnames if d not in skip)
            filenames = [f for f in filenames if f not in skip]
        for name in [*dirnames, *filenames]:
            path = Path(folder, name)
            with contextlib.suppress(OSError):  # removed while walking: absent
                entries[prefix + (relative / name).as_posix()] = _entry(path)
    return entries


def _under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def changes(
    before: dict[str, str], after: dict[str, str], allowed: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """What a run did to the snapshot: the paths removed or changed, and the paths added
    (``allowed`` prefixes excepted from both)."""
    changed = sorted(p for p, h in before.items() if after.get(p) != h and not _under(p, allowed))
    added = sorted(p for p in after if p not in before and not _under(p, allowed))
    return changed, added


def temporaries(paths: Iterable[str]) -> list[str]:
    return sorted(p for p in paths if any(part.startswith(TEMPORARY_PREFIX) for part in
                                          p.split("/")))  # fmt: skip


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@dataclass
class Fixtures:
    work: Path
    demitasse: list[str]
    env: dict[str, str]
    encoder: Path = Path()
    encoder2: Path = Path()
    models: dict[str, Path] = field(default_factory=dict)
    inputs: Path = Path()
    db: Path = Path()
    user: Path = Path()
    results: Path = Path()
    marker: Path = Path()

    def case_folder(self, name: str) -> Path:
        return self.work / "cases" / slug(name)

    def rel(self, path: Path) -> str:
        return path.relative_to(self.work).as_posix()


def demitasse_executable() -> list[str]:
    script = Path(sys.executable).with_name("demitasse")
    return [str(script)] if script.exists() else [sys.executable, "-m", "demitasse"]


def base_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEMITASSE_")}
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DEMITASSE_CACHE=str(work / "cache"),
        DEMITASSE_DATA=str(work / "no-data"),
        PYTHONUNBUFFERED="1",
    )
    return env


def tiny_encoder(folder: Path, layers: int) -> Path:
    """A randomly initialised BERT saved as a sentence-transformers model (nothing downloaded):
    hidden width 32, mean pooling, normalised."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6 moved the module classes
        from sentence_transformers.sentence_transformer import modules as st_modules
    except ImportError:
        from sentence_transformers import models as st_modules
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = BertTokenizerFast(str(vocab))
    torch.manual_seed(layers)
    config = BertConfig(
        vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=layers,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    BertModel(config).save_pretrained(folder / "raw")
    tokenizer.save_pretrained(folder / "raw")
    transformer = st_modules.Transformer(str(folder / "raw"), max_seq_length=32)
    pooling = st_modules.Pooling(32, pooling_mode="mean")
    modules = [transformer, pooling, st_modules.Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(folder / "model"))
    return folder / "model"


def sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 9)))) for _ in range(n)]


def _fixture_command(fx: Fixtures, *argv: str) -> None:
    done = subprocess.run(
        [*fx.demitasse, *argv], env=fx.env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"fixture command failed: demitasse {shlex.join(argv)}\n{done.stderr}")


def plan_fixtures(work: Path) -> Fixtures:
    """Where every fixture lives (the cases are made from this, before anything is built)."""
    fixtures = work / "fixtures"
    fx = Fixtures(work=work, demitasse=demitasse_executable(), env=base_env(work))
    fx.encoder, fx.encoder2 = fixtures / "tiny" / "model", fixtures / "tiny2" / "model"
    fx.inputs, fx.user, fx.marker = work / "inputs", work / "user", work / "pickle-ran"
    fx.models = {name: work / "models" / name for name in ("api", "api2", "tm", "tm2", "tmt")}
    fx.db, fx.results = fixtures / "db", fixtures / "results.json"
    return fx


def build_fixtures(fx: Fixtures) -> None:
    """Everything the cases read, built once (about a minute)."""
    tiny_encoder(fx.encoder.parent, layers=3)
    tiny_encoder(fx.encoder2.parent, layers=2)
    write_inputs(fx.inputs, fx.marker)
    (fx.user / "thesis").mkdir(parents=True)
    (fx.user / "notes.txt").write_text("my notes\n")
    (fx.user / "thesis" / "chapter.tex").write_text("\\chapter{precious}\n")
    inputs = fx.inputs
    fit_vectors = ("--compressor", "pca", "--dim", "8", "--precision", "int8")
    fit_texts = ("--model", str(fx.encoder), *fit_vectors)
    for name, argv in {
        "api": ("--vectors", str(inputs / "vectors.npy"), *fit_vectors),
        "api2": ("--vectors", str(inputs / "vectors2.npy"), *fit_vectors),
        "tm": ("--texts", str(inputs / "texts.txt"), *fit_texts),
        "tm2": ("--texts", str(inputs / "texts2.txt"), *fit_texts),
        "tmt": ("--texts", str(inputs / "texts.txt"), "--model", str(fx.encoder),
                "--compressor", "pca", "--dim", "8", "--no-onnx"),
    }.items():  # fmt: skip
        _fixture_command(fx, "fit", *argv, "--out", str(fx.models[name]))
    _fixture_command(fx, "index", str(fx.models["tm"]), "--input", str(inputs / "docs.jsonl"),
                     "--db", str(fx.db))  # fmt: skip
    write_records(fx.results, [_sample_record(score) for score in (71.5, 64.0)])
    write_bad_results(fx.inputs / "report", fx.results)


def _sample_record(score: float) -> ResultRecord:
    return ResultRecord(
        model="tiny", layer=None, method="pca", dim=8, precision="float32", task="sts",
        dataset="stsb", metric="spearman", score=score,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Inputs: good ones and every kind of bad one
# --------------------------------------------------------------------------------------------


def _lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _jsonl(path: Path, rows: Sequence[Any]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _table(path: Path, columns: dict[str, Any], schema: Any = None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns, schema=schema), path)


def _parquet_vectors(path: Path, vectors: Any, column: str = "embedding", **extra: Any) -> None:
    import pyarrow as pa

    rows = [None if v is None else list(map(float, v)) for v in vectors]
    _table(path, {"id": [f"v{i}" for i in range(len(rows))], column: pa.array(rows), **extra})


class _RunsOnLoad:
    """A pickle payload: unpickling it creates the marker folder (an input must never run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def write_inputs(folder: Path, marker: Path) -> None:
    folder.mkdir(parents=True)
    texts = sentences(120, seed=0)
    _lines(folder / "texts.txt", texts)
    _lines(folder / "texts2.txt", sentences(120, seed=1))
    _lines(folder / "big.txt", sentences(20000, seed=2))
    _jsonl(folder / "big.jsonl", [{"_id": f"b{i}", "text": t} for i, t in
                                  enumerate(sentences(20000, seed=3))])  # fmt: skip
    _jsonl(folder / "docs.jsonl", [{"_id": f"d{i}", "id": f"d{i}", "text": t}
                                   for i, t in enumerate(texts)])  # fmt: skip
    _jsonl(folder / "queries.jsonl", [{"_id": f"q{i}", "text": " ".join(t.split()[:3])}
                                      for i, t in enumerate(texts[:12])])  # fmt: skip
    qrels = ["query-id\tcorpus-id\tscore", *(f"q{i}\td{i}\t1" for i in range(12))]
    _lines(folder / "qrels.tsv", qrels)
    scored = enumerate(itertools.pairwise(texts))
    pairs = ["sentence1,sentence2,score", *(f"{a},{b},{i % 5}" for i, (a, b) in scored)]
    _lines(folder / "pairs.csv", pairs)
    write_text_inputs(folder / "texts", texts)
    write_vector_inputs(folder / "vectors", marker)
    rng = np.random.default_rng(0)
    np.save(folder / "vectors.npy", rng.standard_normal((120, 32)).astype(np.float32))
    np.save(folder / "vectors2.npy", rng.standard_normal((120, 32)).astype(np.float32) + 1)
    _parquet_vectors(folder / "vecs.parquet", np.load(folder / "vectors.npy"))
    np.save(folder / "bigvec.npy", rng.standard_normal((20000, 32)).astype(np.float32))


#: Text inputs: kind → (file name, default expectation). A file name of None: not created
#: by the writer (missing, or a special path).
TEXT_KINDS: dict[str, tuple[str, str]] = {
    "txt": ("texts.txt", SUCCEED),
    "jsonl": ("texts.jsonl", SUCCEED),
    "csv": ("texts.csv", SUCCEED),
    "tsv": ("texts.tsv", SUCCEED),
    "parquet": ("texts.parquet", SUCCEED),
    "txt-gz": ("texts.txt.gz", SUCCEED),
    "jsonl-gz": ("texts.jsonl.gz", SUCCEED),
    "crlf-bom": ("crlf-bom.txt", SUCCEED),
    "some-blank-lines": ("some-blank.txt", SUCCEED),
    "invalid-utf8": ("invalid-utf8.txt", SUCCEED),
    "latin1": ("latin1.txt", SUCCEED),
    "lone-surrogate-jsonl": ("surrogate.jsonl", SUCCEED),
    "huge-line": ("huge-line.txt", SUCCEED),
    "nul-bytes": ("nul.txt", EITHER),
    "utf16": ("utf16.txt", EITHER),
    "random-bytes": ("random-bytes.txt", EITHER),
    "jsonl-text-null": ("text-null.jsonl", EITHER),
    "jsonl-duplicate-key": ("dup-key.jsonl", EITHER),
    "csv-same-column-twice": ("dup-column.csv", EITHER),
    "csv-ragged": ("ragged.csv", EITHER),
    "csv-unclosed-quote": ("unclosed.csv", EITHER),
    "parquet-same-column-twice": ("dup-column.parquet", EITHER),
    "parquet-text-null": ("text-null.parquet", EITHER),
    "missing": ("missing.txt", REFUSE),
    "empty-txt": ("empty.txt", REFUSE),
    "empty-jsonl": ("empty.jsonl", REFUSE),
    "empty-csv": ("empty.csv", REFUSE),
    "empty-parquet-0-rows": ("zero-rows.parquet", REFUSE),
    "empty-parquet-0-bytes": ("zero-bytes.parquet", REFUSE),
    "blank-lines-only": ("blank.txt", REFUSE),
    "csv-header-only": ("header-only.csv", REFUSE),
    "directory": ("folder.txt", REFUSE),
    "unknown-extension": ("texts.docx", REFUSE),
    "no-extension": ("texts", REFUSE),
    "npy-as-texts": ("vectors.npy", REFUSE),
    "fake-gzip": ("fake.txt.gz", REFUSE),
    "jsonl-broken-line": ("broken.jsonl", REFUSE),
    "jsonl-array-line": ("array-line.jsonl", REFUSE),
    "jsonl-trailing-garbage": ("trailing.jsonl", REFUSE),
    "jsonl-deep-nesting": ("deep.jsonl", REFUSE),
    "jsonl-text-number": ("text-number.jsonl", REFUSE),
    "jsonl-text-list": ("text-list.jsonl", REFUSE),
    "jsonl-missing-column": ("no-text.jsonl", REFUSE),
    "csv-missing-column": ("no-text.csv", REFUSE),
    "parquet-missing-column": ("no-text.parquet", REFUSE),
    "parquet-int-column": ("int-text.parquet", REFUSE),
    "parquet-binary-column": ("binary-text.parquet", REFUSE),
    "parquet-truncated": ("truncated.parquet", REFUSE),
    "parquet-not-parquet": ("not.parquet", REFUSE),
    "symlink-loop": ("loop.txt", REFUSE),
    "dev-null": ("/dev/null", REFUSE),
}


def write_text_inputs(folder: Path, texts: list[str]) -> None:
    import pyarrow as pa

    folder.mkdir()
    rows = [{"_id": f"t{i}", "id": f"t{i}", "text": t} for i, t in enumerate(texts)]
    _lines(folder / "texts.txt", texts)
    _jsonl(folder / "texts.jsonl", rows)
    _lines(folder / "texts.csv", ["id,text", *(f"t{i},{t}" for i, t in enumerate(texts))])
    _lines(folder / "texts.tsv", ["id\ttext", *(f"t{i}\t{t}" for i, t in enumerate(texts))])
    _table(folder / "texts.parquet", {"id": [r["id"] for r in rows], "text": texts})
    (folder / "texts.txt.gz").write_bytes(gzip.compress(("\n".join(texts) + "\n").encode()))
    (folder / "texts.jsonl.gz").write_bytes(gzip.compress((folder / "texts.jsonl").read_bytes()))
    (folder / "crlf-bom.txt").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(texts).encode() + b"\r\n")
    _lines(folder / "some-blank.txt", [t if i % 3 else "" for i, t in enumerate(texts)])
    body = "\n".join(texts).encode()
    (folder / "invalid-utf8.txt").write_bytes(body.replace(b"dog", b"d\xffg\xc3"))
    (folder / "latin1.txt").write_bytes("\n".join(t + " café" for t in texts).encode("latin-1"))
    # Every table carries an id column, as index wants: its refusal is then about the texts.
    _jsonl(folder / "surrogate.jsonl", [{**r, "text": r["text"] + " \ud800 x"} for r in rows])
    _lines(folder / "huge-line.txt", [*texts[:60], "dog " * 500_000, *texts[60:]])
    (folder / "nul.txt").write_bytes(body.replace(b" is ", b" i\x00s "))
    (folder / "utf16.txt").write_text("\n".join(texts), encoding="utf-16")
    (folder / "random-bytes.txt").write_bytes(np.random.default_rng(0).bytes(4096))
    _jsonl(folder / "text-null.jsonl", [{**r, "text": None if i == 5 else r["text"]}
                                        for i, r in enumerate(rows)])  # fmt: skip
    (folder / "dup-key.jsonl").write_text(
        "".join(f'{{"_id": "t{i}", "text": "{t}", "text": "other"}}\n'
                for i, t in enumerate(texts)), encoding="utf-8",
    )  # fmt: skip
    _lines(folder / "dup-column.csv", ["id,text,text", *(f"t{i},{t},{t[::-1]}" for i, t in
                                                        enumerate(texts))])  # fmt: skip
    _lines(
        folder / "ragged.csv",
        [
            "id,text",
            *(f"{i},{t},extra,more" if i % 7 == 0 else f"{i},{t}" for i, t in enumerate(texts)),
        ],
    )
    _lines(
        folder / "unclosed.csv",
        ["id,text", '0,"never closed', *(f"{i},{t}" for i, t in enumerate(texts))],
    )
    ids = [r["id"] for r in rows]
    dup_schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("text", pa.string())])
    _table(folder / "dup-column.parquet", [pa.array(ids), pa.array(texts), pa.array(texts[::-1])],
           dup_schema)  # fmt: skip
    _table(folder / "text-null.parquet", {"id": ids, "text": [None if i == 5 else t for i, t in
                                                              enumerate(texts)]})  # fmt: skip
    _write_broken_texts(folder, texts, rows)
    _write_duplicate_ids(folder, texts)


def _write_broken_texts(folder: Path, texts: list[str], rows: list[dict[str, str]]) -> None:
    import pyarrow as pa

    (folder / "empty.txt").write_bytes(b"")
    (folder / "empty.jsonl").write_bytes(b"")
    (folder / "empty.csv").write_bytes(b"")
    _table(folder / "zero-rows.parquet", {"id": pa.array([], pa.string()),
                                          "text": pa.array([], pa.string())})  # fmt: skip
    (folder / "zero-bytes.parquet").write_bytes(b"")
    (folder / "blank.txt").write_text("\n \n\t\n\n")
    _lines(folder / "header-only.csv", ["id,text"])
    (folder / "folder.txt").mkdir()
    (folder / "texts.docx").write_text("\n".join(texts))
    (folder / "texts").write_text("\n".join(texts))
    np.save(folder / "vectors.npy", np.zeros((4, 32), np.float32))
    (folder / "fake.txt.gz").write_text("\n".join(texts))
    (folder / "broken.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows[:50]) + '{"text": "unfinished\n'
    )
    (folder / "array-line.jsonl").write_text(json.dumps(rows[0]) + "\n[1, 2]\n")
    (folder / "trailing.jsonl").write_text(json.dumps(rows[0]) + " junk\n")
    (folder / "deep.jsonl").write_text(json.dumps(rows[0]) + "\n" + "[" * 100_000 + "\n")
    _jsonl(folder / "text-number.jsonl", [*rows[:3], {"_id": "n", "id": "n", "text": 42}])
    _jsonl(folder / "text-list.jsonl", [*rows[:3], {"_id": "l", "id": "l", "text": ["a", "b"]}])
    _jsonl(folder / "no-text.jsonl", [{"_id": r["_id"], "id": r["id"], "body": r["text"]}
                                      for r in rows])  # fmt: skip
    _lines(folder / "no-text.csv", ["id,body", *(f"{i},{t}" for i, t in enumerate(texts))])
    ids = [r["id"] for r in rows]
    _table(folder / "no-text.parquet", {"id": ids, "body": texts})
    _table(folder / "int-text.parquet", {"id": ids, "text": list(range(len(texts)))})
    _table(folder / "binary-text.parquet", {"id": ids, "text": [t.encode() for t in texts]})
    data = (folder / "texts.parquet").read_bytes()
    (folder / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (folder / "not.parquet").write_text("\n".join(texts))
    (folder / "loop.txt").symlink_to("loop.txt")


def _write_duplicate_ids(folder: Path, texts: list[str]) -> None:
    ids = [f"t{i % 100}" for i in range(len(texts))]  # t0…t19 twice
    _jsonl(folder / "dup-ids.jsonl", [{"_id": i, "id": i, "text": t} for i, t in
                                      zip(ids, texts, strict=True)])  # fmt: skip
    _lines(
        folder / "dup-ids.csv", ["id,text", *(f"{i},{t}" for i, t in zip(ids, texts, strict=True))]
    )
    _table(folder / "dup-ids.parquet", {"id": ids, "text": texts})
    shards = folder / "dup-shards"
    shards.mkdir()
    _jsonl(shards / "a.jsonl", [{"id": "x", "text": texts[0]}, {"id": "y", "text": texts[1]}])
    _jsonl(shards / "b.jsonl", [{"id": "z", "text": texts[2]}, {"id": "x", "text": texts[3]}])


#: Vector inputs: kind → (file name, default expectation); every good one is 120 × 32, the
#: rows of docs.jsonl and the width of the models' encoders.
VECTOR_KINDS: dict[str, tuple[str, str]] = {
    "npy": ("vectors.npy", SUCCEED),
    "parquet": ("vectors.parquet", SUCCEED),
    "parquet-fixed-size-list": ("fixed.parquet", SUCCEED),
    "float16": ("float16.npy", SUCCEED),
    "float64": ("float64.npy", SUCCEED),
    "fortran-order": ("fortran.npy", SUCCEED),
    "fewer-rows": ("fewer-rows.npy", SUCCEED),
    "big-endian": ("big-endian.npy", EITHER),
    "all-zero": ("zeros.npy", EITHER),
    "huge-finite": ("huge.npy", EITHER),
    "parquet-same-column-twice": ("dup-column.parquet", EITHER),
    "missing": ("missing.npy", REFUSE),
    "empty-file": ("empty.npy", REFUSE),
    "directory": ("folder.npy", REFUSE),
    "txt-extension": ("vectors.txt", REFUSE),
    "texts-parquet": ("texts.parquet", REFUSE),
    "wrong-width": ("narrow.npy", REFUSE),
    "nan": ("nan.npy", REFUSE),
    "inf": ("inf.npy", REFUSE),
    "float64-overflow": ("overflow.npy", REFUSE),
    "int8": ("int8.npy", REFUSE),
    "uint8": ("uint8.npy", REFUSE),
    "int64": ("int64.npy", REFUSE),
    "bool": ("bool.npy", REFUSE),
    "complex": ("complex.npy", REFUSE),
    "pickled-object": ("pickle.npy", REFUSE),
    "structured-dtype": ("structured.npy", REFUSE),
    "1-d": ("one-d.npy", REFUSE),
    "3-d": ("three-d.npy", REFUSE),
    "0-d": ("zero-d.npy", REFUSE),
    "0-rows": ("zero-rows.npy", REFUSE),
    "0-columns": ("zero-columns.npy", REFUSE),
    "npy-truncated": ("truncated.npy", REFUSE),
    "npy-bad-header": ("bad-header.npy", REFUSE),
    "npz-named-npy": ("archive.npy", REFUSE),
    "npy-shape-bomb": ("shape-bomb.npy", REFUSE),
    "parquet-ragged": ("ragged.parquet", REFUSE),
    "parquet-null-row": ("null-row.parquet", REFUSE),
    "parquet-null-element": ("null-element.parquet", REFUSE),
    "parquet-nan": ("nan.parquet", REFUSE),
    "parquet-string-column": ("strings.parquet", REFUSE),
    "parquet-int-list": ("int-list.parquet", REFUSE),
    "parquet-nested-list": ("nested.parquet", REFUSE),
    "parquet-missing-column": ("no-embedding.parquet", REFUSE),
    "parquet-0-rows": ("zero-rows.parquet", REFUSE),
    "parquet-truncated": ("truncated.parquet", REFUSE),
}


def write_vector_inputs(folder: Path, marker: Path) -> None:
    import pyarrow as pa

    folder.mkdir()
    rng = np.random.default_rng(1)
    good = rng.standard_normal((120, 32)).astype(np.float32)
    np.save(folder / "vectors.npy", good)
    _parquet_vectors(folder / "vectors.parquet", good)
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(good.ravel()), 32)
    _table(folder / "fixed.parquet", {"embedding": fixed})
    np.save(folder / "float16.npy", good.astype(np.float16))
    np.save(folder / "float64.npy", good.astype(np.float64))
    np.save(folder / "fortran.npy", np.asfortranarray(good))
    np.save(folder / "fewer-rows.npy", good[:50])
    np.save(folder / "big-endian.npy", good.astype(">f4"))
    np.save(folder / "zeros.npy", np.zeros_like(good))
    np.save(folder / "huge.npy", good * np.float32(1e30))
    dup_schema = pa.schema([("embedding", pa.list_(pa.float32())),
                            ("embedding", pa.list_(pa.float32()))])  # fmt: skip
    _table(folder / "dup-column.parquet", [pa.array(good.tolist()), pa.array(good.tolist())],
           dup_schema)  # fmt: skip
    (folder / "empty.npy").write_bytes(b"")
    (folder / "folder.npy").mkdir()
    np.savetxt(folder / "vectors.txt", good)
    _table(folder / "texts.parquet", {"text": sentences(120, seed=4)})
    np.save(folder / "narrow.npy", good[:, :7])
    with_nan, with_inf = good.copy(), good.copy()
    with_nan[3, 4], with_inf[5, 6] = np.nan, np.inf
    np.save(folder / "nan.npy", with_nan)
    np.save(folder / "inf.npy", with_inf)
    overflow = good.astype(np.float64)
    overflow[7, 1] = 1e300
    np.save(folder / "overflow.npy", overflow)
    np.save(folder / "int8.npy", (good * 40).astype(np.int8))
    np.save(folder / "uint8.npy", np.packbits(good > 0, axis=1))
    np.save(folder / "int64.npy", (good * 40).astype(np.int64))
    np.save(folder / "bool.npy", good > 0)
    np.save(folder / "complex.npy", good.astype(np.complex64))
    payload = np.empty(120, dtype=object)
    payload[:] = [_RunsOnLoad(marker)] * 120
    np.save(folder / "pickle.npy", payload, allow_pickle=True)
    np.save(folder / "structured.npy", np.zeros(120, dtype=[("a", "f4", (32,))]))
    np.save(folder / "one-d.npy", good[0])
    np.save(folder / "three-d.npy", good.reshape(4, 30, 32))
    np.save(folder / "zero-d.npy", np.float32(1.0))
    np.save(folder / "zero-rows.npy", good[:0])
    np.save(folder / "zero-columns.npy", good[:, :0])
    data = (folder / "vectors.npy").read_bytes()
    (folder / "truncated.npy").write_bytes(data[: len(data) // 2])
    (folder / "bad-header.npy").write_bytes(data[:10] + b"{garbage}" + data[19:])
    with (folder / "archive.npy").open("wb") as handle:
        np.savez(handle, good)
    (folder / "shape-bomb.npy").write_bytes(npy_with_shape(data, "(100000000000, 32)"))
    _write_bad_parquet_vectors(folder, good)


def npy_with_shape(data: bytes, shape: str) -> bytes:
    """A .npy file's bytes whose header claims ``shape`` (the header's length kept: its
    padding absorbs the difference)."""
    end = data.index(b"\n") + 1
    header = data[10:end].decode("latin-1")
    start, stop = header.index("'shape': ") + 9, header.index("), ") + 1
    changed = header[:start] + shape + header[stop:]
    changed = changed.rstrip(" \n").ljust(len(header) - 1) + "\n"
    if len(changed) != len(header):
        raise ValueError(f"no room in the .npy header for the shape {shape}")
    return data[:10] + changed.encode("latin-1") + data[end:]


def _write_bad_parquet_vectors(folder: Path, good: np.ndarray) -> None:
    import pyarrow as pa

    rows: list[Any] = good.tolist()
    _parquet_vectors(folder / "ragged.parquet", [r[: 32 - (i % 2)] for i, r in enumerate(rows)])
    _parquet_vectors(folder / "null-row.parquet", [None if i == 3 else r for i, r in
                                                   enumerate(rows)])  # fmt: skip
    with_null = [list(r) for r in rows]
    with_null[4][2] = None
    _table(folder / "null-element.parquet", {"embedding": pa.array(with_null)})
    with_nan = [list(r) for r in rows]
    with_nan[4][2] = float("nan")
    _table(folder / "nan.parquet", {"embedding": pa.array(with_nan)})
    _table(folder / "strings.parquet", {"embedding": [" ".join(map(str, r)) for r in rows]})
    _table(folder / "int-list.parquet", {"embedding": [[int(x * 40) for x in r] for r in rows]})
    _table(folder / "nested.parquet", {"embedding": [[r] for r in rows]})
    _table(folder / "no-embedding.parquet", {"vector": rows})
    _table(folder / "zero-rows.parquet",
           {"embedding": pa.array([], pa.list_(pa.float32()))})  # fmt: skip
    data = (folder / "vectors.parquet").read_bytes()
    (folder / "truncated.parquet").write_bytes(data[: len(data) // 2])
    ids = [f"v{i % 100}" for i in range(len(rows))]
    _table(folder / "dup-ids.parquet", {"id": ids, "embedding": pa.array(rows)})


# --------------------------------------------------------------------------------------------
# The command-line cases
# --------------------------------------------------------------------------------------------


def text_input_cases(fx: Fixtures) -> list[Case]:
    """Every kind of text input × every command that reads texts."""
    tm, folder = str(fx.models["tm"]), fx.inputs / "texts"
    commands: dict[str, Callable[[str, Path], list[str]]] = {
        "encode": lambda i, c: ["encode", tm, "--input", i, "--out", str(c / "out.npy")],
        "fit": lambda i, c: ["fit", "--model", str(fx.encoder), "--texts", i, "--compressor",
                             "pca", "--dim", "4", "--no-onnx", "--out", str(c / "model")],
        "embed": lambda i, c: ["embed", tm, "--input", i, "--out", str(c / "codes"), "--quiet"],
        "index": lambda i, c: ["index", tm, "--input", i, "--db", str(c / "db")],
    }  # fmt: skip
    # Where a command reads a kind otherwise than the default says.
    overrides = {
        ("embed", "csv"): EITHER, ("embed", "tsv"): EITHER, ("embed", "directory"): EITHER,
        ("embed", "empty-txt"): EITHER, ("embed", "empty-jsonl"): EITHER,
        ("embed", "empty-csv"): EITHER, ("embed", "empty-parquet-0-rows"): EITHER,
        ("embed", "blank-lines-only"): EITHER, ("embed", "csv-header-only"): EITHER,
        ("embed", "no-extension"): EITHER,
        ("index", "tsv"): EITHER, ("index", "txt-gz"): EITHER, ("index", "jsonl-gz"): EITHER,
        ("index", "crlf-bom"): EITHER, ("index", "some-blank-lines"): EITHER,
        ("fit", "jsonl-text-null"): SUCCEED, ("fit", "parquet-text-null"): SUCCEED,
    }  # fmt: skip
    cases = []
    for command, argv in commands.items():
        for kind, (name, expect) in TEXT_KINDS.items():
            path = name if name.startswith("/") else str(folder / name)
            case = f"{command}/texts/{kind}"
            cases.append(Case(case, tuple(argv(path, fx.case_folder(case))),
                              overrides.get((command, kind), expect)))  # fmt: skip
    onnx = ["txt", "huge-line", "nul-bytes", "invalid-utf8", "lone-surrogate-jsonl", "utf16",
            "random-bytes", "some-blank-lines", "parquet", "crlf-bom"]  # fmt: skip
    for kind in onnx:
        name, expect = TEXT_KINDS[kind]
        case = f"encode-onnx/texts/{kind}"
        argv = commands["encode"](str(folder / name), fx.case_folder(case))
        cases.append(Case(case, (*argv, "--backend", "onnx"), expect))
    return cases + duplicate_id_cases(fx)


def duplicate_id_cases(fx: Fixtures) -> list[Case]:
    tm, api, folder = str(fx.models["tm"]), str(fx.models["api"]), fx.inputs / "texts"
    specs = [
        ("embed/ids/duplicate-jsonl", ["embed", tm, "--input", str(folder / "dup-ids.jsonl"),
                                       "--id-column", "id", "--out", "{C}/codes"]),
        ("embed/ids/duplicate-across-shards", ["embed", tm, "--input",
                                               str(folder / "dup-shards" / "*.jsonl"),
                                               "--id-column", "id", "--out", "{C}/codes"]),
        ("embed/ids/duplicate-parquet", ["embed", tm, "--input", str(folder / "dup-ids.parquet"),
                                         "--id-column", "id", "--out", "{C}/codes"]),
        ("index/ids/duplicate-jsonl", ["index", tm, "--input", str(folder / "dup-ids.jsonl"),
                                       "--db", "{C}/db"]),
        ("index/ids/duplicate-csv", ["index", tm, "--input", str(folder / "dup-ids.csv"),
                                     "--db", "{C}/db"]),
        ("index/ids/duplicate-parquet", ["index", tm, "--input",
                                         str(folder / "dup-ids.parquet"), "--db", "{C}/db"]),
        ("index/ids/duplicate-id-column", ["index", tm, "--input",
                                           str(folder / "dup-ids.jsonl"), "--id-column", "id",
                                           "--db", "{C}/db"]),
        ("recompress/ids/duplicate", ["recompress", api, "--input",
                                      str(fx.inputs / "vectors" / "dup-ids.parquet"),
                                      "--out", "{C}/codes"]),
        ("eval/ids/duplicate-corpus", _eval_argv(fx, corpus=str(folder / "dup-ids.jsonl"))),
    ]  # fmt: skip
    return [_case(fx, name, argv, REFUSE) for name, argv in specs]


def _case(fx: Fixtures, name: str, argv: Sequence[str], expect: str, **options: Any) -> Case:
    """A case whose arguments may name its folder as ``{C}``."""
    folder = str(fx.case_folder(name))
    return Case(name, tuple(a.replace("{C}", folder) for a in argv), expect, **options)


def _eval_argv(fx: Fixtures, **given: str) -> list[str]:
    inputs = fx.inputs
    files = {"corpus": str(inputs / "docs.jsonl"), "queries": str(inputs / "queries.jsonl"),
             "qrels": str(inputs / "qrels.tsv"), **given}  # fmt: skip
    argv = ["eval", "--model", str(fx.models["tm"]), "--out", "{C}/eval"]
    for option, value in files.items():
        argv += [f"--{option}", value]
    return argv


def vector_input_cases(fx: Fixtures) -> list[Case]:
    """Every kind of vector input × every command that reads vectors."""
    api, tm, folder = str(fx.models["api"]), str(fx.models["tm"]), fx.inputs / "vectors"
    docs = str(fx.inputs / "docs.jsonl")
    commands: dict[str, Callable[[str], list[str]]] = {
        "transform": lambda i: ["transform", api, "--input", i, "--out", "{C}/out.npy"],
        "fit": lambda i: ["fit", "--vectors", i, "--compressor", "pca", "--dim", "4",
                          "--out", "{C}/model"],
        "recompress": lambda i: ["recompress", api, "--input", i, "--out", "{C}/codes",
                                 "--quiet"],
        "index": lambda i: ["index", tm, "--input", docs, "--vectors", i, "--db", "{C}/db"],
        "eval": lambda i: [*_eval_argv(fx), "--vectors", i],
    }  # fmt: skip
    overrides = {
        ("index", "fewer-rows"): REFUSE, ("eval", "fewer-rows"): REFUSE,
        ("transform", "0-rows"): EITHER, ("transform", "parquet-0-rows"): EITHER,
        ("recompress", "parquet-0-rows"): EITHER, ("fit", "all-zero"): EITHER,
        # 7 wide is wrong for the models the other commands use; fit --vectors makes a
        # vectors-only model, which takes whatever width its vectors have.
        ("fit", "wrong-width"): SUCCEED,
    }  # fmt: skip
    parquet_only = {"recompress"}
    cases = []
    for command, argv in commands.items():
        for kind, (name, expect) in VECTOR_KINDS.items():
            if command in parquet_only and not (
                name.endswith(".parquet") or kind in ("missing", "directory", "npy")
            ):
                continue
            if command in parquet_only and kind == "npy":
                expect = EITHER
            cases.append(_case(fx, f"{command}/vectors/{kind}", argv(str(folder / name)),
                               overrides.get((command, kind), expect)))  # fmt: skip
    return cases


def _values(flag: str, expect: str, *values: str) -> list[tuple[str, str, str]]:
    return [(flag, value, expect) for value in values]


BAD_COUNTS = ("0", "-1", "abc", "3.5", "nan", "")


def flag_cases(fx: Fixtures) -> list[Case]:
    """Numeric flags out of range and unknown names, command by command."""
    api, tm, encoder = str(fx.models["api"]), str(fx.models["tm"]), str(fx.encoder)
    inputs = fx.inputs
    texts, jsonl = str(inputs / "texts.txt"), str(inputs / "texts" / "texts.jsonl")
    vectors, parquet = str(inputs / "vectors.npy"), str(inputs / "vecs.parquet")
    plans: list[tuple[str, list[str], list[tuple[str, str, str]]]] = []
    encode = ["encode", tm, "--input", jsonl, "--out", "{C}/out.npy", "--backend", "onnx"]
    plans.append(("encode", encode, [
        *_values("--dim", REFUSE, *BAD_COUNTS, "9", "99999999999999999999"),
        *_values("--dim", SUCCEED, "4", "8"),
        *_values("--batch-size", REFUSE, *BAD_COUNTS),
        *_values("--batch-size", SUCCEED, "1"),
        *_values("--batch-size", EITHER, "1000000000"),
        *_values("--precision", REFUSE, "bogus", "int4", "", "rq0", "pq999", "rq16",
                 "float32,int8"),
        *_values("--precision", SUCCEED, "binary", "float32", "int8"),
        *_values("--precision", EITHER, "INT8", " int8"),
        *_values("--backend", REFUSE, "bogus", ""),
        *_values("--backend", EITHER, "onnx-int8", "torch"),
        *_values("--text-column", REFUSE, "nope", ""),
    ]))  # fmt: skip
    transform = ["transform", api, "--input", vectors, "--out", "{C}/out.npy"]
    plans.append(("transform", transform, [
        *_values("--dim", REFUSE, *BAD_COUNTS, "9"),
        *_values("--dim", SUCCEED, "1", "8"),
        *_values("--precision", REFUSE, "bogus", "rq16", "pq8", ""),
        *_values("--precision", SUCCEED, "int8", "binary", "float32"),
    ]))  # fmt: skip
    plans.append(("transform-parquet", ["transform", api, "--input", parquet, "--out",
                                        "{C}/out.npy"], [
        *_values("--vector-column", REFUSE, "nope", "", "id"),
        *_values("--vector-column", SUCCEED, "embedding"),
    ]))  # fmt: skip
    fit_vectors = ["fit", "--vectors", vectors, "--out", "{C}/model"]
    plans.append(("fit-vectors", fit_vectors, [
        *_values("--dim", REFUSE, *BAD_COUNTS, "33", "99999999999999999999"),
        *_values("--dim", EITHER, "32"),
        *_values("--compressor", REFUSE, "bogus", "pca:bogus=1", "pca:abtt=x", "pca:abtt=-1",
                 "pca:abtt=99", "", ":", "pca:whiten", "pca:whiten=maybe", "pca,truncate",
                 "pca:dim=4"),
        *_values("--compressor", EITHER, "PCA", "none", "pca:abtt=0"),
        *_values("--precision", REFUSE, "bogus", "int4", "rq0", "pq999", "pq0", ""),
        *_values("--precision", EITHER, "rq16", "pq3"),
        *_values("--sample", REFUSE, "0", "-1", "abc"),
        *_values("--seed", REFUSE, "abc", "1.5"),
        *_values("--seed", EITHER, "-1", "1180591620717411303424"),
        *_values("--engine", REFUSE, "bogus"),
        *_values("--batch-size", REFUSE, "0", "-1"),
    ]))  # fmt: skip
    fit_texts = ["fit", "--model", encoder, "--texts", texts, "--compressor", "pca", "--dim",
                 "4", "--no-onnx", "--out", "{C}/model"]  # fmt: skip
    plans.append(("fit-texts", fit_texts, [
        *_values("--layer", REFUSE, "0", "-1", "99", "abc"),
        *_values("--backend", REFUSE, "bogus"),
        *_values("--text-column", REFUSE, "nope"),
        *_values("--model", REFUSE, str(inputs / "no-such-encoder"), str(fx.user),
                 "no-such-org/no-such-model", api, texts, ""),
    ]))  # fmt: skip
    plans += _bulk_and_store_plans(fx)
    plans += _other_command_plans(fx)
    cases = []
    for group, base, values in plans:
        for flag, value, expect in values:
            name = f"{group}/flag/{flag.lstrip('-')}={label(value, fx.work)}"
            cases.append(_case(fx, name, [*base, flag, value], expect))
    return cases


def _bulk_and_store_plans(fx: Fixtures) -> list[tuple[str, list[str], list[tuple[str, str, str]]]]:
    api, tm = str(fx.models["api"]), str(fx.models["tm"])
    jsonl, docs = str(fx.inputs / "texts" / "texts.jsonl"), str(fx.inputs / "docs.jsonl")
    embed = ["embed", tm, "--input", jsonl, "--out", "{C}/codes", "--quiet"]
    recompress = ["recompress", api, "--input", str(fx.inputs / "vecs.parquet"),
                  "--out", "{C}/codes", "--quiet"]  # fmt: skip
    bulk = [
        *_values("--dim", REFUSE, "0", "-1", "9", "abc"),
        *_values("--precision", REFUSE, "bogus", "rq16", ""),
        *_values("--batch-size", REFUSE, "0", "-1"),
        *_values("--shard-rows", REFUSE, "0", "-1"),
        *_values("--shard-rows", SUCCEED, "7"),
        *_values("--threads", REFUSE, "0", "-1"),
        *_values("--concurrency", REFUSE, "0", "-1"),
        *_values("--on-error", REFUSE, "bogus"),
        *_values("--engine", REFUSE, "bogus"),
        *_values("--id-column", REFUSE, "nope"),
    ]  # fmt: skip
    index = ["index", tm, "--input", docs, "--db", "{C}/db"]
    search = ["search", tm, "--db", str(fx.db), "--query", "a dog plays"]
    return [
        ("embed", embed, [*bulk, *_values("--text-column", REFUSE, "nope")]),
        ("recompress", recompress, [*bulk, *_values("--vector-column", REFUSE, "nope", "id")]),
        ("index", index, [
            *_values("--dim", REFUSE, "0", "-1", "9", "abc"),
            *_values("--precision", REFUSE, "bogus", "rq0", ""),
            *_values("--batch-size", REFUSE, "0", "-1"),
            *_values("--table", REFUSE, "", "../escape", "a/b", "/abs"),
            *_values("--table", EITHER, "x y", ".hidden", "ünïcode"),
            *_values("--id-column", REFUSE, "nope"),
            *_values("--text-column", REFUSE, "nope"),
        ]),
        ("search", search, [
            *_values("--k", REFUSE, *BAD_COUNTS),
            *_values("--k", EITHER, "1000000000000"),
            *_values("--k", SUCCEED, "1"),
            *_values("--rescore", REFUSE, "0", "-1", "nan", "abc", "inf"),
            *_values("--table", REFUSE, "nope", "", "../fixtures"),
            *_values("--query", EITHER, "", " "),
            *_values("--query", SUCCEED, "d\udcffg \udcc3", "x" * 100_000),
            *_values("--db", REFUSE, str(fx.work / "no-db"), str(fx.inputs / "docs.jsonl"),
                     str(fx.user), str(fx.models["tm"])),
        ]),
    ]  # fmt: skip


def _other_command_plans(fx: Fixtures) -> list[tuple[str, list[str], list[tuple[str, str, str]]]]:
    tm, tmt, encoder = str(fx.models["tm"]), str(fx.models["tmt"]), str(fx.encoder)
    inputs = fx.inputs
    tune = ["tune", "--model", encoder, "--corpus", str(inputs / "docs.jsonl"), "--queries",
            str(inputs / "queries.jsonl"), "--qrels", str(inputs / "qrels.tsv"),
            "--out", "{C}/tuned", "--quiet", "--min-retention", "0.9"]  # fmt: skip
    train = [
        "train",
        "--objective",
        "raw",
        "--model",
        encoder,
        "--data",
        "stsb-train",
        "--data-dir",
        str(fx.work / "no-data"),
        "--out",
        "{C}/run",
        "--epochs",
        "1",
    ]
    return [
        ("export", ["export", tmt, "--out", "{C}/export"], [
            *_values("--format", REFUSE, "bogus", ""),
            *_values("--dim", REFUSE, "0", "-1", "9", "abc"),
            *_values("--dim", SUCCEED, "4"),
            *_values("--layer", REFUSE, "0", "-1", "99", "abc", "2"),
        ]),
        ("eval", _eval_argv(fx), [
            *_values("--limit", REFUSE, "0", "-1", "abc"),
            *_values("--dims", REFUSE, "0", "abc", "9"),
            *_values("--dims", EITHER, "4,,8", ""),
            *_values("--precision", REFUSE, "bogus", ""),
            *_values("--rescore", REFUSE, "0", "-1", "abc"),
            *_values("--tasks", REFUSE, "bogus"),
            *_values("--tasks", EITHER, ""),
            *_values("--batch-size", REFUSE, "0", "-1"),
            *_values("--backend", REFUSE, "bogus"),
            *_values("--compressor", REFUSE, "pca"),
            *_values("--layers", REFUSE, "1"),
            *_values("--split", REFUSE, "bogus"),
        ]),
        ("eval-sts", ["eval", "--model", tm, "--out", "{C}/eval"], [
            *_values("--data-dir", REFUSE, str(fx.work / "no-data"), str(fx.user),
                     str(inputs / "texts.txt")),
            *_values("--datasets", REFUSE, "bogus", str(inputs / "texts.txt"),
                     str(inputs / "pairs.csv") + "x"),
        ]),
        ("tune", tune, [
            *_values("--min-retention", REFUSE, "-1", "2", "nan", "abc", "inf"),
            *_values("--max-bytes", REFUSE, "0", "-1", "abc"),
            *_values("--time-budget", REFUSE, "0", "-1", "nan"),
            *_values("--codes", REFUSE, "bogus", "rq0"),
            *_values("--compressors", REFUSE, "bogus"),
            *_values("--budget", REFUSE, "bogus"),
            *_values("--min-speed", REFUSE, "-1", "nan"),
            *_values("--batch-size", REFUSE, "0"),
            *_values("--backends", REFUSE, "bogus"),
        ]),
        ("train", train, [
            *_values("--epochs", REFUSE, "-1", "abc", "nan"),
            *_values("--lr", REFUSE, "nan", "-1", "inf", "abc"),
            *_values("--batch-size", REFUSE, "0", "-1"),
            *_values("--max-steps", REFUSE, "-1"),
            *_values("--data", REFUSE, "bogus", str(inputs / "missing.csv")),
            *_values("--model", REFUSE, str(fx.user)),
        ]),
        ("distill-static", ["distill-static", "--corpus", str(inputs / "texts.txt"), "--teacher",
                            encoder, "--out", "{C}/static"], [
            *_values("--corpus", REFUSE, str(inputs / "missing.txt"),
                     str(inputs / "texts" / "empty.txt"), str(inputs / "texts" / "folder.txt")),
            *_values("--dim", REFUSE, "0", "-1"),
            *_values("--batch-size", REFUSE, "0"),
            *_values("--lr", REFUSE, "nan"),
            *_values("--max-steps", REFUSE, "-1"),
            *_values("--teacher", REFUSE, str(fx.user)),
        ]),
    ]  # fmt: skip


def serve_flag_cases(fx: Fixtures) -> list[Case]:
    """``serve`` with bad flags or a bad model: it must refuse in one line, not start."""
    tm = str(fx.models["tm"])
    values = [
        *_values("--port", REFUSE, "-1", "70000", "abc"),
        *_values("--max-inputs", REFUSE, "0", "-1"),
        *_values("--max-chars", REFUSE, "0", "-1"),
        *_values("--max-body-bytes", REFUSE, "0", "-1", "abc"),
        *_values("--max-concurrent", REFUSE, "0", "-1"),
        *_values("--body-timeout", REFUSE, "-1", "0", "nan", "inf"),
        *_values("--send-timeout", REFUSE, "-1", "nan"),
        *_values("--grace", REFUSE, "-1", "nan"),
        *_values("--max-batch", REFUSE, "0", "-1"),
        *_values("--batch-wait-ms", REFUSE, "-1", "nan"),
        *_values("--threads", REFUSE, "0", "-1"),
        *_values("--backend", REFUSE, "bogus"),
        *_values("--host", REFUSE, "no such host!", "256.1.1.1"),
        *_values("--name", EITHER, "", "a/b"),
    ]  # fmt: skip
    cases = []
    for flag, value, expect in values:
        argv = ["serve", tm, "--quiet", "--port", "{PORT}", flag, value]
        if flag == "--port":
            argv = ["serve", tm, "--quiet", flag, value]
        cases.append(_case(fx, f"serve/flag/{flag.lstrip('-')}={label(value)}", argv, expect,
                           serves=True, timeout=90.0))  # fmt: skip
    for name, model in [
        ("vectors-only", fx.models["api"]),
        ("missing", fx.work / "nothing"),
        ("user-folder", fx.user),
        ("a-file", fx.user / "notes.txt"),
    ]:
        cases.append(_case(fx, f"serve/model/{name}", ["serve", str(model), "--port", "{PORT}"],
                           REFUSE, serves=True, timeout=90.0))  # fmt: skip
    return cases


def write_bad_results(folder: Path, results: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "empty.json").write_text("")
    (folder / "invalid.json").write_text("[{")
    (folder / "dict.json").write_text('{"records": []}')
    (folder / "junk-list.json").write_text('[1, "two", null]')
    (folder / "deep.json").write_text("[" * 100_000)
    (folder / "nan.json").write_text(results.read_text().replace("71.5", "NaN", 1))
    (folder / "bad-field.json").write_text(
        results.read_text().replace('"dim": 8', '"dim": "eight"')
    )


def report_and_cache_cases(fx: Fixtures) -> list[Case]:
    bad = fx.inputs / "report"
    results = str(fx.results)
    specs: list[tuple[str, list[str], str]] = [
        ("report/results/good", ["report", results, "--out", "{C}/report"], SUCCEED),
        ("report/results/missing", ["report", str(bad / "missing.json"), "--out", "{C}/r"], REFUSE),
        ("report/results/user-folder", ["report", str(fx.user), "--out", "{C}/r"], REFUSE),
        ("report/out/user-folder", ["report", results, "--out", str(fx.user)], REFUSE),
        ("report/out/results-file", ["report", results, "--out", results], REFUSE),
        ("report/out/results-folder", ["report", results, "--out", str(fx.results.parent)],
         REFUSE),
        ("report/out/model-folder", ["report", results, "--out", str(fx.models["tm"])], REFUSE),
    ]  # fmt: skip
    for name in ("empty", "invalid", "dict", "junk-list", "deep", "bad-field"):
        specs.append((f"report/results/{name}", ["report", str(bad / f"{name}.json"),
                                                 "--out", "{C}/r"], REFUSE))  # fmt: skip
    specs.append(("report/results/nan", ["report", str(bad / "nan.json"), "--out", "{C}/r"],
                  EITHER))  # fmt: skip
    cases = [_case(fx, name, argv, expect) for name, argv, expect in specs]
    return cases + cache_cases(fx)


def cache_cases(fx: Fixtures) -> list[Case]:
    def user_folder(folder: Path) -> None:
        (folder / "mine").mkdir(parents=True)
        (folder / "mine" / "photo.jpg").write_bytes(b"\xff\xd8 precious")
        (folder / "embeddings").mkdir()
        (folder / "embeddings" / "diary.txt").write_text("not a cache")
        (folder / "file-hashes.json").write_text('{"mine": true}')

    def a_file(folder: Path) -> None:
        (folder / "cache-file").write_text("a file, not a folder")

    encode = ["encode", str(fx.models["tm"]), "--input", str(fx.inputs / "texts.txt"),
              "--out", "{C}/out.npy", "--backend", "onnx"]  # fmt: skip
    specs: list[tuple[str, list[str], str, dict[str, str], Any]] = [
        ("cache/show", ["cache"], SUCCEED, {}, None),
        ("cache/clear-user-folder", ["cache", "--clear"], SUCCEED,
         {"DEMITASSE_CACHE": "{C}/user-cache"}, lambda c: user_folder(c / "user-cache")),
        ("cache/show-user-folder", ["cache"], SUCCEED,
         {"DEMITASSE_CACHE": "{C}/user-cache"}, lambda c: user_folder(c / "user-cache")),
        ("cache/encode-into-user-folder", encode, SUCCEED,
         {"DEMITASSE_CACHE": "{C}/user-cache"}, lambda c: user_folder(c / "user-cache")),
        ("cache/clear-a-file", ["cache", "--clear"], EITHER,
         {"DEMITASSE_CACHE": "{C}/cache-file"}, a_file),
        ("cache/encode-cache-is-a-file", encode, EITHER,
         {"DEMITASSE_CACHE": "{C}/cache-file"}, a_file),
        ("cache/clear-empty-variable", ["cache"], EITHER, {"DEMITASSE_CACHE": ""}, None),
    ]  # fmt: skip
    for value in ("abc", "-1", "2Q", "1e99", "nan", ""):
        for name, argv in (("cache", ["cache"]), ("encode", encode)):
            specs.append((f"cache/max-bytes={value!r}/{name}", argv, EITHER,
                          {"DEMITASSE_CACHE_MAX_BYTES": value}, None))  # fmt: skip
    cases = []
    for name, argv, expect, env, prepare in specs:
        folder = str(fx.case_folder(name))
        environment = tuple((k, v.replace("{C}", folder)) for k, v in env.items())
        cases.append(_case(fx, name, argv, expect, env=environment, prepare=prepare))
    return cases


# --------------------------------------------------------------------------------------------
# Outputs that must never replace the user's files
# --------------------------------------------------------------------------------------------


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def output_cases(fx: Fixtures) -> list[Case]:
    tm, api, inputs = str(fx.models["tm"]), str(fx.models["api"]), fx.inputs
    texts_parquet = str(inputs / "texts" / "texts.parquet")
    vectors = str(inputs / "vectors.npy")

    def user_files(folder: Path) -> None:
        _copy(fx.user, folder / "user")
        np.save(folder / "user" / "mine.npy", np.ones((3, 3), np.float32))
        (folder / "user" / "link.npy").symlink_to(folder / "user" / "mine.npy")
        _copy(fx.models["tmt"], folder / "earlier-fit")
        _copy(fx.inputs / "texts.txt", folder / "in" / "texts.txt")
        _copy(fx.inputs / "vectors.npy", folder / "in" / "vectors.npy")

    def forged(folder: Path) -> None:
        user_files(folder)
        marker = {"kind": "model", "complete": True, "files": {"notes.txt": [9, "0" * 64]},
                  "links": {}, "folders": []}  # fmt: skip
        (folder / "user" / ".demitasse-output.json").write_text(json.dumps(marker))

    encode = ["encode", tm, "--backend", "onnx", "--input"]
    transform = ["transform", api, "--input"]
    fit = ["fit", "--vectors", vectors, "--compressor", "pca", "--dim", "4", "--out"]
    specs: list[tuple[str, list[str], str, tuple[str, ...]]] = [
        ("encode/out/same-as-input", [*encode, texts_parquet, "--out", texts_parquet], REFUSE, ()),
        ("encode/out/same-as-input-overwrite", [*encode, texts_parquet, "--out", texts_parquet,
                                                "--overwrite"], REFUSE, ()),
        ("encode/out/inside-model", [*encode, str(inputs / "texts.txt"), "--out",
                                     tm + "/out.npy"], REFUSE, ()),
        ("encode/out/inside-model-overwrite", [*encode, str(inputs / "texts.txt"), "--out",
                                               tm + "/out.npy", "--overwrite"], REFUSE, ()),
        ("encode/out/model-config", [*encode, str(inputs / "texts.txt"), "--out",
                                     tm + "/config.json", "--overwrite"], REFUSE, ()),
        ("encode/out/existing-file", [*encode, "{C}/in/texts.txt", "--out", "{C}/user/mine.npy"],
         REFUSE, ()),
        ("encode/out/existing-file-overwrite", [*encode, "{C}/in/texts.txt", "--out",
                                                "{C}/user/mine.npy", "--overwrite"], SUCCEED,
         ("user/mine.npy",)),
        ("encode/out/symlink-to-user-file", [*encode, "{C}/in/texts.txt", "--out",
                                             "{C}/user/link.npy"], REFUSE, ()),
        ("encode/out/a-folder", [*encode, "{C}/in/texts.txt", "--out", "{C}/user"], REFUSE, ()),
        ("encode/out/a-folder-named-npy", [*encode, "{C}/in/texts.txt", "--out",
                                           "{C}/user/thesis"], REFUSE, ()),
        ("encode/out/txt-extension", [*encode, "{C}/in/texts.txt", "--out", "{C}/out.txt"],
         REFUSE, ()),
        ("encode/out/missing-parent", [*encode, "{C}/in/texts.txt", "--out",
                                       "{C}/no/such/dir/out.npy"], EITHER, ()),
        ("encode/out/parent-is-a-file", [*encode, "{C}/in/texts.txt", "--out",
                                         "{C}/user/notes.txt/out.npy"], REFUSE, ()),
        ("transform/out/same-as-input", [*transform, "{C}/in/vectors.npy", "--out",
                                         "{C}/in/vectors.npy"], REFUSE, ()),
        ("transform/out/same-as-input-overwrite", [*transform, "{C}/in/vectors.npy", "--out",
                                                   "{C}/in/vectors.npy", "--overwrite"],
         REFUSE, ()),
        ("transform/out/inside-model", [*transform, vectors, "--out", api + "/x.npy",
                                        "--overwrite"], REFUSE, ()),
        ("transform/out/existing-file", [*transform, vectors, "--out", "{C}/user/mine.npy"],
         REFUSE, ()),
        ("fit/out/user-folder", [*fit, "{C}/user"], REFUSE, ()),
        ("fit/out/user-file", [*fit, "{C}/user/notes.txt"], REFUSE, ()),
        ("fit/out/earlier-fit", [*fit, "{C}/earlier-fit"], SUCCEED, ("earlier-fit",)),
        ("fit/out/folder-holding-input", ["fit", "--vectors", "{C}/in/vectors.npy",
                                          "--compressor", "pca", "--dim", "4", "--out",
                                          "{C}/in"], REFUSE, ()),
        ("fit/out/the-input-file", ["fit", "--vectors", "{C}/in/vectors.npy", "--compressor",
                                    "pca", "--dim", "4", "--out", "{C}/in/vectors.npy"],
         REFUSE, ()),
        ("fit/out/inside-a-model", [*fit, "{C}/earlier-fit/sub"], EITHER, ()),
        ("fit/out/the-encoder", ["fit", "--model", "{C}/enc", "--texts", "{C}/in/texts.txt",
                                 "--compressor", "pca", "--dim", "4", "--out", "{C}/enc"],
         REFUSE, ()),
        ("export/out/user-folder", ["export", str(fx.models["tmt"]), "--out", "{C}/user"],
         REFUSE, ()),
        ("export/out/the-model", ["export", "{C}/earlier-fit", "--out", "{C}/earlier-fit"],
         REFUSE, ()),
        ("export/out/earlier-fit", ["export", str(fx.models["tmt"]), "--out", "{C}/earlier-fit"],
         REFUSE, ()),
        ("embed/out/user-folder", ["embed", tm, "--input", "{C}/in/texts.txt", "--out",
                                   "{C}/user"], REFUSE, ()),
        ("embed/out/input-folder", ["embed", tm, "--input", "{C}/in/texts.txt", "--out",
                                    "{C}/in"], REFUSE, ()),
        ("embed/out/a-file", ["embed", tm, "--input", "{C}/in/texts.txt", "--out",
                              "{C}/user/notes.txt"], REFUSE, ()),
        ("embed/out/model-folder", ["embed", tm, "--input", "{C}/in/texts.txt", "--out",
                                    "{C}/earlier-fit"], REFUSE, ()),
        ("recompress/out/user-folder", ["recompress", api, "--input",
                                        str(inputs / "vecs.parquet"), "--out", "{C}/user"],
         REFUSE, ()),
        ("index/db/user-folder", ["index", tm, "--input", str(inputs / "docs.jsonl"), "--db",
                                  "{C}/user"], REFUSE, ()),
        ("index/db/model-folder", ["index", tm, "--input", str(inputs / "docs.jsonl"), "--db",
                                   "{C}/earlier-fit"], REFUSE, ()),
        ("index/db/a-file", ["index", tm, "--input", str(inputs / "docs.jsonl"), "--db",
                             "{C}/user/notes.txt"], REFUSE, ()),
        ("index/db/input-folder", ["index", tm, "--input", "{C}/in/texts.txt", "--db", "{C}/in"],
         REFUSE, ()),
        ("eval/out/user-folder", [*_eval_argv(fx)[:-2], "--out", "{C}/user"], REFUSE, ()),
        ("eval/out/model-folder", [*_eval_argv(fx)[:-2], "--out", "{C}/earlier-fit"], REFUSE, ()),
        ("tune/out/user-folder", ["tune", "--model", str(fx.encoder), "--corpus",
                                  str(inputs / "docs.jsonl"), "--min-retention", "0.9",
                                  "--out", "{C}/user"], REFUSE, ()),
    ]  # fmt: skip
    cases = []
    for name, argv, expect, may_change in specs:
        folder = fx.case_folder(name)
        prepare = user_files
        if name == "fit/out/the-encoder":
            prepare = lambda c: (user_files(c), _copy(fx.encoder, c / "enc"))  # noqa: E731
        allowed = tuple(f"{fx.rel(folder)}/{p}" for p in may_change)
        cases.append(_case(fx, name, argv, expect, prepare=prepare, may_change=allowed))
    argv = [*fit, "{C}/user"]
    cases.append(_case(fx, "fit/out/forged-marker", argv, REFUSE, prepare=forged))
    return cases


# --------------------------------------------------------------------------------------------
# Tampered model directories
# --------------------------------------------------------------------------------------------


def _flip(path: Path, keep_mtime: bool = False) -> None:
    """Flip one bit of the byte in the middle of ``path``, in place."""
    stat = path.stat()
    middle = stat.st_size // 2
    with path.open("r+b") as handle:
        handle.seek(middle)
        byte = handle.read(1)
        handle.seek(middle)
        handle.write(bytes([byte[0] ^ 0x01]))
    if keep_mtime:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _edit_config(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config, indent=2))


def _set(*keys_and_value: Any) -> Callable[[dict[str, Any]], None]:
    *keys, value = keys_and_value

    def change(config: dict[str, Any]) -> None:
        target = config
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def _drop(*keys: str) -> Callable[[dict[str, Any]], None]:
    def change(config: dict[str, Any]) -> None:
        target = config
        for key in keys[:-1]:
            target = target[key]
        target.pop(keys[-1], None)

    return change


@dataclass(frozen=True)
class Tamper:
    name: str
    models: tuple[str, ...]
    apply: Callable[[Path, Path], None]  # (the model copy, the case folder)
    expect: str = REFUSE


def file_tampers(fx: Fixtures) -> list[Tamper]:
    """Damage to the files of a model directory."""
    every, int8, graph = ("api", "tm", "tmt"), ("api", "tm"), ("tm",)
    other = {"api": fx.models["api2"], "tm": fx.models["tm2"], "tmt": fx.models["tm2"]}

    def swap(part: str) -> Callable[[Path, Path], None]:
        def apply(model: Path, case: Path) -> None:
            shutil.rmtree(model / part)
            shutil.copytree(other[model.name] / part, model / part)

        return apply

    def link_state(model: Path, case: Path) -> None:
        state = model / "compressor" / "state.safetensors"
        state.unlink()
        state.symlink_to(other["tm"] / "compressor" / "state.safetensors")

    return [
        Tamper("delete-config", every, lambda m, c: _remove(m / "config.json")),
        Tamper("delete-compressor-state", every,
               lambda m, c: _remove(m / "compressor" / "state.safetensors")),
        Tamper("delete-compressor-folder", every, lambda m, c: _remove(m / "compressor")),
        Tamper("delete-compressor-config", every,
               lambda m, c: _remove(m / "compressor" / "config.json")),
        Tamper("delete-quantizer-folder", int8, lambda m, c: _remove(m / "quantizer")),
        Tamper("delete-quantizer-state", int8,
               lambda m, c: _remove(m / "quantizer" / "state.safetensors")),
        Tamper("delete-graph", graph, lambda m, c: _remove(m / "encoder" / "model.onnx")),
        Tamper("delete-graph-tokenizer", graph,
               lambda m, c: _remove(m / "encoder" / "tokenizer.json")),
        Tamper("delete-graph-folder", graph, lambda m, c: _remove(m / "encoder")),
        Tamper("delete-output-marker", every, lambda m, c: _remove(m / ".demitasse-output.json"),
               EITHER),
        Tamper("truncate-compressor-state", every,
               lambda m, c: _truncate(m / "compressor" / "state.safetensors")),
        Tamper("truncate-quantizer-state", int8,
               lambda m, c: _truncate(m / "quantizer" / "state.safetensors")),
        Tamper("truncate-graph", graph, lambda m, c: _truncate(m / "encoder" / "model.onnx")),
        Tamper("flip-byte-compressor-state", every,
               lambda m, c: _flip(m / "compressor" / "state.safetensors")),
        Tamper("flip-byte-quantizer-state", int8,
               lambda m, c: _flip(m / "quantizer" / "state.safetensors")),
        Tamper("flip-byte-graph", graph, lambda m, c: _flip(m / "encoder" / "model.onnx")),
        Tamper("flip-byte-graph-tokenizer", graph,
               lambda m, c: _flip(m / "encoder" / "tokenizer.json")),
        Tamper("graph-record-layer-changed", graph,
               lambda m, c: _edit_config(m / "encoder" / "config.json", _set("layer", 2))),
        Tamper("compressor-config-edited", every,
               lambda m, c: _edit_config(m / "compressor" / "config.json",
                                         lambda d: d.update(edited=True))),
        Tamper("extra-file-in-compressor", every,
               lambda m, c: (m / "compressor" / "notes.txt").write_text("hi"), EITHER),
        Tamper("swapped-compressor", every, swap("compressor")),
        Tamper("swapped-quantizer", int8, swap("quantizer")),
        Tamper("compressor-state-symlinked-to-another-model", every, link_state),
    ]  # fmt: skip


def config_tampers(fx: Fixtures) -> list[Tamper]:
    """Damage to a model's config.json."""
    every = ("api", "tm", "tmt")

    def text(content: str) -> Callable[[Path, Path], None]:
        return lambda m, c: (m / "config.json").write_text(content)

    def edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path, Path], None]:
        return lambda m, c: _edit_config(m / "config.json", change)

    def nan_literal(model: Path, case: Path) -> None:
        config = model / "config.json"
        config.write_text(config.read_text().replace('"input_dim": 32', '"input_dim": NaN'))

    tampers = [
        Tamper("config-invalid-json", every, text("{")),
        Tamper("config-empty", every, text("")),
        Tamper("config-list", every, text("[]")),
        Tamper("config-null", every, text("null")),
        Tamper("config-deep-nesting", every, text("[" * 100_000)),
        Tamper("config-binary", every, lambda m, c: (m / "config.json").write_bytes(
            np.random.default_rng(0).bytes(512))),
        Tamper("config-nan-literal", every, nan_literal),
        Tamper("config-a-folder", every, lambda m, c: (_remove(m / "config.json"),
                                                       (m / "config.json").mkdir())),
    ]  # fmt: skip
    # Keys the reader needs (demitasse.model_files.read_model_dir): missing or of a wrong type
    # or value, the directory is damaged. "quantizer" is needed where the precision is int8.
    needed = ("kind", "format_version", "encoder", "input_dim", "compressor", "part_hashes",
              "fit", "precision", "normalize", "batch_size", "backend", "rescore")  # fmt: skip
    tampers += [Tamper(f"config-without-{k}", every, edit(_drop(k))) for k in needed]
    tampers.append(Tamper("config-without-quantizer", ("api", "tm"), edit(_drop("quantizer"))))
    wrong = [
        ("input_dim", "32"), ("input_dim", -1), ("input_dim", 1000000), ("input_dim", 16),
        ("layer", "3"), ("batch_size", 0), ("batch_size", "x"), ("normalize", "no"),
        ("backend", "bogus"), ("precision", "bogus"), ("precision", "binary"),
        ("format_version", 99), ("format_version", "4"), ("format_version", 3),
        ("kind", "other"), ("part_hashes", {}), ("part_hashes", "x"), ("encoder", []),
        ("encoder", "x"), ("fit", "x"), ("rescore", "x"),
    ]  # fmt: skip
    # Wrong values: the model with an encoder and a graph, and the vectors-only one.
    tampers += [Tamper(f"config-{k}={v!r}", ("api", "tm"), edit(_set(k, v))) for k, v in wrong]
    tampers += [Tamper(f"config-layer={v!r}", ("tm",), edit(_set("layer", v))) for v in (-1, 99)]
    # Records the reader derives from the parts instead (and ``compressor`` / ``quantizer``,
    # read as flags: the parts live in their fixed folders): ignoring them is defensible.
    derived = [
        ("method", 5), ("demitasse_version", 4), ("output_dim", 0), ("output_dim", 99),
        ("precisions", "int8"), ("precisions", []), ("precisions", ["bogus"]),
        ("matryoshka", "yes"), ("compressor", "../../../../models/api2/compressor"),
        ("compressor", "/etc"), ("compressor", str(fx.models["api2"] / "compressor")),
        ("quantizer", str(fx.models["tm2"] / "quantizer")),
    ]  # fmt: skip
    tampers += [Tamper(f"config-{k}={label(str(v), fx.work)}", ("api", "tm"), edit(_set(k, v)),
                       EITHER) for k, v in derived]  # fmt: skip
    derived_keys = ("method", "layer", "matryoshka", "output_dim", "precisions",
                    "demitasse_version", "graph")  # fmt: skip
    tampers += [Tamper(f"config-without-{k}", ("tm",), edit(_drop(k)), EITHER)
                for k in derived_keys]  # fmt: skip
    tampers += [Tamper(f"config-layer={v!r}", ("api",), edit(_set("layer", v)), EITHER)
                for v in (-1, 99)]  # fmt: skip

    def rehash(model: Path, case: Path) -> None:
        _edit_config(model / "config.json",
                     lambda d: d["part_hashes"].update({"compressor/": "0" * 64}))  # fmt: skip

    tampers.append(Tamper("config-part-hash-changed", every, rehash))
    return tampers


def encoder_tampers(fx: Fixtures) -> list[Tamper]:
    """Damage to the encoder's record in config.json, and to the encoder's own files (``tmt``
    runs its source; ``tm`` carries a graph, and runs the source on the torch backend)."""
    models = ("tm", "tmt")

    def edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path, Path], None]:
        return lambda m, c: _edit_config(m / "config.json", change)

    def source(damage: Callable[[Path], None] | None, encoder: Path | None = None
               ) -> Callable[[Path, Path], None]:  # fmt: skip
        """The model's source encoder copied into the case folder (and damaged there)."""

        def apply(model: Path, case: Path) -> None:
            copy = case / "enc"
            _copy(encoder or fx.encoder, copy)
            _edit_config(model / "config.json", _set("encoder", "source", str(copy)))
            if damage is not None:
                damage(copy)

        return apply

    def warm_then_flip(target: str) -> Callable[[Path, Path], None]:
        """Hash the files once (the stamp cache is warm), then flip a byte keeping mtime."""

        def apply(model: Path, case: Path) -> None:
            if target == "source":
                source(None)(model, case)
            time.sleep(2.2)  # past the racy window: the hashes are cached
            argv = ["encode", str(model), "--input", str(fx.inputs / "texts.txt"), "--out",
                    str(case / "warm.npy")]  # fmt: skip
            subprocess.run([*fx.demitasse, *argv], env=fx.env, capture_output=True,
                           timeout=120, check=False)  # fmt: skip
            (case / "warm.npy").unlink(missing_ok=True)
            path = (
                case / "enc" / "model.safetensors"
                if target == "source"
                else (model / "encoder" / "model.onnx")
            )
            _flip(path, keep_mtime=True)

        return apply

    return [
        Tamper("fingerprint-removed", models, edit(_drop("encoder", "fingerprint"))),
        Tamper("fingerprint-null", models, edit(_set("encoder", "fingerprint", None))),
        Tamper("fingerprint-changed", models, edit(_set("encoder", "fingerprint", "0" * 20))),
        Tamper("fingerprint-number", models, edit(_set("encoder", "fingerprint", 12))),
        Tamper("encoder-dim-changed", models, edit(_set("encoder", "dim", 16))),
        Tamper("encoder-dim-string", models, edit(_set("encoder", "dim", "32"))),
        # The record's name for the kind of encoder; the files checked are the same.
        Tamper("encoder-kind-static", models, edit(_set("encoder", "kind", "static")), EITHER),
        Tamper("encoder-source-path-traversal", ("tmt",),
               edit(_set("encoder", "source", "../../../../etc"))),
        Tamper("source-moved-intact", models, source(None), SUCCEED),
        Tamper("source-missing", ("tmt",), edit(_set("encoder", "source", "/nonexistent/enc"))),
        Tamper("source-byte-flipped-in-weights", models,
               source(lambda e: _flip(e / "model.safetensors"))),
        Tamper("source-byte-flipped-in-tokenizer", models,
               source(lambda e: _flip(e / "tokenizer.json"))),
        Tamper("source-weights-deleted", models,
               source(lambda e: _remove(e / "model.safetensors"))),
        Tamper("source-config-edited", models, source(lambda e: _edit_config(
            e / "config.json", lambda d: d.update(hidden_dropout_prob=0.5)))),
        Tamper("source-replaced-by-another-encoder", models, source(None, fx.encoder2)),
        Tamper("source-extra-file", models, source(lambda e: (e / "NOTES.md").write_text("x")),
               EITHER),
        Tamper("source-flip-keep-mtime-warm-cache", ("tmt",), warm_then_flip("source")),
        Tamper("graph-flip-keep-mtime-warm-cache", ("tm",), warm_then_flip("graph")),
    ]  # fmt: skip


def tamper_cases(fx: Fixtures) -> list[Case]:
    """Each damage × the commands that load the model it applies to."""
    inputs = fx.inputs
    texts, vectors = str(inputs / "texts.txt"), str(inputs / "vectors.npy")
    encode = ["encode", "{M}", "--input", texts, "--out", "{C}/out.npy"]
    transform = ["transform", "{M}", "--input", vectors, "--out", "{C}/out.npy"]
    export = ["export", "{M}", "--out", "{C}/export"]
    serve = ["serve", "{M}", "--port", "{PORT}", "--quiet"]
    recompress = ["recompress", "{M}", "--input", str(inputs / "vecs.parquet"), "--out",
                  "{C}/codes", "--quiet"]  # fmt: skip
    on_files = {
        "api": {"transform": transform, "recompress": recompress},
        "tm": {"encode": encode, "encode-onnx": [*encode, "--backend", "onnx"], "export": export,
               "serve": serve},
        "tmt": {"encode": encode, "export": export},
    }  # fmt: skip
    on_encoder = {
        "tm": {"encode": encode, "encode-onnx": [*encode, "--backend", "onnx"], "serve": serve},
        "tmt": {"encode": encode, "export": export, "serve": serve},
    }  # fmt: skip
    # config.json is read alike by every command: the cheapest one per kind of model.
    on_config = {"api": {"transform": transform}, "tm": {"encode-onnx": on_files["tm"][
        "encode-onnx"]}, "tmt": {"transform": transform}}  # fmt: skip
    plans = [(t, on_files) for t in file_tampers(fx)]
    plans += [(t, on_encoder) for t in encoder_tampers(fx)]
    plans += [(t, on_config) for t in config_tampers(fx)]
    cases = []
    for tamper, commands in plans:
        for model in tamper.models:
            for command, argv in commands.get(model, {}).items():
                name = f"tampered/{model}/{tamper.name}/{command}"
                expect = _tamper_expectation(tamper, command)
                cases.append(_tamper_case(fx, name, model, tamper, argv, expect))
    return cases


def _tamper_expectation(tamper: Tamper, command: str) -> str:
    """What a damaged model must do under ``command``: damage to the encoder does not concern
    a command that never runs it (``transform`` takes vectors; the ONNX graph stands for its
    source). With torch installed, a model saved with the torch backend runs its source."""
    if tamper.expect != REFUSE:
        return tamper.expect
    if command == "transform" and tamper.name.startswith(("source-", "fingerprint-", "encoder-")):
        return EITHER
    if command == "encode-onnx" and tamper.name.startswith("source-"):
        return EITHER
    return REFUSE


def _tamper_case(fx: Fixtures, name: str, model: str, tamper: Tamper, argv: Sequence[str],
                 expect: str) -> Case:  # fmt: skip
    folder = fx.case_folder(name)
    copy = folder / "models" / model

    def prepare(case: Path) -> None:
        _copy(fx.models[model], copy)
        tamper.apply(copy, case)

    filled = [a.replace("{M}", str(copy)) for a in argv]
    serves = argv[0] == "serve"
    return _case(fx, name, filled, expect, prepare=prepare, serves=serves,
                 timeout=90.0 if serves else 60.0)  # fmt: skip


def model_path_cases(fx: Fixtures) -> list[Case]:
    """The model argument itself: missing, a file, an empty folder, a user's folder, an
    encoder directory (a model to every command)."""
    texts = str(fx.inputs / "texts.txt")
    targets = {
        "missing": (str(fx.work / "no-such-model"), REFUSE),
        "a-file": (texts, REFUSE),
        "empty-folder": ("{C}/empty", REFUSE),
        "user-folder": (str(fx.user), REFUSE),
        "encoder-folder": (str(fx.encoder), SUCCEED),
        "hub-name-offline": ("no-such-org/no-such-model", REFUSE),
        "relative-parent": ("../../../../../../../../etc", REFUSE),
    }
    cases = []
    for label, (model, expect) in targets.items():
        for command, argv in {
            "encode": ["encode", model, "--input", texts, "--out", "{C}/out.npy"],
            "transform": ["transform", model, "--input", str(fx.inputs / "vectors.npy"),
                          "--out", "{C}/out.npy"],
            "export": ["export", model, "--out", "{C}/export"],
            "embed": ["embed", model, "--input", texts, "--out", "{C}/codes", "--quiet"],
            "search": ["search", model, "--db", str(fx.db), "--query", "a dog"],
        }.items():  # fmt: skip
            want = REFUSE if command == "search" else expect
            if label == "encoder-folder" and command == "export":
                want = EITHER
            cases.append(_case(fx, f"model-arg/{label}/{command}", argv, want,
                               prepare=lambda c: (c / "empty").mkdir()))  # fmt: skip
    for label, model in (("vectors-only", "api"), ("same-encoder-other-fit", "tm2"),
                         ("no-graph", "tmt")):  # fmt: skip
        argv = ["search", str(fx.models[model]), "--db", str(fx.db), "--query", "a dog"]
        cases.append(_case(fx, f"search/model/{label}", argv, REFUSE))
    return cases


# --------------------------------------------------------------------------------------------
# Signals
# --------------------------------------------------------------------------------------------


def signal_cases(fx: Fixtures) -> list[Case]:
    """SIGINT, SIGTERM and SIGHUP at several moments of commands that write over an earlier
    output: it must end in one line with 128 + the signal, the earlier output intact."""
    tm, inputs = str(fx.models["tm"]), fx.inputs

    def earlier(case: Path) -> None:
        np.save(case / "prev.npy", np.ones((2, 2), np.float32))
        _copy(fx.models["tmt"], case / "prev-model")
        _copy(fx.db, case / "db")

    commands = {
        "encode-overwrite": (["encode", tm, "--input", str(inputs / "big.txt"), "--out",
                              "{C}/prev.npy", "--overwrite"], ("prev.npy",), ()),
        "fit-over-earlier": (["fit", "--model", str(fx.encoder), "--texts",
                              str(inputs / "big.txt"), "--compressor", "pca", "--dim", "8",
                              "--no-onnx", "--out", "{C}/prev-model"], ("prev-model",), ()),
        "embed": (["embed", tm, "--input", str(inputs / "big.txt"), "--out", "{C}/codes",
                   "--quiet"], (), ("codes",)),
        "index-into-table": (["index", tm, "--input", str(inputs / "big.jsonl"), "--db",
                              "{C}/db"], ("db",), ("db",)),
        "transform-overwrite": (["transform", str(fx.models["api"]), "--input",
                                 str(inputs / "bigvec.npy"), "--out", "{C}/prev.npy",
                                 "--overwrite"], ("prev.npy",), ()),
    }  # fmt: skip
    cases = []
    for command, (argv, may_change, may_add) in commands.items():
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            for delay in (0.3, 2.0, 5.0):
                name = f"signal/{command}/{signum.name}@{delay}s"
                rel = fx.rel(fx.case_folder(name))
                cases.append(_case(
                    fx, name, argv, INTERRUPT, prepare=earlier,
                    may_change=tuple(f"{rel}/{p}" for p in may_change),
                    may_add=tuple(f"{rel}/{p}" for p in may_add),
                    env=(("DEMITASSE_CACHE_MAX_BYTES", "0"),), signal=(int(signum), delay),
                ))  # fmt: skip
    return cases


def all_cli_cases(fx: Fixtures) -> list[Case]:
    cases = [
        *text_input_cases(fx), *vector_input_cases(fx), *flag_cases(fx), *serve_flag_cases(fx),
        *report_and_cache_cases(fx), *output_cases(fx), *model_path_cases(fx),
        *tamper_cases(fx), *signal_cases(fx),
    ]  # fmt: skip
    names = Counter(case.name for case in cases)
    duplicated = [name for name, n in names.items() if n > 1]
    if duplicated:
        raise SystemExit(f"duplicate case names: {duplicated[:5]}")
    return cases


# --------------------------------------------------------------------------------------------
# Running a command-line case
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def shown_argument(argument: str, work: Path) -> str:
    """An argument as a shell reads it, the work folder written ``$W``."""
    if any(not c.isprintable() or "\udc80" <= c <= "\udcff" for c in argument):
        raw = argument.encode("utf-8", "surrogateescape")
        return "$'" + "".join(chr(b) if 32 <= b < 127 and b not in b"'\\" else f"\\x{b:02x}"
                              for b in raw) + "'"  # fmt: skip
    if len(argument) > 200:
        return f'"$(python -c \'print("{argument[0]}" * {len(argument)})\')"'
    root = str(work)
    if argument == root or argument.startswith(root + "/"):
        rest = argument[len(root) :]
        quoted = shlex.quote(rest) if rest else ""
        if quoted.startswith("'"):
            return '"$W' + rest.replace('"', '\\"').replace("$", "\\$") + '"'
        return "$W" + rest
    return shlex.quote(argument)


def shown_command(case: Case, argv: Sequence[str], work: Path) -> str:
    env = " ".join(f"{k}={shown_argument(v, work)}" for k, v in case.env)
    command = " ".join(["demitasse", *(shown_argument(a, work) for a in argv)])
    return f"{env} {command}" if env else command


def _communicate(process: subprocess.Popen[str], case: Case, port: int | None
                 ) -> tuple[str, str, bool, bool]:  # fmt: skip
    """Wait for the process (signalled, or stopped once it serves): its stdout and stderr,
    whether it ran out of time and whether it started serving."""
    served = False
    if case.signal is not None:
        time.sleep(case.signal[1])
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(case.signal[0])
    if case.serves and port is not None:
        deadline = time.monotonic() + case.timeout
        while process.poll() is None and time.monotonic() < deadline:
            if _listening(port):
                served = True
                process.send_signal(signal.SIGTERM)
                break
            time.sleep(0.25)
    try:
        out, err = process.communicate(timeout=case.timeout)
        return out, err, False, served
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return out, err, True, served


def resumable_output(argv: Sequence[str], work: Path) -> list[str]:
    """The output of ``embed`` or ``recompress`` when it is a new folder: they keep the shards
    written before an error, and their manifest, for ``--resume`` (docs/scale.md)."""
    if not argv or argv[0] not in ("embed", "recompress") or "--out" not in argv[:-1]:
        return []
    out = Path(argv[list(argv).index("--out") + 1])
    if out.exists() or not out.is_relative_to(work):
        return []
    return [out.relative_to(work).as_posix()]


def run_cli_case(case: Case, fx: Fixtures, keep: bool) -> Result:
    folder = fx.case_folder(case.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if case.prepare is not None:
        case.prepare(folder)
    prefix = fx.rel(folder) + "/"
    before = {**snapshot(fx.work, skip=UNWATCHED), **snapshot(folder, prefix)}
    may_add = (*case.may_add, *resumable_output(case.argv, fx.work))
    port = free_port() if "{PORT}" in " ".join(case.argv) else None
    argv = [a.replace("{PORT}", str(port)) for a in case.argv]
    env = {**fx.env, **dict(case.env)}
    started = time.perf_counter()
    process = subprocess.Popen(
        [*fx.demitasse, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        errors="replace", env=env, cwd=folder, start_new_session=True,
    )  # fmt: skip
    out, err, timed_out, served = _communicate(process, case, port)
    seconds = time.perf_counter() - started
    after = {**snapshot(fx.work, skip=UNWATCHED), **snapshot(folder, prefix)}
    code = process.returncode
    allowed = case.may_change if code == 0 else ()
    changed, added = changes(before, after, (*allowed, *may_add))
    outside = [p for p in added if not p.startswith(prefix)]
    lost = bool(changed or outside or fx.marker.exists())
    left = bool(temporaries(after) or (code != 0 and added))
    outcome = classify_cli(case.expect, code, err, lost=lost, left=left, timed_out=timed_out,
                           signum=case.signal[0] if case.signal else None)  # fmt: skip
    notes = _notes(changed, outside, added if code != 0 else temporaries(added), fx, served)
    if served:
        outcome = ACCEPTED_BAD if case.expect == REFUSE else OK_SUCCEEDED
    if outcome in GOOD and not keep:
        shutil.rmtree(folder, ignore_errors=True)
    if fx.marker.exists():
        _remove(fx.marker)
    lines = stderr_lines(err) or stderr_lines(out)
    detail = lines[0] if lines else ""
    if outcome in (TRACEBACK, MULTI_LINE) and len(lines) > 1:
        detail = f"{lines[0]} … {lines[-1]}"
    return Result(case.name, case.expect, outcome, shown_command(case, argv, fx.work),
                  detail[:400], seconds, code, notes)  # fmt: skip


def _notes(changed: list[str], outside: list[str], added: list[str], fx: Fixtures,
           served: bool) -> list[str]:  # fmt: skip
    notes = []
    if changed:
        notes.append("removed or changed: " + ", ".join(changed[:5]))
    if outside:
        notes.append("written outside its output: " + ", ".join(outside[:5]))
    if fx.marker.exists():
        notes.append("a pickle in the input ran (the marker file appeared)")
    left = temporaries(added) or added
    if left and not outside:
        notes.append("left: " + ", ".join(left[:5]))
    if served:
        notes.append("it started serving (stopped with SIGTERM)")
    return notes


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int | None
    headers: dict[str, str]
    body: bytes


def parse_replies(raw: bytes) -> list[Reply]:
    """The HTTP/1.1 responses in ``raw`` (Content-Length or chunked bodies)."""
    replies = []
    while raw.startswith(b"HTTP/"):
        head, sep, rest = raw.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            break
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        if 100 <= status < 200:  # an interim answer (100 Continue): no body, the real one next
            raw = rest
            continue
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body, rest = _dechunk(rest)
        else:
            length = int(headers.get("content-length", len(rest)))
            body, rest = rest[:length], rest[length:]
        replies.append(Reply(status, headers, body))
        raw = rest
    return replies


def _dechunk(data: bytes) -> tuple[bytes, bytes]:
    body = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            return body, b""
        if size == 0:
            return body, data.partition(b"\r\n")[2]
        body, data = body + data[:size], data[size + 2 :]


def request(
    body: bytes | None = b"",
    *,
    method: str = "POST",
    path: str = "/v1/embeddings",
    headers: dict[str, str] | None = None,
    length: str | None = None,
    version: str = "HTTP/1.1",
) -> bytes:
    """A raw request; Content-Length from the body unless ``length`` is given (or the body is
    None: no Content-Length header)."""
    fields = {"Host": "127.0.0.1", "Content-Type": "application/json", "Connection": "close"}
    fields.update(headers or {})
    if body is not None:
        fields.setdefault("Content-Length", length if length is not None else str(len(body)))
    head = f"{method} {path} {version}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in fields.items() if v is not None
    )
    return head.encode("latin-1", "surrogateescape") + b"\r\n" + (body or b"")


def exchange(port: int, parts: Sequence[bytes | float], timeout: float = 60.0) -> bytes:
    """Send ``parts`` (bytes, or a pause in seconds) and read until the server closes (no
    bytes: no answer, or no server)."""
    try:
        conn = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError:
        return b""
    with conn:
        with contextlib.suppress(OSError):  # the server may answer and close mid-send
            for part in parts:
                if isinstance(part, float):
                    time.sleep(part)
                else:
                    conn.sendall(part)
        raw = b""
        with contextlib.suppress(OSError):
            while chunk := conn.recv(1 << 20):
                raw += chunk
        return raw


@dataclass(frozen=True)
class ServerCase:
    name: str
    expect: str
    parts: tuple[bytes | float, ...] = ()
    #: A number of identical requests sent at once (each answer checked).
    concurrent: int = 1
    #: Answers expected on the connection (pipelined requests).
    answers: int = 1
    api_key: bool = False


def _j(value: Any) -> bytes:
    return json.dumps(value).encode()


def server_cases() -> list[ServerCase]:
    """Hostile requests, each sent on its own connection."""
    ok = {"input": "a dog plays", "model": "tm"}

    def body(expect: str, name: str, **fields: Any) -> ServerCase:
        return ServerCase(name, expect, (request(_j({**ok, **fields})),))

    def without(name: str, key: str, expect: str = REFUSE) -> ServerCase:
        payload = {k: v for k, v in ok.items() if k != key}
        return ServerCase(name, expect, (request(_j(payload)),))

    def raw(name: str, expect: str, data: bytes, **options: Any) -> ServerCase:
        return ServerCase(name, expect, (request(data, **options),))

    cases = [
        body(SUCCEED, "ok/string"),
        body(SUCCEED, "ok/list", input=["a dog", "a cat"]),
        body(SUCCEED, "ok/dimensions-4", dimensions=4),
        body(SUCCEED, "ok/dimensions-8", dimensions=8),
        *[body(SUCCEED, f"ok/encoding-{f}", encoding_format=f)
          for f in ("float", "base64", "int8", "binary")],
        body(SUCCEED, "ok/3000-inputs", input=["a dog plays"] * 3000),
        body(SUCCEED, "input/lone-surrogate", input=["a \ud800 dog", "\udfff"]),
        body(EITHER, "input/whitespace-only", input=" "),
        body(EITHER, "dimensions/null", dimensions=None),
        body(EITHER, "encoding/null", encoding_format=None),
        body(EITHER, "encoding/upper-case", encoding_format="FLOAT"),
        body(EITHER, "model/upper-case", model="TM"),
        body(EITHER, "fields/user-number", user=5),
        body(EITHER, "fields/unknown-extra", temperature=0.5),
        without("model/missing", "model"),
        without("input/missing", "input"),
    ]  # fmt: skip
    refused = {
        "dimensions": [0, -1, 9, 10**12, 4.5, "4", True, [4], 1e999],
        "encoding_format": ["bogus", "", 5, "rescore", "pq16", ["float"]],
        "model": ["other", 5, "", None, ["tm"]],
        "input": [
            "",
            [],
            [""],
            [1, 2],
            [[1, 2]],
            None,
            5,
            {"a": 1},
            ["ok", 5],
            ["ok", None],
            "x" * 40_000,
            ["a"] * 16_385,
        ],
    }
    for key, values in refused.items():
        for value in values:
            label = repr(value) if len(repr(value)) < 30 else f"{type(value).__name__}-long"
            cases.append(body(REFUSE, f"{key}/{label}", **{key: value}))
    cases += _raw_body_cases(raw)
    cases += _framing_cases(ok)
    return cases


def _raw_body_cases(raw: Callable[..., ServerCase]) -> list[ServerCase]:
    good = b'{"input": "a dog plays", "model": "tm"}'
    return [
        raw("body/invalid-utf8-in-string", SUCCEED, b'{"input": "a d\xffg", "model": "tm"}'),
        raw("body/invalid-utf8-outside-strings", REFUSE, b'{"input": "a", \xff"model": "tm"}'),
        raw("body/not-json", REFUSE, b"hello"),
        raw("body/empty", REFUSE, b""),
        raw("body/null", REFUSE, b"null"),
        raw("body/list", REFUSE, b"[]"),
        raw("body/empty-object", REFUSE, b"{}"),
        raw("body/nan-literal", REFUSE, b'{"input": "a", "model": "tm", "dimensions": NaN}'),
        raw("body/infinity-literal", REFUSE,
            b'{"input": "a", "model": "tm", "dimensions": Infinity}'),
        raw("body/huge-integer", REFUSE,
            b'{"input": "a", "model": "tm", "dimensions": ' + b"9" * 5000 + b"}"),
        raw("body/deep-nesting", REFUSE, b'{"input": ' + b"[" * 100_000 + b"}"),
        raw("body/duplicate-key", EITHER, b'{"input": "a", "input": "b", "model": "tm"}'),
        raw("body/bom-prefix", EITHER, b"\xef\xbb\xbf" + good),
        raw("body/utf16", EITHER, good.decode().encode("utf-16")),
        raw("body/trailing-garbage", REFUSE, good + b" junk"),
        raw("body/truncated-json", REFUSE, good[:-5]),
        raw("headers/content-type-text", EITHER, good, headers={"Content-Type": "text/plain"}),
        raw("headers/content-type-form", EITHER, good,
            headers={"Content-Type": "application/x-www-form-urlencoded"}),
        raw("headers/no-content-type", EITHER, good, headers={"Content-Type": None}),
        raw("headers/charset-latin1", EITHER, good,
            headers={"Content-Type": "application/json; charset=latin-1"}),
        raw("headers/request-id-10kb", SUCCEED, good, headers={"X-Request-ID": "r" * 10_000}),
        raw("headers/request-id-non-ascii", SUCCEED, good,
            headers={"X-Request-ID": "\udcff\udcfe-id"}),
        raw("headers/authorization-junk", SUCCEED, good,
            headers={"Authorization": "Bearer \udcff junk"}),
        raw("headers/expect-100-continue", SUCCEED, good, headers={"Expect": "100-continue"}),
        raw("http/1.0", SUCCEED, good, version="HTTP/1.0"),
        raw("method/get-embeddings", REFUSE, b"", method="GET"),
        raw("method/put-embeddings", REFUSE, good, method="PUT"),
        raw("method/delete-embeddings", REFUSE, b"", method="DELETE"),
        raw("path/unknown", REFUSE, good, path="/v1/chat/completions"),
        raw("path/traversal", REFUSE, b"", method="GET",
            path="/v1/models/..%2f..%2f..%2fetc%2fpasswd"),
        raw("path/models", SUCCEED, None, method="GET", path="/v1/models"),
        raw("path/models-tm", SUCCEED, None, method="GET", path="/v1/models/tm"),
        raw("path/models-other", REFUSE, None, method="GET", path="/v1/models/other"),
        raw("path/health", SUCCEED, None, method="GET", path="/health"),
        raw("path/trailing-slash", EITHER, good, path="/v1/embeddings/"),
        raw("path/query-string", EITHER, good, path="/v1/embeddings?x=%ff"),
    ]  # fmt: skip


def _framing_cases(ok: dict[str, Any]) -> list[ServerCase]:
    good = _j(ok)
    head = request(good)[: -len(good)]
    big = _j({**ok, "input": ["a dog plays"] * 80_000})  # ~1.1 MB, over --max-body-bytes 1 MiB
    chunked = {"Transfer-Encoding": "chunked"}
    chunk = f"{len(big):x}\r\n".encode() + big + b"\r\n0\r\n\r\n"
    small_chunk = f"{len(good):x}\r\n".encode() + good + b"\r\n0\r\n\r\n"
    return [
        ServerCase("size/content-length-10^12", REFUSE, (request(good, length="10" + "0" * 11),)),
        ServerCase("size/body-over-limit", REFUSE, (request(big),)),
        ServerCase("size/chunked-over-limit", REFUSE, (request(None, headers=chunked) + chunk,)),
        ServerCase("size/chunked-small", SUCCEED, (request(None, headers=chunked) +
                                                   small_chunk,)),
        ServerCase("framing/content-length-negative", REFUSE, (request(good, length="-1"),)),
        ServerCase("framing/content-length-text", REFUSE, (request(good, length="abc"),)),
        ServerCase("framing/two-content-lengths", REFUSE,
                   (request(good, headers={"Content-Length": "5, 7"}),)),
        ServerCase("framing/unknown-transfer-encoding", REFUSE,
                   (request(good, headers={"Transfer-Encoding": "gzip"}),)),
        ServerCase("framing/header-100kb", EITHER,
                   (request(good, headers={"X-Big": "a" * 100_000}),)),
        ServerCase("slow/body-slower-than-timeout", REFUSE, (head, good[:10], 3.5, good[10:])),
        ServerCase("slow/body-shorter-than-length", REFUSE, (head, good[:-3])),
        ServerCase("slow/headers-never-finished", REFUSE, (head[:40],)),
        ServerCase("pipelined/two-requests", SUCCEED,
                   (request(good, headers={"Connection": "keep-alive"}) + request(good),),
                   answers=2),
        ServerCase("concurrent/60-requests", EITHER, (request(good),), concurrent=60),
        ServerCase("auth/no-key", REFUSE, (request(good),), api_key=True),
        ServerCase("auth/wrong-key", REFUSE,
                   (request(good, headers={"Authorization": "Bearer wrong"}),), api_key=True),
        ServerCase("auth/right-key", SUCCEED,
                   (request(good, headers={"Authorization": "Bearer s3cret"}),), api_key=True),
        ServerCase("auth/basic-scheme", REFUSE,
                   (request(good, headers={"Authorization": "Basic czNjcmV0"}),), api_key=True),
        ServerCase("auth/health-without-key", EITHER,
                   (request(None, method="GET", path="/health"),), api_key=True),
    ]  # fmt: skip


class Server:
    """``demitasse serve`` in a subprocess, its log in a file."""

    def __init__(self, fx: Fixtures, *extra: str) -> None:
        self.port = free_port()
        self.log_path = fx.work / "server" / f"serve-{self.port}.log"
        self.log_path.parent.mkdir(exist_ok=True)
        self.argv = [
            "serve",
            str(fx.models["tm"]),
            "--port",
            str(self.port),
            "--name",
            "tm",
            "--body-timeout",
            "2",
            "--max-body-bytes",
            str(1 << 20),
            *extra,
        ]
        self.command = shown_command(Case("serve", tuple(self.argv), SUCCEED), self.argv,
                                     fx.work)  # fmt: skip
        with self.log_path.open("w") as log_file:
            self.process = subprocess.Popen(
                [*fx.demitasse, *self.argv], stdout=log_file, stderr=subprocess.STDOUT,
                env=fx.env, cwd=fx.work, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while not _listening(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start:\n{self.log()}")
            time.sleep(0.25)

    def log(self, start: int = 0) -> str:
        return self.log_path.read_text(errors="replace")[start:]

    def alive(self) -> bool:
        if self.process.poll() is not None:
            return False
        health = parse_replies(
            exchange(
                self.port,
                [
                    request(
                        None,
                        method="GET",
                        path="/health",
                        headers={"Authorization": "Bearer s3cret"},
                    )
                ],
            )
        )
        return bool(health) and health[0].status == 200

    def stop(self) -> tuple[int | None, str]:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = None
        return code, self.log()


def run_server_case(case: ServerCase, server: Server) -> Result:
    started = time.perf_counter()
    offset = len(server.log())
    if case.concurrent > 1:
        with ThreadPoolExecutor(case.concurrent) as pool:
            raws = list(pool.map(lambda _: exchange(server.port, case.parts),
                                 range(case.concurrent)))  # fmt: skip
    else:
        raws = [exchange(server.port, case.parts)]
    replies = [reply for raw in raws for reply in parse_replies(raw)]
    outcomes = [classify_http(case.expect, r.status, r.body) for r in replies]
    if len(replies) < case.answers * case.concurrent:
        outcomes.append(NO_ANSWER)
    if TRACEBACK_LINE in server.log(offset):
        outcomes.append(TRACEBACK)
    if not server.alive():
        outcomes.append(SERVER_DIED)
    outcome = worst(outcomes)
    statuses = Counter(r.status for r in replies)
    first = replies[0].body[:200].decode("utf-8", "replace") if replies else "(no answer)"
    detail = ", ".join(f"{s}×{n}" if n > 1 else str(s) for s, n in statuses.items())
    sent = b"".join(p for p in case.parts if isinstance(p, bytes))
    command = _shown_request(sent, case.concurrent)
    return Result(f"server/{case.name}", case.expect, outcome, command,
                  f"{detail}: {first}", time.perf_counter() - started)  # fmt: skip


def _shown_request(sent: bytes, concurrent: int) -> str:
    """A request as sent, less the headers every request carries (escaped, cut at 300 bytes)."""
    for usual in (b"Host: 127.0.0.1\r\n", b"Connection: close\r\n",
                  b"Content-Type: application/json\r\n"):  # fmt: skip
        sent = sent.replace(usual, b"", 1)
    text = sent[:300].decode("latin-1").encode("unicode_escape").decode("ascii")
    more = f" … ({len(sent):,} bytes)" if len(sent) > 300 else ""
    times = f" ×{concurrent} at once" if concurrent > 1 else ""
    return f"{text}{more}{times}"


def run_server_cases(fx: Fixtures, cases: list[ServerCase], progress: Callable[[Result], None]
                     ) -> list[Result]:  # fmt: skip
    results: list[Result] = []
    before = snapshot(fx.work, skip=UNWATCHED)
    for with_key in (False, True):
        chosen = [c for c in cases if c.api_key == with_key]
        if not chosen:
            continue
        server = Server(fx, *(["--api-key", "s3cret"] if with_key else []))
        for case in chosen:
            result = run_server_case(case, server)
            results.append(result)
            progress(result)
        code, log = server.stop()
        ok = code in (0, 128 + signal.SIGTERM, -signal.SIGTERM) and TRACEBACK_LINE not in log
        name = "server/stop-on-sigterm" + ("-with-key" if with_key else "")
        last = stderr_lines(log)[-1] if stderr_lines(log) else ""
        results.append(Result(name, SUCCEED, OK_SUCCEEDED if ok else OTHER_EXIT,
                              server.command + " (then SIGTERM)", f"exit {code}: {last}", 0.0,
                              code))  # fmt: skip
        progress(results[-1])
    changed, added = changes(before, snapshot(fx.work, skip=UNWATCHED))
    lost = bool(changed or added)
    results.append(
        Result(
            "server/files-untouched",
            SUCCEED,
            LOST if lost else OK_SUCCEEDED,
            "(every server case)",
            ", ".join([*changed, *added][:5]),
            0.0,
        )
    )
    return results


# --------------------------------------------------------------------------------------------
# The run, the records and the page
# --------------------------------------------------------------------------------------------


def select(names: Sequence[str], only: str | None, limit: int | None, every: int = 1) -> list[int]:
    """Indices of the cases to run: those whose name holds one of ``only``'s comma-separated
    substrings, every ``every``-th of them, at most ``limit``."""
    wanted = [part for part in (only or "").split(",") if part]
    chosen = [i for i, n in enumerate(names) if not wanted or any(w in n for w in wanted)]
    chosen = chosen[:: max(1, every)]
    return chosen[:limit] if limit is not None else chosen


class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done, self.failing = total, 0, 0
        self.started = time.perf_counter()
        self.lock = threading.Lock()

    def __call__(self, result: Result) -> None:
        with self.lock:
            self.done += 1
            if result.outcome not in GOOD:
                self.failing += 1
                log(f"  FAIL {result.name}: {result.outcome}: {result.detail[:160]}")
            if self.done % 25 == 0 or self.done == self.total:
                elapsed = time.perf_counter() - self.started
                log(f"[{self.done}/{self.total}] {self.failing} failing, {elapsed:.0f} s")


def run_all(fx: Fixtures, args: argparse.Namespace) -> list[Result]:
    cli = all_cli_cases(fx)
    server = server_cases()
    names = [c.name for c in cli] + [f"server/{c.name}" for c in server]
    chosen = select(names, args.only, args.limit, args.every)
    cli_chosen = [cli[i] for i in chosen if i < len(cli)]
    server_chosen = [server[i - len(cli)] for i in chosen if i >= len(cli)]
    progress = Progress(len(cli_chosen) + len(server_chosen))
    log(f"{len(cli_chosen)} command-line cases, {len(server_chosen)} server cases "
        f"(of {len(cli)} and {len(server)})")  # fmt: skip

    def one(case: Case) -> Result:
        try:
            result = run_cli_case(case, fx, args.keep)
        except Exception as exc:  # a bug of the probe, not of demitasse: say which case
            raise RuntimeError(f"case {case.name}: {exc!r}") from exc
        progress(result)
        return result

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(one, cli_chosen))
    if server_chosen:
        results += run_server_cases(fx, server_chosen, progress)
    return results


def records(results: list[Result], wall: float) -> list[ResultRecord]:
    out = []
    for dataset, chosen in (
        ("cli", [r for r in results if not r.name.startswith("server/")]),
        ("server", [r for r in results if r.name.startswith("server/")]),
        ("all", results),
    ):
        counts = Counter(r.outcome for r in chosen)
        metrics = {o: counts.get(o, 0) for o in OUTCOMES}
        metrics["total"] = len(chosen)
        metrics["failing"] = sum(n for o, n in counts.items() if o not in GOOD)
        metrics["accepted-as-success"] = sum(r.expect == EITHER and r.outcome == OK_SUCCEEDED
                                             for r in chosen)  # fmt: skip
        for metric, score in metrics.items():
            failing = sorted(r.name for r in chosen if r.outcome == metric)
            extra: dict[str, Any] = {"cases": failing} if metric in FAILURES and failing else {}
            if dataset == "all" and metric == "total":
                extra["wall_seconds"] = round(wall)
            out.append(ResultRecord(
                model="tiny-test-models", layer=None, method="edge-probe", dim=0,
                precision="-", task="edge-probe", dataset=dataset, metric=metric,
                score=float(score), extra=extra,
            ))  # fmt: skip
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>").replace("`", "'")


def page(results: list[Result], command: str, machine: str, wall: float, partial: bool) -> str:
    counts = Counter(r.outcome for r in results)
    cli = Counter(r.outcome for r in results if not r.name.startswith("server/"))
    server = Counter(r.outcome for r in results if r.name.startswith("server/"))
    rows = [[o, str(counts[o]), str(cli[o]), str(server[o])] for o in OUTCOMES if counts[o]]
    rows.append(["**total**", str(len(results)), str(sum(cli.values())),
                 str(sum(server.values()))])  # fmt: skip
    failing = [r for r in results if r.outcome not in GOOD]
    accepted = [r for r in results if r.expect == EITHER and r.outcome == OK_SUCCEEDED]
    lines = [
        *page_head(
            "# Edge probe: bad inputs, tampered models, signals, hostile requests (`edge_probe`)",
            command,
            machine,
            wall,
            " (a partial run)" if partial else "",
        ),
        "Each case runs `demitasse` in a subprocess with `OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 "
        "DEMITASSE_CACHE=$W/cache DEMITASSE_DATA=$W/no-data`, `$W` the probe's work folder "
        "(tiny random encoders, models fitted on them and on random vectors, inputs, files of "
        "the user's: `build_fixtures`), a timeout of 60 s, and the work folder hashed before and "
        "after. Server cases are raw HTTP requests (shown as sent, less the headers `Host`, "
        "`Connection: close` and `Content-Type: application/json` that each carries unless it "
        "says otherwise) to `demitasse serve "
        "$W/models/tm --port PORT --name tm --body-timeout 2 --max-body-bytes 1048576`, the "
        "`auth/` ones to a second server with `--api-key s3cret` too. Outcomes are defined in "
        "the script's docstring.",
        "",
        markdown_table(["outcome", "cases", "command line", "server"], rows),
        "",
        f"## Failing cases ({len(failing)})",
        "",
    ]
    if failing:
        table = [[f"`{r.name}`", r.outcome, f"`{_cell(r.command)}`",
                  _cell("; ".join([r.detail, *r.notes]))] for r in failing]  # fmt: skip
        lines += [markdown_table(["case", "outcome", "command", "first stderr line / answer"],
                                 table), ""]  # fmt: skip
        lines += [
            "Reproduce one: `python benchmarks/edge_probe.py --only CASE --work DIR "
            "--keep`, then the command with `W=DIR` (its folder, `$W/cases/…`, kept).",
            "",
        ]
    else:
        lines += ["None.", ""]
    lines += [f"## Accepted as success ({len(accepted)})", "",
              "Cases where refusing and succeeding are both defensible; these succeeded. A "
              "human should judge each.", ""]  # fmt: skip
    if accepted:
        table = [[f"`{r.name}`", f"`{_cell(r.command)}`", _cell(r.detail)] for r in accepted]
        lines += [markdown_table(["case", "command", "stderr / answer"], table), ""]
    lines += [f"Records: `benchmarks/results/{NAME}.json`.", ""]
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None,
                        help="run the cases whose name holds one of these comma-separated "
                             "substrings (e.g. encode/texts,server/)")  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, help="run at most N cases")
    parser.add_argument(
        "--every",
        type=int,
        default=1,
        help="run every N-th case only (a quick sample of every kind)",
    )
    parser.add_argument("--list", action="store_true", help="list the cases' names and exit")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="command-line cases run at once (default 1; a file changed "
        "outside a case's folder is then blamed on whichever case saw it)",
    )
    parser.add_argument("--work", default=None,
                        help="work folder (kept; default: a temporary one, removed)")  # fmt: skip
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep every case's folder (failing ones are always kept)",
    )
    parser.add_argument(
        "--write", action="store_true", help="write the records and page even for a partial run"
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.work:
            work = Path(args.work).resolve()
            if work.exists() and any(work.iterdir()):
                raise SystemExit(f"--work {work}: not empty; give a new or empty folder")
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="edge-")))
        fx = plan_fixtures(work)
        if args.list:
            names = [c.name for c in all_cli_cases(fx)]
            print("\n".join([*names, *(f"server/{c.name}" for c in server_cases())]))
            return 0
        log(f"building the fixtures in {work}")
        with contextlib.redirect_stderr(io.StringIO()):  # the libraries' progress bars
            build_fixtures(fx)
        log(f"fixtures ready in {time.perf_counter() - started:.0f} s")
        results = run_all(fx, args)
        wall = time.perf_counter() - started
        if args.work:  # every case with its time, for a look at the run
            rows = [dataclasses.asdict(r) for r in results]
            (work / "results.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False))
    partial = args.only is not None or args.limit is not None or args.every > 1
    command = "python benchmarks/edge_probe.py " + " ".join(sys.argv[1:])
    text = page(results, command.strip(), machine_description(), wall, partial)
    if not partial or args.write:
        write_records(HERE / "results" / f"{NAME}.json", records(results, wall))
        update_section(RESULTS_MD, NAME, text)
    print(text)
    failing = sum(r.outcome not in GOOD for r in results)
    log(f"{len(results)} cases, {failing} failing, {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
