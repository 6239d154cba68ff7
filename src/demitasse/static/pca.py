"""Reduce static word vectors with PCA fitted on sentence vectors (Wada et al., step 2).

A static sentence vector is the mean of its word vectors, and centring and projecting commute
with averaging, so fitting the PCA on *sentence* vectors and applying it to every word vector
reduces the model exactly as it is used. Dropping the top ``abtt`` components (All-But-The-Top)
removes directions shared by all sentences. Word-level PCA (fitted on the vocabulary's vectors)
is kept for the ablation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from demitasse.compress.pca import PCA
from demitasse.errors import DemitasseError
from demitasse.static.model import StaticModel, mean_vectors

FitOn = Literal["sentences", "words"]


class StaticPCA:
    """Project a :class:`StaticModel`'s vectors on PCA components ``r+1 … r+dim``.

    ``abtt=None`` drops ``⌊d/100⌋`` components (d = input dimension); ``fit_on`` chooses
    sentence-level (the paper's) or word-level PCA.
    """

    def __init__(
        self, dim: int = 256, abtt: int | None = None, fit_on: FitOn = "sentences"
    ) -> None:
        self.dim = dim
        self.abtt = abtt
        self.fit_on = fit_on

    def fit(self, model: StaticModel, sentences: Sequence[str] = ()) -> StaticPCA:
        """Fit on ``model``'s vectors of ``sentences`` (or of its vocabulary for word level)."""
        if self.fit_on not in ("sentences", "words"):
            raise DemitasseError(f"fit_on must be 'sentences' or 'words', got {self.fit_on!r}")
        removed = model.dim // 100 if self.abtt is None else self.abtt
        if self.fit_on == "sentences":
            if len(sentences) < 2:
                raise DemitasseError("sentence-level PCA needs at least 2 sample sentences")
            rows = sentence_vectors(model, sentences)
        else:
            # Rows that are all zeros are special tokens; they would only pull the mean.
            rows = model.vectors[np.any(model.vectors != 0, axis=1)]
        self.abtt_ = removed
        self.pca_ = PCA(dim=self.dim, abtt=removed).fit(rows)
        return self

    def transform(self, model: StaticModel) -> StaticModel:
        """A new model whose word vectors are centred and projected (zero rows stay zero)."""
        vectors = self.pca_.transform(model.vectors)
        vectors[~np.any(model.vectors != 0, axis=1)] = 0.0
        metadata = {
            **model.metadata,
            "pca": {"dim": self.dim, "abtt": self.abtt_, "fit_on": self.fit_on},
        }
        return StaticModel(
            vectors,
            model.tokenizer,
            name=model.name,
            normalize=model.normalize,
            metadata=metadata,
        )

    def project_embeddings(self, embeddings: np.ndarray) -> np.ndarray:
        """Sentence embeddings of the teacher in the reduced model's coordinates: centred at
        their own mean (the teacher's are normalised, the word-vector means are not, so the two
        means differ) and projected on the kept components."""
        embeddings = np.asarray(embeddings, dtype=np.float64)
        if embeddings.ndim != 2 or embeddings.shape[1] != self.pca_.components_.shape[1]:
            raise DemitasseError(
                f"embeddings must have {self.pca_.components_.shape[1]} columns (the extracted "
                f"vectors' dim), got shape {embeddings.shape}"
            )
        centred = embeddings - embeddings.mean(axis=0)
        return (centred @ self.pca_.components_.T).astype(np.float32)


def sentence_vectors(model: StaticModel, sentences: Sequence[str]) -> np.ndarray:
    """Unnormalised mean word vectors of ``sentences`` (what the PCA is fitted on)."""
    return mean_vectors(model.vectors, model.token_ids(sentences))
