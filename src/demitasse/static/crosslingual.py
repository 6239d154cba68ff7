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

import math
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (torch convention)
from tqdm.auto import tqdm

from demitasse.compress.similarity_losses import cosine_matrix
from demitasse.data.parallel import ParallelTexts
from demitasse.errors import DataError, DemitasseError
from demitasse.static.distill import TokenBatches
from demitasse.static.model import StaticModel, mean_vectors
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


class TranslationAligner:
    """Train a foreign :class:`StaticModel` against a fixed English one on parallel text."""

    def __init__(
        self,
        temperature: float = 0.05,
        learning_rate: float = 3e-3,
        batch_size: int = 128,
        max_steps: int = 3000,
        eval_every: int = 250,
        patience: int = 4,
        seed: int = 0,
        show_progress: bool = False,
    ) -> None:
        self.temperature = temperature
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.patience = patience
        self.seed = seed
        self.show_progress = show_progress

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
        rng = np.random.default_rng(self.seed)
        torch.manual_seed(self.seed)
        sides = {}
        for name, pairs in (("train", train), ("validation", validation)):
            anchors = torch.as_tensor(english.encode(pairs.source))
            sides[name] = (TokenBatches(foreign.token_ids(pairs.target)), anchors)
        bag = torch.nn.EmbeddingBag.from_pretrained(
            torch.from_numpy(foreign.vectors.copy()), freeze=False, mode="mean", sparse=True
        )
        optimiser = torch.optim.SparseAdam(bag.parameters(), lr=self.learning_rate)

        def loss_of(name: str, rows: np.ndarray) -> torch.Tensor:
            batches, anchors = sides[name]
            flat, offsets = batches.batch(rows)
            return contrastive_translation_loss(
                bag(flat, offsets), anchors[torch.as_tensor(rows)], self.temperature
            )

        def validation_loss() -> float:
            rows = np.arange(len(validation))
            with torch.no_grad():
                return float(
                    np.mean(
                        [
                            loss_of("validation", rows[s : s + self.batch_size]).item()
                            for s in range(0, len(rows) - self.batch_size + 1, self.batch_size)
                        ]
                    )
                )

        best_loss, best_step, waited = validation_loss(), 0, 0
        best = bag.weight.detach().clone()
        self.history_ = [{"step": 0, "validation_loss": best_loss}]
        order, cursor = rng.permutation(len(train)), 0
        for step in tqdm(range(1, self.max_steps + 1), disable=not self.show_progress):
            if cursor + self.batch_size > len(order):
                order, cursor = rng.permutation(len(train)), 0
            optimiser.zero_grad()
            loss_of("train", order[cursor : cursor + self.batch_size]).backward()
            cursor += self.batch_size
            optimiser.step()
            if step % self.eval_every and step != self.max_steps:
                continue
            current = validation_loss()
            self.history_.append({"step": step, "validation_loss": current})
            if current < best_loss - 1e-4:
                best_loss, best_step, waited = current, step, 0
                best = bag.weight.detach().clone()
            else:
                waited += 1
                if waited >= self.patience:
                    break
        self.best_step_ = best_step
        self.best_validation_loss_ = best_loss if math.isfinite(best_loss) else math.nan
        self.model_ = StaticModel(
            best.numpy(),
            foreign.tokenizer,
            name=foreign.name,
            normalize=foreign.normalize,
            metadata={**foreign.metadata, "aligned_steps": best_step},
        )
        self.seconds_ = time.perf_counter() - started
        return self
