"""Extract static word vectors from a sentence transformer (Wada et al., step 1).

Each corpus sentence is encoded once; every word in it receives the mean of its subword states
at the teacher's last layer, and a word's vector is the average over up to
``max_occurrences`` sentences. The same forward passes give the teacher's sentence embeddings,
which are stored in the encoder's embedding cache for distillation.

The run is resumable: after every chunk of sentences the partial sums are checkpointed
atomically (safetensors + JSON), and a rerun with the same settings continues from there.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from demitasse.encoders.transformer import TransformerEncoder, pool
from demitasse.errors import DataError, DemitasseError
from demitasse.io import atomic_path, atomic_write_json
from demitasse.progress import progress as show_progress
from demitasse.static.model import StaticModel
from demitasse.static.vocabulary import (
    build_vocabulary,
    count_words,
    static_tokenizer,
    teacher_tokens,
    unknown_id,
    word_spans,
    wordpiece_prefix,
)

PROGRESS_FILE = "progress.json"
COUNTS_FILE = "word_counts.json"


class WordVectorExtractor:
    """Average contextual word vectors of a teacher over a corpus.

    Hyperparameters: ``max_occurrences`` sentences per word (N), ``min_count`` occurrences for
    a corpus word to enter the vocabulary, ``max_words`` vocabulary size in total (teacher
    tokens included; ``None`` = no limit), ``batch_size`` sentences per forward pass,
    ``chunk_size`` sentences between checkpoints, ``harvest_limit`` texts to harvest (whole
    chunks; the vocabulary is still counted on every text, so a time-limited run can finish
    from its last checkpoint), ``checkpoint_dir`` (``None`` = no
    checkpoints).
    """

    def __init__(
        self,
        max_occurrences: int = 100,
        min_count: int = 5,
        max_words: int | None = None,
        batch_size: int = 64,
        chunk_size: int = 20_000,
        harvest_limit: int | None = None,
        checkpoint_dir: str | Path | None = None,
        progress: bool = False,
    ) -> None:
        self.max_occurrences = max_occurrences
        self.min_count = min_count
        self.max_words = max_words
        self.batch_size = batch_size
        self.chunk_size = chunk_size
        self.harvest_limit = harvest_limit
        self.checkpoint_dir = checkpoint_dir
        self.progress = progress

    def fit(self, teacher: TransformerEncoder, texts: Sequence[str]) -> WordVectorExtractor:
        """Extract vectors for the vocabulary of ``texts``; sets ``vocabulary_``, ``vectors_``,
        ``occurrences_`` (sentences averaged per entry), ``encoded_`` (which texts went through
        the teacher; their embeddings are in its cache) and ``timings_``."""
        texts = [str(t) for t in texts]
        if not texts:
            raise DataError("no corpus sentences to extract word vectors from")
        for name in ("max_occurrences", "min_count", "batch_size", "chunk_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise DemitasseError(f"{name} must be a positive integer, got {value!r}")
        started = time.perf_counter()
        base = teacher.tokenizer.backend_tokenizer
        self.prefix_ = wordpiece_prefix(base)
        self._unk_id = unknown_id(base)
        self._special_ids = set(teacher.tokenizer.all_special_ids)
        self.base_tokens_ = teacher_tokens(base)
        checkpoints = Path(self.checkpoint_dir) if self.checkpoint_dir else None
        counts = self._count_corpus_words(base, texts, checkpoints)
        self.vocabulary_ = build_vocabulary(
            self.base_tokens_, counts, self.min_count, self.max_words
        )
        self._index = {word: i for i, word in enumerate(self.vocabulary_)}
        counted = time.perf_counter()
        self._harvest(teacher, texts, checkpoints)
        harvested = time.perf_counter()
        self.vectors_ = self._finish(teacher)
        self.tokenizer_ = static_tokenizer(base, self.vocabulary_)
        self.timings_ = {
            "count_s": counted - started,
            # Earlier, interrupted runs' harvesting counts too (kept in the checkpoint).
            "harvest_s": harvested - counted + self._earlier_seconds,
            "finish_s": time.perf_counter() - harvested,
        }
        return self

    def to_model(self, name: str) -> StaticModel:
        # The first base_tokens ids are the teacher's own tokens (the subword fallback).
        metadata = {"base_tokens": len(self.base_tokens_)}
        return StaticModel(self.vectors_, self.tokenizer_, name=name, metadata=metadata)

    # ---- counting ------------------------------------------------------------------------------

    def _count_corpus_words(
        self, base: Any, texts: list[str], checkpoints: Path | None
    ) -> Counter[str]:
        fingerprint = _corpus_fingerprint(texts)
        path = checkpoints / COUNTS_FILE if checkpoints else None
        if path is not None and path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            if saved.get("corpus") == fingerprint:
                return Counter(saved["counts"])
        counts = count_words(base, texts, progress=self.progress)
        if path is not None:
            atomic_write_json(path, {"corpus": fingerprint, "counts": dict(counts)})
        return counts

    # ---- harvesting ----------------------------------------------------------------------------

    def _settings(self, teacher: TransformerEncoder, texts: list[str]) -> dict[str, Any]:
        """What a checkpoint must match to be resumed."""
        return {
            "teacher": teacher.name,
            "corpus": _corpus_fingerprint(texts),
            "vocabulary": hashlib.sha256("\n".join(self.vocabulary_).encode()).hexdigest()[:16],
            "max_occurrences": self.max_occurrences,
            "chunk_size": self.chunk_size,
            "max_seq_length": teacher.max_seq_length,
        }

    def _harvest(
        self, teacher: TransformerEncoder, texts: list[str], checkpoints: Path | None
    ) -> None:
        n_words, n_tokens, dim = len(self.vocabulary_), len(self.base_tokens_), teacher.dim
        self._word_sums = np.zeros((n_words, dim), dtype=np.float32)
        self._word_counts = np.zeros(n_words, dtype=np.int64)
        self._token_sums = np.zeros((n_tokens, dim), dtype=np.float32)
        self._token_counts = np.zeros(n_tokens, dtype=np.int64)
        self._encoded = np.zeros(len(texts), dtype=bool)
        settings = self._settings(teacher, texts)
        self._earlier_seconds = 0.0
        self._started = time.perf_counter()
        harvested = self._resume(checkpoints, settings) if checkpoints else 0
        end = len(texts) if self.harvest_limit is None else min(len(texts), self.harvest_limit)
        bar = show_progress(
            f"extracting from {teacher.name}",
            total=end,
            unit="texts",
            initial=min(harvested, end),
            enabled=self.progress,
        )
        for start in range(harvested, end, self.chunk_size):
            chunk = texts[start : min(start + self.chunk_size, end)]
            rows, embeddings = self._harvest_chunk(teacher, chunk, bar)
            self._encoded[start + rows] = True
            teacher.cache_embeddings([chunk[i] for i in rows], embeddings)
            if checkpoints:
                self._checkpoint(checkpoints, settings, start + len(chunk))
        bar.close()
        self.encoded_ = self._encoded

    def _needed(self, teacher: TransformerEncoder, chunk: list[str]) -> np.ndarray:
        """Which sentences hold a word that still has fewer than ``max_occurrences`` vectors.

        The others would add nothing, and skipping them is what makes a large corpus
        affordable on a CPU: frequent words saturate early.
        """
        counts = self._word_counts
        needed = np.zeros(len(chunk), dtype=bool)
        encodings = teacher.tokenizer.backend_tokenizer.encode_batch(
            chunk, add_special_tokens=False
        )
        for row, encoding in enumerate(encodings):
            for word, _ in word_spans(encoding, self.prefix_, self._unk_id):
                vocab_id = self._index.get(word)
                if vocab_id is not None and counts[vocab_id] < self.max_occurrences:
                    needed[row] = True
                    break
        return needed

    def _harvest_chunk(
        self, teacher: TransformerEncoder, chunk: list[str], bar: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Harvest the needed sentences of ``chunk``; returns their rows and embeddings."""
        needed = np.flatnonzero(self._needed(teacher, chunk))
        bar.update(len(chunk) - len(needed))
        # Longest first, so batches pad little, as the encoder itself does.
        order = needed[np.argsort([-len(chunk[i]) for i in needed], kind="stable")]
        embeddings = np.empty((len(chunk), teacher.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                features = teacher.features([chunk[i] for i in rows])
                inputs = {k: v for k, v in features.items() if k != "offset_mapping"}
                hidden = teacher.model(**inputs).last_hidden_state
                sentence = pool(hidden, features["attention_mask"], teacher.pooling)
                if teacher.normalize:
                    sentence = torch.nn.functional.normalize(sentence, p=2, dim=1)
                embeddings[rows] = sentence.float().cpu().numpy()
                # The bookkeeping indexes with numpy: on a GPU teacher, copy the states back.
                self._add_batch(features.to("cpu"), hidden.float().cpu())
                bar.update(len(rows))
        return needed, embeddings[needed]

    def _add_batch(self, features: Any, hidden: torch.Tensor) -> None:
        """Add each word occurrence (mean of its token states) and each token state."""
        seq_len = hidden.shape[1]
        flat = hidden.reshape(-1, hidden.shape[-1])
        occurrence_of_token: list[int] = []
        token_rows: list[int] = []
        word_ids: list[int] = []
        for row, encoding in enumerate(features.encodings):
            for word, positions in word_spans(encoding, self.prefix_, self._unk_id):
                vocab_id = self._index.get(word)
                if vocab_id is None:
                    continue
                occurrence = len(word_ids)
                word_ids.append(vocab_id)
                occurrence_of_token.extend([occurrence] * len(positions))
                token_rows.extend(row * seq_len + p for p in positions)
        if word_ids:
            index = torch.as_tensor(occurrence_of_token)
            sums = torch.zeros(len(word_ids), flat.shape[1]).index_add_(
                0, index, flat[torch.as_tensor(token_rows)]
            )
            lengths = torch.bincount(index, minlength=len(word_ids)).unsqueeze(1)
            _add_capped(
                self._word_sums,
                self._word_counts,
                np.asarray(word_ids),
                (sums / lengths).numpy(),
                self.max_occurrences,
            )
        ids = features["input_ids"].reshape(-1).numpy()
        keep = features["attention_mask"].reshape(-1).numpy().astype(bool)
        keep &= ~np.isin(ids, list(self._special_ids))
        _add_capped(
            self._token_sums,
            self._token_counts,
            ids[keep],
            flat[torch.as_tensor(np.flatnonzero(keep))].numpy(),
            self.max_occurrences,
        )

    # ---- checkpoints ---------------------------------------------------------------------------

    def _resume(self, checkpoints: Path, settings: dict[str, Any]) -> int:
        progress_path = checkpoints / PROGRESS_FILE
        if not progress_path.is_file():
            return 0
        progress = json.loads(progress_path.read_text(encoding="utf-8"))
        if progress.get("settings") != settings:
            return 0  # a different corpus, teacher or vocabulary: start afresh
        state = load_file(str(checkpoints / progress["state"]))
        self._word_sums[:] = state["word_sums"]
        self._word_counts[:] = state["word_counts"]
        self._token_sums[:] = state["token_sums"]
        self._token_counts[:] = state["token_counts"]
        self._encoded[:] = state["encoded"].astype(bool)
        self._earlier_seconds = float(progress.get("harvest_seconds", 0.0))
        if "harvested" in progress:
            return int(progress["harvested"])
        return int(progress["chunks_done"]) * self.chunk_size  # the first checkpoint format

    def _checkpoint(self, checkpoints: Path, settings: dict[str, Any], harvested: int) -> None:
        # The state file is new each time and the JSON names it, so the pair is swapped
        # atomically: an interruption leaves the previous, complete checkpoint in force.
        state_name = f"state-{harvested:09d}.safetensors"
        with atomic_path(checkpoints / state_name) as tmp:
            save_file(
                {
                    "word_sums": self._word_sums,
                    "word_counts": self._word_counts,
                    "token_sums": self._token_sums,
                    "token_counts": self._token_counts,
                    "encoded": self._encoded.astype(np.uint8),
                },
                str(tmp),
            )
        progress = {
            "settings": settings,
            "harvested": harvested,
            "state": state_name,
            "harvest_seconds": self._earlier_seconds + time.perf_counter() - self._started,
        }
        atomic_write_json(checkpoints / PROGRESS_FILE, progress)
        for old in checkpoints.glob("state-*.safetensors"):
            if old.name != state_name:
                old.unlink(missing_ok=True)

    # ---- final vectors -------------------------------------------------------------------------

    def _finish(self, teacher: TransformerEncoder) -> np.ndarray:
        """Word averages; entries never seen as a whole word take their token-level average,
        and tokens never seen at all the teacher's state for the token on its own."""
        n_base = len(self.base_tokens_)
        vectors = np.zeros_like(self._word_sums)
        seen = self._word_counts > 0
        vectors[seen] = self._word_sums[seen] / self._word_counts[seen, None]
        occurrences = self._word_counts.copy()
        token_seen = np.zeros(len(self.vocabulary_), dtype=bool)
        token_seen[:n_base] = (self._token_counts > 0) & ~seen[:n_base]
        rows = np.flatnonzero(token_seen)
        vectors[rows] = self._token_sums[rows] / self._token_counts[rows, None]
        occurrences[rows] = self._token_counts[rows]
        special = np.zeros(len(self.vocabulary_), dtype=bool)
        special[list(self._special_ids)] = True
        unseen = np.flatnonzero(~seen & ~token_seen & ~special)
        if len(unseen):
            words = [self.vocabulary_[i].removeprefix(self.prefix_) for i in unseen]
            vectors[unseen] = self._isolated_states(teacher, words)
        self.occurrences_ = occurrences
        return vectors

    def _isolated_states(self, teacher: TransformerEncoder, words: list[str]) -> np.ndarray:
        """Mean token state of each word encoded alone (with the teacher's special tokens)."""
        out = np.empty((len(words), teacher.dim), dtype=np.float32)
        batch = max(self.batch_size, 256)
        with torch.inference_mode():
            for start in range(0, len(words), batch):
                features = teacher.features(words[start : start + batch])
                hidden = teacher.model(**dict(features)).last_hidden_state
                mask = features["attention_mask"].clone()
                ids = features["input_ids"]
                special = torch.isin(ids, torch.as_tensor(sorted(self._special_ids)).to(ids.device))
                mask[special] = 0
                out[start : start + len(ids)] = pool(hidden, mask, "mean").float().cpu().numpy()
        return out


def _add_capped(
    sums: np.ndarray, counts: np.ndarray, ids: np.ndarray, vectors: np.ndarray, cap: int
) -> None:
    """Add ``vectors[i]`` to ``sums[ids[i]]`` while that entry has fewer than ``cap``."""
    if len(ids) == 0:
        return
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    first = np.searchsorted(sorted_ids, sorted_ids, side="left")
    rank = np.empty(len(ids), dtype=np.int64)
    rank[order] = np.arange(len(ids)) - first
    accept = counts[ids] + rank < cap
    accepted = ids[accept]
    # torch's index_add_ on views of the numpy arrays: far faster than np.add.at.
    torch.from_numpy(sums).index_add_(
        0, torch.from_numpy(accepted), torch.from_numpy(np.ascontiguousarray(vectors[accept]))
    )
    counts += np.bincount(accepted, minlength=len(counts))


def _corpus_fingerprint(texts: list[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\n")
    return f"{len(texts)}-{digest.hexdigest()[:16]}"
