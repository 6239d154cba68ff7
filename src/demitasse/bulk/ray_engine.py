"""The Ray engine: Ray Data reads the pending shards in parallel tasks, a pool of
:class:`~demitasse.bulk.actors.DemitasseEncoder` (or ``DemitasseRecompressor``) actors converts
them, and the driver writes the shards in order, exactly as the local engine does.

Why not Ray's ``read_text``/``read_json`` and ``write_parquet``: ids are positions in the input
(``<file>:<line>``) and Ray Data numbers no rows; its ``read_text`` also splits lines on
Unicode separators (``str.splitlines``) where demitasse splits on ``\\n`` only, and reads a whole
file per task. Each task here reads one shard with the local engine's reader, so both engines
give the same ids, and a shard is the unit of resumption on Ray too. The driver receives the
codes (a few hundred bytes a record) and writes them; the encoding, the expensive part, runs on
the workers.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from demitasse.bulk.actors import DemitasseEncoder, DemitasseRecompressor
from demitasse.bulk.job import EMBED, BulkJob, ShardSink
from demitasse.bulk.manifest import Manifest
from demitasse.bulk.ray_stderr import without_false_alarm
from demitasse.bulk.sources import count_records, iter_chunks
from demitasse.errors import DataError, DemitasseError

if TYPE_CHECKING:
    from demitasse.model import CompressedModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RayOptions:
    """Where Ray runs and how wide: ``address`` None starts (or joins) a local Ray."""

    address: str | None = None
    concurrency: int = 1  # model actors
    threads: int = 1  # torch threads (and Ray CPUs) per actor
    num_cpus: int | None = None  # CPUs of a local Ray that is started here


def pending_pieces(job: BulkJob, manifest: Manifest) -> list[dict[str, Any]]:
    """Every shard still to write: file, shard, and how many records it should hold."""
    done, finished = manifest.done(), manifest.finished_files()
    pieces = []
    for index, source in enumerate(job.inputs):
        if index in finished:
            continue
        count = count_records(source)
        for shard in range((count + job.shard_rows - 1) // job.shard_rows):
            if (index, shard) not in done:
                rows = min(job.shard_rows, count - shard * job.shard_rows)
                pieces.append({"file": index, "shard": shard, "rows": rows})
    return pieces


def _read_piece(batch: dict[str, np.ndarray], job: BulkJob) -> dict[str, Any]:
    """One shard's records, or none when it cannot be read (the driver notices the shortfall
    and asks the local reader for the reason)."""
    file, shard = int(batch["file"][0]), int(batch["shard"][0])
    ids: list[str] = []
    values: list[Any] = []
    try:
        for _, chunk_ids, chunk_values in iter_chunks(
            job.inputs[file], job.columns, job.shard_rows, job.batch_size, shard, shard
        ):
            ids += chunk_ids
            values.append(chunk_values)
    except DataError:
        ids, values = [], []
    out: dict[str, Any] = {"_file": np.full(len(ids), file), "_shard": np.full(len(ids), shard)}
    out["_id"] = np.array(ids, dtype=object)
    if job.command == EMBED:
        texts = [t for v in values for t in v]
        out[job.columns.value] = np.array(texts, dtype=object)
        out["_empty"] = np.array([not t.strip() for t in texts], dtype=bool)
    else:
        out["_empty"] = np.zeros(len(ids), dtype=bool)
        out[job.columns.value] = np.concatenate(values) if values else np.zeros((0, 1), "f4")
    return out


def _ensure_ray(options: RayOptions) -> Any:
    try:
        import ray
    except ImportError:
        raise DemitasseError("--engine ray needs Ray Data: pip install 'demitasse[ray]'") from None
    if not ray.is_initialized():
        # Not RAY_BACKEND_LOG_LEVEL: the driver's C++ core writes only errors to stderr
        # anyway, and setting it adds a line there saying it was set.
        # Ray Data re-reads its logging set-up at every execution; only this survives that.
        os.environ.setdefault("RAY_DATA_LOG_LEVEL", "ERROR")
        # ray.init puts in a SIGTERM handler of its own (sys.exit(15)), which would end the run
        # without demitasse's one line and exit status 143; the one that was there goes back.
        on_sigterm = signal.getsignal(signal.SIGTERM)
        ray.init(address=options.address, num_cpus=options.num_cpus, include_dashboard=False,
                 log_to_driver=False, logging_level=logging.ERROR)  # fmt: skip
        if on_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_sigterm)
    # Ray Data's plan, timing and deprecation notes would bury demitasse's one-line output.
    for name in [n for n in logging.root.manager.loggerDict if n.startswith("ray")]:
        logging.getLogger(name).setLevel(logging.ERROR)
    return ray


def _dataset(job: BulkJob, pieces: list[dict[str, Any]], options: RayOptions) -> Any:
    ray = _ensure_ray(options)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # shards reach the driver in order
    context.enable_progress_bars = False  # demitasse's own bar counts records
    actor = DemitasseEncoder if job.command == EMBED else DemitasseRecompressor
    ds = ray.data.from_items(pieces, override_num_blocks=len(pieces))
    # Reading is its own stage, not fused into the actors' (different remote arguments keep
    # Ray from fusing): fused, the actor stage's batch size bundled the one-row piece
    # descriptors into a single task, and one actor encoded every shard while the rest idled.
    # It takes no CPU of its own, so reads overlap the actors, which hold all the CPUs.
    ds = ds.map_batches(
        _read_piece, batch_size=1, fn_kwargs={"job": job}, num_cpus=0,
        compute=ray.data.TaskPoolStrategy(size=max(2, options.concurrency)),
    )  # fmt: skip
    return ds.map_batches(
        actor,
        batch_size=job.batch_size,
        compute=ray.data.ActorPoolStrategy(size=options.concurrency),
        num_cpus=options.threads,
        fn_constructor_kwargs={
            "model": job.model, "dim": job.dim, "precision": job.precision,
            "input_column": job.columns.value, "output_column": "_codes",
            "threads": options.threads,
        },
    )  # fmt: skip


def run_ray(
    job: BulkJob, model: CompressedModel, manifest: Manifest, progress: Any, options: RayOptions
) -> None:
    """Write every pending shard of ``job`` through a Ray Data pipeline."""
    pieces = pending_pieces(job, manifest)
    if not pieces:
        return
    # Built (and Ray started) before stderr is filtered: Ray's daemons, started with it, would
    # hold the filter's pipe open after the run.
    dataset = _dataset(job, pieces, options)
    sink = ShardSink(job, manifest, model)
    expected = {(p["file"], p["shard"]): p["rows"] for p in pieces}
    last = {p["file"]: p["shard"] for p in pieces}
    received: dict[tuple[int, int], int] = {}
    try:
        with without_false_alarm():
            for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
                for key, ids, codes, empty in _runs(batch):
                    received[key] = received.get(key, 0) + len(ids)
                    sink.add(key[0], key[1], ids, codes, empty)
                    progress.update(len(ids))
        sink.finish(-1, last=False)
    finally:
        sink.abandon()
    _settle(job, sink, expected, received, last)


def _runs(batch: dict[str, Any]) -> Any:
    """Split a batch into runs of one (file, shard)."""
    files, shards = batch["_file"], batch["_shard"]
    if len(files) == 0:
        return
    cuts = np.flatnonzero((np.diff(files) != 0) | (np.diff(shards) != 0)) + 1
    for begin, end in zip([0, *cuts], [*cuts, len(files)], strict=True):
        empty = int(batch["_empty"][begin:end].sum())
        key = (int(files[begin]), int(shards[begin]))
        yield key, batch["_id"][begin:end].tolist(), batch["_codes"][begin:end], empty


def _settle(
    job: BulkJob,
    sink: ShardSink,
    expected: dict[tuple[int, int], int],
    received: dict[tuple[int, int], int],
    last: dict[int, int],
) -> None:
    """Mark each file's last shard, and record the shards that came back short (unreadable),
    with the reason the local reader gives."""
    for shard in sink.manifest.shards:
        if last.get(shard["file"]) == shard["shard"]:
            shard["last"] = True
    sink.manifest.save(job.out)
    for key, rows in expected.items():
        if received.get(key, 0) < rows:
            sink.fail(*key, _reason(job, *key), last=last[key[0]] == key[1])


def _reason(job: BulkJob, file: int, shard: int) -> BaseException:
    try:
        for _ in iter_chunks(job.inputs[file], job.columns, job.shard_rows, job.batch_size,
                             shard, shard):  # fmt: skip
            pass
    except DataError as exc:
        return exc
    return DataError(f"{job.inputs[file].path}: shard {shard} came back incomplete from Ray")
