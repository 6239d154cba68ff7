"""Align a second language's static word vectors to an English static model (Wada et al., Eq. 4).

No multilingual teacher can be loaded offline, so the English static model itself is the
anchor: its vectors stay fixed, and the foreign words' vectors learn, on a parallel corpus,
to put each sentence next to its translation and away from the other sentences of the batch
(InfoNCE in both directions, temperature 0.05).

Initialisation: each foreign word starts as the mean of the English model's vectors of its
WordPiece subwords, i.e. exactly what the English model would give the unknown word. German
and English share an alphabet, cognates and subwords (``haus``/``house``, ``musik``/``music``),
so this start is already weakly aligned, and training only has to improve on it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)

from demitasse.data.parallel import ParallelTexts
from demitasse.errors import DataError, DemitasseError
from demitasse.losses import cosine_matrix
from demitasse.static.model import StaticModel, mean_vectors
from demitasse.static.training import TokenBatches, WordVectorTrainer, train_word_vectors
from demitasse.static.vocabulary import build_vocabulary, count_words, static_tokenizer


def contrastive_translation_loss(
    foreign: torch.Tensor, english: torch.Tensor, temperature: float = 0.05
) -> torch.Tensor:
    """InfoNCE over the batch: row i of each side should pick row i of the other."""
    logits = cosine_matrix(foreign, english) / temperature
    labels = torch.arange(len(foreign), device=foreign.device)
    return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))


def foreign_model(english: StaticModel, texts: Sequence[str], min_count: int = 2) -> StaticModel:
    """A static model for another language: the teacher's tokens, with the English model's
    vectors, plus the words of ``texts`` seen ``min_count`` times, initialised from their
    subwords."""
    n_base = english.metadata.get("base_tokens")
    if not isinstance(n_base, int) or not 0 < n_base <= len(english.vectors):
        raise DemitasseError("the English static model does not record its teacher tokens")
    vocab = english.tokenizer.get_vocab(with_added_tokens=False)
    base_tokens = sorted((t for t, i in vocab.items() if i < n_base), key=vocab.__getitem__)
    subwords = static_tokenizer(english.tokenizer, base_tokens)
    vocabulary = build_vocabulary(base_tokens, count_words(subwords, texts), min_count, None)
    pieces = subwords.encode_batch(vocabulary[n_base:], add_special_tokens=False)
    vectors = np.concatenate(
        [english.vectors[:n_base], mean_vectors(english.vectors, [p.ids for p in pieces])]
    )
    return StaticModel(
        vectors,
        static_tokenizer(english.tokenizer, vocabulary),
        name=f"{english.name}-foreign",
        normalize=english.normalize,
        metadata={"base_tokens": n_base, "anchor": english.name},
    )


class TranslationAligner(WordVectorTrainer):
    """Train a foreign :class:`StaticModel` against a fixed English one on parallel text
    (hyperparameters: :class:`~demitasse.static.training.WordVectorTrainer`)."""

    def fit(
        self,
        foreign: StaticModel,
        english: StaticModel,
        train: ParallelTexts,
        validation: ParallelTexts,
    ) -> TranslationAligner:
        """``train`` / ``validation`` pair English sources with foreign targets; sets
        ``model_``, ``history_``, ``best_step_``, ``seconds_``."""
        started = time.perf_counter()
        if len(train) < 2 * self.batch_size or len(validation) < self.batch_size:
            raise DataError("too few parallel sentences for the batch size")
        sides = {}
        for name, pairs in (("train", train), ("validation", validation)):
            anchors = torch.as_tensor(english.encode(pairs.source))
            sides[name] = (TokenBatches(foreign.token_ids(pairs.target)), anchors)

        def batch_loss(bag: torch.nn.EmbeddingBag, side: str, rows: np.ndarray) -> torch.Tensor:
            batches, anchors = sides[side]
            flat, offsets = batches.batch(rows)
            return contrastive_translation_loss(
                bag(flat, offsets), anchors[torch.as_tensor(rows)], self.temperature
            )

        trained = train_word_vectors(
            foreign.vectors,
            batch_loss,
            np.arange(len(train)),
            np.arange(len(validation)),
            self,
            "aligning",
        )
        self._keep(trained, foreign, {"aligned_steps": trained.best_step})
        self.seconds_ = time.perf_counter() - started
        return self
