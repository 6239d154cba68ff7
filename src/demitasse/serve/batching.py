"""Dynamic batching: one encoder thread takes the texts of concurrent requests in one batch.

A transformer spends about as long on one short sentence as on a dozen encoded together (a pass
reads every weight however few rows it multiplies), so encoding each request alone wastes the
CPU. Requests (split into chunks of at most ``max_batch`` texts) wait in a queue; the encoder
thread takes the oldest, then whatever else arrives within ``max_wait_ms`` until ``max_batch``
texts are gathered, and finishes each request at its own width and precision.

Padding a batch to its longest text would waste most of that gain on sentences of varied
length (a 10-token sentence padded to 40 costs what four do). Where the model allows it
(:meth:`~demitasse.encoders.transformer.TransformerEncoder.packing_matches`, checked when the
worker is made), a batch is one forward pass of texts packed end to end without padding;
otherwise (e.g. MPNet) one pass per group of similar token length (:func:`length_groups`).
One thread, because the encoder's own intra-op threads already use the cores, and two
forward passes at once would only contend for them.
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

from demitasse.errors import DemitasseError
from demitasse.model import CompressedModel, encoder_vectors
from demitasse.serve.protocol import RESCORE_ENCODING

logger = logging.getLogger(__name__)

#: What a finished chunk yields: its rows (vectors or codes) and its token count.
Encoded = tuple[np.ndarray, int]

#: What one more transformer forward pass costs, in padded tokens: the per-pass work that does
#: not grow with its rows (reading every weight, Python). all-MiniLM-L6-v2 on one CPU thread
#: takes about 11 ms for a pass of one 8-token sentence and 0.3 ms per token in a large batch:
#: about 30 tokens. Only the split into length groups depends on it, never the vectors.
PASS_COST_TOKENS = 30.0


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
    passes: int = 0  # encoder calls: one per batch, or one per length group of a batch
    encoder_seconds: float = 0.0  # wall time inside the encoder calls, the encoder proper
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
        count_tokens: Callable[[Sequence[str]], list[int]] | None = None,
        packing: bool | None = None,
    ) -> None:
        self.model = model
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000
        self.batching = batching
        self.count_tokens = count_tokens or token_counter(model)
        encoder: Any = model.load_encoder()
        padded = model.recipe.encoder_kind == "transformer"
        if packing is None:  # where packing reproduces the padded vectors of this model
            packing = padded and bool(encoder.packing_matches())
        #: One packed forward pass per batch; else a pass per length group (a transformer) or
        #: one pass (a static model, which pads nothing).
        self.packing = padded and packing
        self.pass_cost = PASS_COST_TOKENS if padded else float("inf")
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
            tokens = self.count_tokens(texts)
            vectors = self._embed(texts, tokens)
        except Exception as exc:  # the requests fail; the thread keeps serving
            logger.exception("the encoder failed on a batch of %d texts", len(texts))
            for job in jobs:
                job.future.set_exception(exc)
            return
        self.stats.batches += 1
        self.stats.texts += len(texts)
        start = 0
        for job in jobs:
            end = start + len(job.texts)
            try:
                codes = encoded_as(self.model, vectors[start:end], job.dim, job.precision)
                job.future.set_result((codes, sum(tokens[start:end])))
            except Exception as exc:
                job.future.set_exception(exc)
            start = end

    def _encode_group(self, texts: list[str]) -> np.ndarray:
        """The encoder's vectors of ``texts`` at the model's layer, in batches of the model's
        batch size."""
        return encoder_vectors(self.model, texts)

    def _embed(self, texts: list[str], tokens: list[int]) -> np.ndarray:
        """The encoder's vectors of ``texts``: packed in one forward pass, or one pass per
        group of similar length."""
        started, cpu_started = time.perf_counter(), time.thread_time()
        if self.packing:
            encoder: Any = self.model.load_encoder()
            groups = [list(range(len(texts)))]
            parts = [encoder.encode_packed(texts, layer=self.model.recipe.layer)]
        else:
            groups = length_groups(tokens, self.pass_cost)
            parts = [self._encode_group([texts[i] for i in group]) for group in groups]
        self.stats.encoder_seconds += time.perf_counter() - started
        self.stats.encoder_cpu_seconds += time.thread_time() - cpu_started
        self.stats.passes += len(groups)
        if len(groups) == 1 and groups[0] == list(range(len(texts))):
            return parts[0]
        vectors = np.empty((len(texts), parts[0].shape[1]), dtype=parts[0].dtype)
        for group, part in zip(groups, parts, strict=True):
            vectors[group] = part
        return vectors


def check_encoding(model: CompressedModel, dim: int | None, precision: str) -> None:
    """A one-line error for a width or an encoding the model cannot give: ``rescore`` needs a
    model that rescores (and keeps the encoder's full width), any other a precision it offers."""
    if precision != RESCORE_ENCODING:
        model.bytes_per_vector(dim, precision)
    elif model.stages().rescore_store is None:
        raise DemitasseError("encoding_format 'rescore': this model does not rescore")
    elif dim is not None:
        raise DemitasseError("'dimensions' does not apply to 'rescore': it keeps the full output")


def encoded_as(model: CompressedModel, vectors: np.ndarray, dim: int | None, precision: str) -> Any:
    """The encoder's ``vectors`` as a request asked: the model's codes or normalised floats at
    ``dim``, or (``rescore``) what a document keeps for the model's rescoring."""
    if precision == RESCORE_ENCODING:
        store = model.stages().rescore_store
        assert store is not None  # checked before the request was queued
        return store.keep(vectors)
    return model.transform(vectors, dim=dim, precision=precision, normalize=True)


def length_groups(tokens: Sequence[int], pass_cost: float) -> list[list[int]]:
    """Split texts of ``tokens`` tokens into forward passes, as lists of their indices, at the
    least cost in padded tokens plus ``pass_cost`` per pass: texts sorted by length, the best
    contiguous split by dynamic programming (a pass costs its size times its longest text)."""
    if np.isinf(pass_cost) or len(tokens) <= 1:  # one pass: texts in their own order
        return [list(range(len(tokens)))] if len(tokens) else []
    order = np.argsort(np.asarray(tokens), kind="stable")
    lengths = np.asarray(tokens, dtype=np.float64)[order]
    best = np.zeros(len(order) + 1)
    cut = np.zeros(len(order) + 1, dtype=np.int64)
    for end in range(1, len(order) + 1):
        starts = np.arange(end)
        costs = best[:end] + pass_cost + (end - starts) * lengths[end - 1]
        cut[end] = int(np.argmin(costs))
        best[end] = costs[cut[end]]
    groups, end = [], len(order)
    while end > 0:
        groups.append(order[cut[end] : end].tolist())
        end = int(cut[end])
    return groups[::-1]


def token_counter(model: CompressedModel) -> Callable[[Sequence[str]], list[int]]:
    """The tokens of each text as the model's encoder sees them (truncated as it truncates),
    for the response's ``usage`` and the length groups; whitespace-separated words for an
    encoder without a tokenizer."""
    encoder = model.load_encoder()
    tokenizer: Any = getattr(encoder, "tokenizer", None)
    if hasattr(tokenizer, "encode_batch_fast"):  # a static model's Rust tokenizer

        def count_static(texts: Sequence[str]) -> list[int]:
            encodings = tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
            return [len(encoding.ids) for encoding in encodings]

        return count_static
    max_length = getattr(encoder, "max_seq_length", None)
    if callable(tokenizer) and max_length is not None:

        def count_transformer(texts: Sequence[str]) -> list[int]:
            ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
            return [len(row) for row in ids]

        return count_transformer
    return lambda texts: [len(text.split()) for text in texts]
