"""The local engine: one process reads each input file once, in order, and writes its shards.

Memory is bounded by one chunk (``batch_size`` records and their codes), whatever the corpus
size: a shard is streamed to disk a row group at a time.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from demitasse.bulk.ids import DuplicateIdError
from demitasse.bulk.job import BulkJob, ShardSink, convert, count_empty
from demitasse.bulk.manifest import Manifest
from demitasse.bulk.sources import UnreadableRestError, iter_chunks
from demitasse.errors import DataError

if TYPE_CHECKING:
    from demitasse.model import CompressedModel

logger = logging.getLogger(__name__)


def settled_shards(manifest: Manifest, file: int) -> set[int] | None:
    """The shards of ``file`` already written or skipped; None once the file is finished."""
    if file in manifest.finished_files():
        return None
    return {shard for f, shard in manifest.done() if f == file}


def run_local(job: BulkJob, model: CompressedModel, manifest: Manifest, progress: Any) -> None:
    """Write every pending shard of ``job``; ``progress`` (a :func:`demitasse.progress.progress`
    counter) counts records."""
    sink = ShardSink(job, manifest, model)
    try:
        for index in range(len(job.inputs)):
            settled = settled_shards(manifest, index)
            if settled is not None:
                _run_file(job, model, sink, index, settled, progress)
    finally:
        sink.abandon()


def _run_file(
    job: BulkJob,
    model: CompressedModel,
    sink: ShardSink,
    index: int,
    settled: set[int],
    progress: Any,
) -> None:
    """The shards of one file not ``settled`` yet (usually all after the last settled one; a
    run the Ray engine stopped may leave gaps); a shard that cannot be read is recorded, and
    with ``--on-error skip`` the file continues at the next shard."""
    source = job.inputs[index]
    reading = min(set(range(len(settled) + 1)) - settled)  # the first gap
    while True:
        try:
            for shard, ids, values in iter_chunks(
                source, job.columns, job.shard_rows, job.batch_size, first_shard=reading
            ):
                if shard in settled:
                    reading = shard + 1
                    continue
                codes = convert(model, job.command, values, job.dim, job.precision)
                complete = sink.add(index, shard, ids, codes, count_empty(values))
                reading = shard + 1 if complete else shard
                progress.update(len(ids))
            sink.finish(index, last=True)
            return
        except DuplicateIdError:
            raise  # not a shard that cannot be read: the run stops, whatever --on-error says
        except UnreadableRestError as exc:
            sink.fail(index, reading, exc, last=True)  # nothing after this point can be read
            return
        except DataError as exc:
            sink.fail(index, reading, exc, last=False)
            reading += 1
