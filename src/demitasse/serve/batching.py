"""Dynamic batching: one encoder thread takes the texts of concurrent requests in one call.

A transformer spends about as long on one short sentence as on dozens padded together, so
encoding each request alone wastes the CPU. Requests (split into chunks of at most
``max_batch`` texts) wait in a queue; the encoder thread takes the oldest, then whatever else
arrives within ``max_wait_ms`` until ``max_batch`` texts are gathered, encodes them with one
:meth:`~demitasse.model.CompressedModel.embed` call, and finishes each request at its own width
and precision. One thread, because the encoder's own intra-op threads already use the cores,
and two forward passes at once would only contend for them.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from demitasse.model import CompressedModel

logger = logging.getLogger(__name__)

#: What a finished chunk yields: its rows (vectors or codes) and its token count.
Encoded = tuple[np.ndarray, int]


@dataclass
class _Job:
    texts: list[str]
    dim: int | None
    precision: str
    future: Future[Encoded] = field(default_factory=Future)


@dataclass
class WorkerStats:
    """Counters the health endpoint reports (the serve benchmark reads them)."""

    batches: int = 0
    texts: int = 0
    encoder_seconds: float = 0.0  # wall time inside CompressedModel.embed, the encoder proper
    #: CPU time of the encoder thread there: unlike wall time, it excludes waiting for a core
    #: (with torch's intra-op threads above 1, their work is not counted).
    encoder_cpu_seconds: float = 0.0


class EncoderWorker:
    """The encoder thread and its queue. ``batching=False`` encodes each chunk alone."""

    def __init__(
        self,
        model: CompressedModel,
        *,
        max_batch: int = 128,
        max_wait_ms: float = 2.0,
        batching: bool = True,
        count_tokens: Callable[[Sequence[str]], int] | None = None,
    ) -> None:
        self.model = model
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000
        self.batching = batching
        self.count_tokens = count_tokens or token_counter(model)
        self.stats = WorkerStats()
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="demitasse-encoder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued, then end the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def submit(self, texts: list[str], dim: int | None, precision: str) -> list[Future[Encoded]]:
        """Queue ``texts``; one future per chunk of at most ``max_batch`` texts, in order."""
        jobs = [
            _Job(texts[start : start + self.max_batch], dim, precision)
            for start in range(0, len(texts), self.max_batch)
        ]
        for job in jobs:
            self._queue.put(job)
        return [job.future for job in jobs]

    def _run(self) -> None:
        waiting: _Job | None = None
        stopping = False
        while not stopping:
            job = waiting if waiting is not None else self._queue.get()
            waiting = None
            if job is None:
                return
            jobs, size = [job], len(job.texts)
            deadline = time.monotonic() + self.max_wait
            while self.batching and size < self.max_batch:
                remaining = deadline - time.monotonic()
                try:  # past the deadline, still take what is already queued
                    more = (
                        self._queue.get(timeout=remaining)
                        if remaining > 0
                        else self._queue.get_nowait()
                    )
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                if size + len(more.texts) > self.max_batch:
                    waiting = more  # it opens the next batch
                    break
                jobs.append(more)
                size += len(more.texts)
            self._encode(jobs)

    def _encode(self, jobs: list[_Job]) -> None:
        # A request whose client went away was cancelled: leave its texts out.
        jobs = [job for job in jobs if job.future.set_running_or_notify_cancel()]
        if not jobs:
            return
        texts = [text for job in jobs for text in job.texts]
        try:
            started, cpu_started = time.perf_counter(), time.thread_time()
            vectors = self.model.embed(texts)
            self.stats.encoder_seconds += time.perf_counter() - started
            self.stats.encoder_cpu_seconds += time.thread_time() - cpu_started
        except Exception as exc:  # the requests fail; the thread keeps serving
            logger.exception("the encoder failed on a batch of %d texts", len(texts))
            for job in jobs:
                job.future.set_exception(exc)
            return
        self.stats.batches += 1
        self.stats.texts += len(texts)
        start = 0
        for job in jobs:
            rows = vectors[start : start + len(job.texts)]
            start += len(job.texts)
            try:
                codes = self.model.transform(
                    rows, dim=job.dim, precision=job.precision, normalize=True
                )
                job.future.set_result((codes, self.count_tokens(job.texts)))
            except Exception as exc:
                job.future.set_exception(exc)


def token_counter(model: CompressedModel) -> Callable[[Sequence[str]], int]:
    """Count tokens as the model's encoder sees them (truncated as it truncates), for the
    response's ``usage``; whitespace-separated words for an encoder without a tokenizer."""
    encoder = model.encoder
    tokenizer: Any = getattr(encoder, "tokenizer", None)
    if hasattr(tokenizer, "encode_batch_fast"):  # a static model's Rust tokenizer

        def count_static(texts: Sequence[str]) -> int:
            encodings = tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
            return sum(len(encoding.ids) for encoding in encodings)

        return count_static
    max_length = getattr(encoder, "max_seq_length", None)
    if callable(tokenizer) and max_length is not None:

        def count_transformer(texts: Sequence[str]) -> int:
            ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
            return sum(len(row) for row in ids)

        return count_transformer
    return lambda texts: sum(len(text.split()) for text in texts)
