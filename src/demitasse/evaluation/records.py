"""Result records: one JSON object per score, the only thing reports and benchmarks read."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from demitasse.errors import DataError, one_line
from demitasse.io import atomic_write_json, read_json


@dataclass
class ResultRecord:
    model: str
    layer: int | None
    method: str
    dim: int
    precision: str
    task: str
    dataset: str
    metric: str
    score: float
    bytes_per_vector: int | None = None
    fit_data: str | None = None
    machine: str = field(default_factory=lambda: _machine())
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record as strict JSON values: an undefined score (NaN, e.g. the Spearman
        correlation of constant gold scores) is ``null``, with the reason in ``extra``."""
        record = asdict(self)
        if not math.isfinite(self.score):
            record["score"] = None
            record["extra"] = {"undefined": UNDEFINED_SCORE, **record["extra"]}
        if not record["extra"]:
            del record["extra"]
        return record

    @classmethod
    def from_dict(cls, data: Any) -> ResultRecord:
        """A record from its JSON object, checking every field's type (one-line DataError)."""
        if not isinstance(data, dict):
            raise DataError(f"a result record must be a JSON object, got {_shown(data)}")
        missing = {"model", "method", "dim", "task", "dataset", "metric", "score"} - set(data)
        if missing:
            raise DataError(f"result record lacks {', '.join(sorted(missing))}: {_shown(data)}")
        known = {k: v for k, v in data.items() if k in _FIELD_TYPES}
        known.setdefault("layer", None)
        known.setdefault("precision", "float32")
        known.setdefault("machine", "")
        for name, value in known.items():
            if not _FIELD_TYPES[name](value):
                raise DataError(f"result record field {name!r} is {_shown(value)}: {_shown(data)}")
        if known["score"] is None:
            known["score"] = math.nan
        return cls(**known)


def rescoring_extra(
    *,
    rescore: float,
    rescore_precision: str | None,
    index_bytes_per_vector: int,
    rescore_bytes_per_vector: int,
    rescore_source: str | None = None,
) -> dict[str, Any]:
    """What a search record carries in ``extra`` about its rescoring: the factor F (1 without
    rescoring), the precision of the document vectors kept for it and where they come from
    (``"compressed"`` or ``"encoder"``; both None without), and the bytes a document costs,
    separately: ``index_bytes`` (the codes the first stage searches) and ``store_bytes``
    (anything else kept per document, such as the rescoring copy). A record that carries them
    has ``bytes_per_vector`` = their sum: every byte a document costs, wherever it lives."""
    factor = float(rescore)
    return {
        "rescore": int(factor) if factor.is_integer() else factor,
        "rescore_precision": rescore_precision,
        "rescore_source": rescore_source,
        "index_bytes": int(index_bytes_per_vector),
        "store_bytes": int(rescore_bytes_per_vector),
    }


UNDEFINED_SCORE = "the metric is undefined for these inputs (e.g. constant gold scores)"


#: numpy.finfo(numpy.float32).max: no metric comes near it, and a plot cannot span ±1e308.
LARGEST_SCORE = 3.4028234663852886e38


def _number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= LARGEST_SCORE
    )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_FIELD_TYPES: dict[str, Any] = {
    "model": lambda v: isinstance(v, str),
    "layer": lambda v: v is None or _count(v),
    "method": lambda v: isinstance(v, str),
    "dim": lambda v: _count(v) and v >= 1,
    "precision": lambda v: isinstance(v, str),
    "task": lambda v: isinstance(v, str),
    "dataset": lambda v: isinstance(v, str),
    "metric": lambda v: isinstance(v, str),
    "score": lambda v: v is None or _number(v),
    "bytes_per_vector": lambda v: v is None or _count(v),
    "fit_data": lambda v: v is None or isinstance(v, str),
    "machine": lambda v: isinstance(v, str),
    "extra": lambda v: isinstance(v, dict),
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def mean_over_seeds(records: list[ResultRecord]) -> list[ResultRecord]:
    """One record per group of records that differ only in ``score`` and ``extra["seed"]``.

    A group's record keeps the first member's fields, scores the mean, and lists ``seeds`` and
    the sample standard deviation ``score_std`` in ``extra`` (0 for a single seed). Records
    without a seed pass through unchanged, in order; groups appear where their first member was.
    """
    groups: dict[str, list[ResultRecord]] = {}
    order: list[ResultRecord | str] = []
    for record in records:
        if "seed" not in record.extra:
            order.append(record)
            continue
        fields_but_seed = record.to_dict()
        fields_but_seed.pop("score")
        fields_but_seed["extra"] = {k: v for k, v in record.extra.items() if k != "seed"}
        key = json.dumps(fields_but_seed, sort_keys=True, default=str)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(record)
    averaged: list[ResultRecord] = []
    for item in order:
        if isinstance(item, ResultRecord):
            averaged.append(item)
            continue
        members = groups[item]
        scores = [m.score for m in members]
        mean = sum(scores) / len(scores)
        spread = sum((s - mean) ** 2 for s in scores) / max(1, len(scores) - 1)
        extra = {k: v for k, v in members[0].extra.items() if k != "seed"}
        extra |= {"seeds": [m.extra["seed"] for m in members], "score_std": math.sqrt(spread)}
        first = members[0].to_dict() | {"score": mean, "extra": extra}
        averaged.append(ResultRecord(**first))
    return averaged


@cache
def machine_description() -> str:
    """CPU model, core count and the threads torch would use: every figure carries it."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = os.environ.get("OMP_NUM_THREADS") or str(cores)
    described = f"{cpu}, {cores} cores, {threads} threads, {platform.system()} {platform.machine()}"
    torch = sys.modules.get("torch")  # only a process that already uses torch can use a GPU
    # is_initialized: never start CUDA here (a forked worker must not, and need not).
    if torch is not None and torch.cuda.is_initialized():
        described += f", GPU {torch.cuda.get_device_name()}"
    return described


def write_records(path: str | Path, records: list[ResultRecord]) -> None:
    atomic_write_json(path, [r.to_dict() for r in records])


def read_records(path: str | Path) -> list[ResultRecord]:
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise DataError(f"no results file at {path}")
    try:
        data = read_json(path)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise DataError(f"{path} is not valid JSON ({one_line(exc)})") from None
    if not isinstance(data, list):
        raise DataError(f"{path} must hold a JSON list of result records")
    records = []
    for index, item in enumerate(data):
        try:
            records.append(ResultRecord.from_dict(item))
        except DataError as exc:
            raise DataError(f"{path}: record {index}: {exc}") from None
    return records


def _machine() -> str:
    return machine_description()
