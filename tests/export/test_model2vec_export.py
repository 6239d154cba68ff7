"""A static model exports to model2vec with a bias-free linear compressor folded in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from demitasse.compress import make_compressor
from demitasse.errors import DemitasseError
from demitasse.export import export_model2vec
from demitasse.static import StaticModel
from tests.helpers import WORDS, build_tiny_model


@pytest.mark.parametrize("normalize", [True, False])
def test_truncation_and_random_projection_fold_into_the_static_vectors(
    normalize: bool, tmp_path: Path
) -> None:
    from model2vec import StaticModel as Model2VecModel

    tokenizer = Tokenizer.from_file(str(build_tiny_model(tmp_path / "tiny") / "tokenizer.json"))
    rng = np.random.default_rng(0)
    vocabulary = tokenizer.get_vocab_size(with_added_tokens=True)
    model = StaticModel(rng.standard_normal((vocabulary, 32)), tokenizer, normalize=normalize)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(2, 9))) for _ in range(50)]
    vectors = model.encode(texts)
    for name in ("truncate", "random"):
        compressor = make_compressor(name, dim=16).fit(vectors)
        out = export_model2vec(model, tmp_path / name, compressor=compressor, dim=12)
        theirs = Model2VecModel.from_pretrained(out).encode(texts)
        ours = compressor.transform(vectors, dim=12)
        if normalize:  # model2vec normalises the compressed mean: same direction
            ours /= np.linalg.norm(ours, axis=1, keepdims=True)
        np.testing.assert_allclose(theirs, ours, atol=1e-5)
    pca = make_compressor("pca", dim=8).fit(vectors)
    with pytest.raises(DemitasseError, match="bias-free"):
        export_model2vec(model, tmp_path / "pca", compressor=pca)
    assert not (tmp_path / "pca").exists()
