"""Words as the teacher's WordPiece tokenizer sees them, and the static model's vocabulary.

A word is one pre-tokenised piece of text (the tokenizer's normaliser and pre-tokeniser decide:
lower-casing, accent stripping, punctuation split off), spelled by joining its subword tokens.
Using the tokenizer's own words keeps extraction and inference consistent: the static model's
tokenizer is the teacher's WordPiece with the corpus words added to its vocabulary, so a known
word is one token and an unknown word is split greedily into its longest known prefix and then
subwords (Wada et al.'s fallback).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from tokenizers import Encoding, Tokenizer

from demitasse.errors import DemitasseError
from demitasse.progress import tracked

COUNT_BATCH = 4096


def wordpiece_prefix(tokenizer: Tokenizer) -> str:
    """The continuation prefix (``##``) of a WordPiece tokenizer; other models are refused."""
    model = json.loads(tokenizer.to_str())["model"]
    if model.get("type") != "WordPiece":
        raise DemitasseError(
            f"static extraction needs a WordPiece teacher tokenizer, got {model.get('type')!r}"
        )
    return str(model.get("continuing_subword_prefix") or "##")


def word_spans(encoding: Encoding, prefix: str, unk_id: int) -> Iterator[tuple[str, list[int]]]:
    """``(word, token positions)`` for each whole word of ``encoding``, in order.

    Special tokens (no word id) are skipped, and so are words containing the unknown token,
    whose spelling the tokens no longer tell.
    """
    current: int | None = None
    pieces: list[str] = []
    positions: list[int] = []
    unknown = False
    for position, (word_id, token, token_id) in enumerate(
        zip(encoding.word_ids, encoding.tokens, encoding.ids, strict=True)
    ):
        if word_id != current and positions:
            if not unknown:
                yield "".join(pieces), positions
            pieces, positions, unknown = [], [], False
        current = word_id
        if word_id is None:
            continue
        pieces.append(token.removeprefix(prefix) if positions else token)
        positions.append(position)
        unknown |= token_id == unk_id
    if positions and not unknown:
        yield "".join(pieces), positions


def count_words(
    tokenizer: Tokenizer, texts: Sequence[str], *, progress: bool = False
) -> Counter[str]:
    """How often each word occurs in ``texts``."""
    prefix = wordpiece_prefix(tokenizer)
    unk_id = unknown_id(tokenizer)
    counts: Counter[str] = Counter()
    starts = range(0, len(texts), COUNT_BATCH)
    for start in tracked(starts, "counting words", unit="batches", enabled=progress):
        batch = list(texts[start : start + COUNT_BATCH])
        for encoding in tokenizer.encode_batch(batch, add_special_tokens=False):
            counts.update(word for word, _ in word_spans(encoding, prefix, unk_id))
    return counts


def unknown_id(tokenizer: Tokenizer) -> int:
    model = json.loads(tokenizer.to_str())["model"]
    token = model.get("unk_token", "[UNK]")
    found = tokenizer.token_to_id(token)
    return -1 if found is None else int(found)


def build_vocabulary(
    base_tokens: Sequence[str], counts: Counter[str], min_count: int, max_words: int | None
) -> list[str]:
    """The teacher's tokens (ids kept) followed by the frequent corpus words it lacks.

    Keeping every teacher token means any text can be tokenised without unknown pieces.
    """
    known = set(base_tokens)
    frequent = [
        word
        for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        if count >= min_count and word not in known
    ]
    if max_words is not None:
        frequent = frequent[: max(0, max_words - len(base_tokens))]
    return [*base_tokens, *frequent]


def teacher_tokens(tokenizer: Tokenizer) -> list[str]:
    """The tokenizer's vocabulary ordered by id (ids must be 0 … n−1)."""
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    ordered = sorted(vocab, key=vocab.__getitem__)
    if [vocab[t] for t in ordered] != list(range(len(ordered))):
        raise DemitasseError("the teacher tokenizer's vocabulary ids are not contiguous")
    return ordered


def static_tokenizer(base: Tokenizer, vocabulary: Sequence[str]) -> Tokenizer:
    """The teacher's WordPiece tokenizer with ``vocabulary`` as its vocabulary.

    No special tokens are added around texts, and no truncation or padding: a static model
    averages every token of the text.
    """
    spec: dict[str, Any] = json.loads(base.to_str())
    spec["model"]["vocab"] = {token: i for i, token in enumerate(vocabulary)}
    spec["post_processor"] = None
    spec["truncation"] = None
    spec["padding"] = None
    # Added tokens keep their ids only if they are in the vocabulary with the same id.
    spec["added_tokens"] = [
        token
        for token in spec.get("added_tokens") or []
        if token["id"] < len(vocabulary) and vocabulary[token["id"]] == token["content"]
    ]
    return Tokenizer.from_str(json.dumps(spec))
