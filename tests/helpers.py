"""Builders shared by tests: a tiny random sentence-transformers model, fake encoders,
synthetic embeddings."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from demitasse.data.beir import BeirDataset

WORDS = (
    "a the man woman dog cat is are playing guitar piano running eating food plays sits on mat"
    " . , and in park child girl boy car red blue"
).split()


SENTENCES = [
    "a man is playing guitar",
    "a woman is playing piano",
    "the dog is running in park",
    "a cat sits on mat",
    "a child is eating food",
    "the girl plays guitar",
    "a boy is running",
    "a red car in park",
]


def build_tiny_model(
    directory: Path,
    layers: int = 3,
    hidden: int = 32,
    pooling: str = "mean",
    words: Sequence[str] = WORDS,
    architecture: str = "bert",
) -> Path:
    """Save a randomly initialised ``bert`` or ``mpnet`` (built from a config, no download) as
    a sentence-transformers model; MPNet is the architecture of all-mpnet-base-v2."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6 moved the module classes
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models
    from transformers import (
        BertConfig,
        BertModel,
        BertTokenizerFast,
        MPNetConfig,
        MPNetModel,
        MPNetTokenizerFast,
    )

    specials, tokenizer_class, config_class, model_class = {
        "bert": (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], BertTokenizerFast, BertConfig,
                 BertModel),
        "mpnet": (["<s>", "<pad>", "</s>", "[UNK]", "<mask>"], MPNetTokenizerFast, MPNetConfig,
                  MPNetModel),
    }[architecture]  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join([*specials, *words]) + "\n")
    # Positional: transformers 4 calls it vocab_file, 5 calls it vocab (and ignores vocab_file).
    tokenizer = tokenizer_class(str(vocab))
    torch.manual_seed(0)
    config = config_class(
        vocab_size=len(words) + len(specials),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    raw = directory / "raw"
    model_class(config).save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    transformer = models.Transformer(str(raw), max_seq_length=32)
    pool = models.Pooling(hidden, pooling_mode=pooling)
    target = directory / "model"
    SentenceTransformer(modules=[transformer, pool, models.Normalize()], device="cpu").save(
        str(target)
    )
    return target


class FakeEncoder:
    """Deterministic vectors per text: a hidden 'meaning' plus noise, for harness tests."""

    name = "fake"
    num_layers = 2

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim
        self.calls: list[int] = []

    def _vector(self, text: str, layer: int) -> np.ndarray:
        seed = int.from_bytes(
            hashlib.blake2b(f"{layer}:{text}".encode(), digest_size=4).digest(), "little"
        )
        return np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)

    def encode(self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32):
        return self.encode_layers(texts, [layer or self.num_layers])[layer or self.num_layers]

    def encode_layers(self, texts: Sequence[str], layers=None, batch_size: int = 32):
        self.calls.append(len(texts))
        layers = layers or range(1, self.num_layers + 1)
        return {layer: np.stack([self._vector(t, layer) for t in texts]) for layer in layers}


def correlated(n: int = 400, d: int = 24, seed: int = 0) -> np.ndarray:
    """Correlated data with a distinct spectrum and a large common offset, like embeddings."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(3.0, 0.2, d)
    mixing = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return (rng.standard_normal((n, d)) * scales @ mixing + 5.0).astype(np.float32)


def assert_close32(actual: np.ndarray, desired: np.ndarray) -> None:
    """Equal up to float32 rounding (BLAS may block a sliced or chunked product differently)."""
    np.testing.assert_allclose(actual, desired, rtol=1e-5, atol=1e-5 * np.abs(desired).max())


def synthetic_beir(qrels: dict[str, dict[str, int]], n_docs: int, n_queries: int) -> BeirDataset:
    """A BEIR set over documents ``d0…`` named ``doc j`` and queries ``q0…`` named ``query i``
    (vectors of those texts come from the test's own lookup)."""
    return BeirDataset(
        name="Synthetic",
        corpus_ids=[f"d{j}" for j in range(n_docs)],
        corpus_texts=[f"doc {j}" for j in range(n_docs)],
        query_ids=list(qrels),
        query_texts=[f"query {i}" for i in range(n_queries)],
        qrels=qrels,
    )


def random_documents(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(n)]


def write_beir(folder: Path, n_docs: int = 48, n_queries: int = 16, seed: int = 0) -> Path:
    """A BEIR folder whose query i is the first words of document i, judged relevant to it."""
    docs = random_documents(n_docs, seed)
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w") as f:
        for i in range(n_queries):
            f.write(json.dumps({"_id": f"q{i}", "text": " ".join(docs[i].split()[:4])}) + "\n")
    lines = ["query-id\tcorpus-id\tscore", *(f"q{i}\td{i}\t1" for i in range(n_queries))]
    for split in ("train", "test"):  # the same judgements: tune decides on train's
        (folder / "qrels" / f"{split}.tsv").write_text("\r\n".join(lines) + "\r\n")
    return folder


#: Six scored sentence pairs: the small inputs of command-line tests (:func:`write_cli_inputs`).
SCORED_PAIRS = [
    ("a man plays the guitar", "a man plays the piano", 3.5),
    ("a dog is running in the park", "a cat sits on the mat", 0.5),
    ("the girl is eating food", "a girl is eating", 4.0),
    ("a red car", "a blue car", 2.0),
    ("the boy plays piano", "a child plays the piano", 4.5),
    ("a woman is running", "the man sits in the car", 0.0),
]


def write_cli_inputs(root: Path) -> dict[str, Path]:
    """Inputs of command-line tests in ``root``: a tiny model, :data:`SCORED_PAIRS` as CSV,
    their sentences as text, 60 random 8-d vectors and a PCA-6 model fitted on them by
    ``demitasse fit`` (its cache inside ``root``)."""
    import pytest

    from demitasse.cli import main

    tiny = build_tiny_model(root / "tiny")
    pairs = root / "pairs.csv"
    rows = "".join(f"{a},{b},{s}\n" for a, b, s in SCORED_PAIRS)
    pairs.write_text("sentence1,sentence2,score\n" + rows)
    texts = root / "texts.txt"
    texts.write_text("".join(f"{a}\n{b}\n" for a, b, _ in SCORED_PAIRS))
    np.save(root / "v.npy", np.random.default_rng(0).standard_normal((60, 8)).astype(np.float32))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMITASSE_CACHE", str(root / "cache"))
        fit = ["fit", "--vectors", str(root / "v.npy"), "--compressor", "pca", "--dim", "6"]
        assert main([*fit, "--out", str(root / "pca")]) == 0
    return {"root": root, "tiny": tiny, "pairs": pairs, "texts": texts,
            "vectors": root / "v.npy", "pca": root / "pca"}  # fmt: skip
