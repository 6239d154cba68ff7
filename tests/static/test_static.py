"""Static sentence encoder: extraction, PCA with ABTT, distillation, persistence, export, CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from demitasse.cli import main
from demitasse.encoders import TransformerEncoder
from demitasse.errors import DemitasseError
from demitasse.export import export_model2vec
from demitasse.loading import load_encoder
from demitasse.static import StaticModel
from demitasse.static.distill import SimilarityDistiller, similarity_distribution_loss
from demitasse.static.extract import WordVectorExtractor
from demitasse.static.pca import StaticPCA, sentence_vectors
from demitasse.static.pipeline import distill_static
from demitasse.static.training import (
    BatchLoss,
    TokenBatches,
    WordVectorTrainer,
    train_word_vectors,
)
from tests.helpers import WORDS, build_tiny_model

PIECES = ["sing", "##ing", "##er", "##s"]
CORPUS = [
    "the man is singing guitar",
    "a dog is singing in the park",
    "the cat sits on the mat",
    "a child plays piano",
    "the girl is singing piano in the park",
    "a boy and a dog are running",
]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> TransformerEncoder:
    directory = tmp_path_factory.mktemp("static-teacher")
    path = build_tiny_model(directory, layers=2, hidden=32, words=[*WORDS, *PIECES])
    encoder = load_encoder(path, cache=True, cache_dir=directory / "cache", device="cpu")
    assert isinstance(encoder, TransformerEncoder)
    return encoder


@pytest.fixture(scope="module")
def extractor(teacher: TransformerEncoder) -> WordVectorExtractor:
    # One sentence per chunk: sentences are harvested in corpus order, which the test follows.
    settings = {"max_occurrences": 2, "min_count": 2, "batch_size": 4, "chunk_size": 1}
    return WordVectorExtractor(**settings).fit(teacher, CORPUS)


def _token_states(teacher: TransformerEncoder, sentence: str) -> tuple[list[str], np.ndarray]:
    features = teacher.features([sentence])
    with torch.inference_mode():
        hidden = teacher.model(**dict(features)).last_hidden_state[0].numpy()
    return features.encodings[0].tokens, hidden


def test_extraction_averages_each_words_subword_states_over_its_first_sentences(
    teacher: TransformerEncoder, extractor: WordVectorExtractor
) -> None:
    # "singing" (sing ##ing) is a frequent corpus word, so it joins the vocabulary; with
    # max_occurrences=2 it averages the sentences it is first seen in (corpus order).
    assert "singing" in extractor.vocabulary_
    expected = []
    for sentence in [s for s in CORPUS if "singing" in s][:2]:
        tokens, hidden = _token_states(teacher, sentence)
        start = tokens.index("sing")
        assert tokens[start + 1] == "##ing"
        expected.append(hidden[start : start + 2].mean(axis=0))
    row = extractor.vocabulary_.index("singing")
    np.testing.assert_allclose(extractor.vectors_[row], np.mean(expected, axis=0), atol=1e-5)
    assert extractor.occurrences_[row] == 2

    tokens, hidden = _token_states(teacher, CORPUS[2])  # "mat" occurs once
    np.testing.assert_allclose(
        extractor.vectors_[extractor.vocabulary_.index("mat")],
        hidden[tokens.index("mat")],
        atol=1e-5,
    )


def test_extraction_stores_the_teacher_sentence_embeddings_in_its_cache(
    teacher: TransformerEncoder, extractor: WordVectorExtractor
) -> None:
    assert extractor.encoded_.all()
    last = teacher.num_layers
    assert teacher._cache is not None
    assert teacher._cache.fill(CORPUS, {last: np.empty((len(CORPUS), teacher.dim))}) == []
    cached = teacher.encode(CORPUS)
    teacher_uncached = load_encoder(teacher.path, cache=False, device="cpu")
    np.testing.assert_allclose(cached, teacher_uncached.encode(CORPUS), atol=1e-5)


def test_unknown_words_fall_back_to_the_longest_known_prefix_then_subwords(
    extractor: WordVectorExtractor,
) -> None:
    model = extractor.to_model("tiny")
    vocabulary = extractor.vocabulary_
    [singing], [singers] = model.token_ids(["singing"]), model.token_ids(["singers"])
    assert [vocabulary[i] for i in singing] == ["singing"]  # a known word is one vector
    assert [vocabulary[i] for i in singers] == ["sing", "##er", "##s"]
    mean = model.vectors[singers].mean(axis=0)
    np.testing.assert_allclose(model.encode(["singers"])[0], mean / np.linalg.norm(mean), rtol=1e-5)
    # Characters the teacher cannot spell are dropped, as model2vec drops its unknown token.
    np.testing.assert_allclose(model.encode(["dog ©"]), model.encode(["dog"]))
    assert not model.encode([""]).any()


def test_checkpointed_extraction_resumes_to_the_same_vectors(
    teacher: TransformerEncoder, extractor: WordVectorExtractor, tmp_path: Path
) -> None:
    settings = {"max_occurrences": 2, "min_count": 2, "batch_size": 4, "chunk_size": 1}
    partial = WordVectorExtractor(**settings, harvest_limit=2, checkpoint_dir=tmp_path)
    partial.fit(teacher, CORPUS)
    assert partial.encoded_.tolist() == [True, True] + [False] * 4
    resumed = WordVectorExtractor(**settings, checkpoint_dir=tmp_path).fit(teacher, CORPUS)
    np.testing.assert_allclose(resumed.vectors_, extractor.vectors_, atol=1e-5)
    assert not list(tmp_path.glob("*.pkl"))


def test_sentence_level_pca_with_abtt_projects_sentence_vectors_exactly(
    extractor: WordVectorExtractor,
) -> None:
    model = extractor.to_model("tiny")
    pca = StaticPCA(dim=8, abtt=1).fit(model, CORPUS)
    reduced = pca.transform(model)
    assert reduced.dim == 8 and pca.abtt_ == 1
    # Averaging commutes with centring + projection: reducing the words reduces the sentences.
    expected = pca.pca_.transform(sentence_vectors(model, CORPUS))
    np.testing.assert_allclose(sentence_vectors(reduced, CORPUS), expected, atol=1e-5)
    # ABTT keeps components 2..9 of the sentence vectors' PCA.
    full = StaticPCA(dim=9, abtt=0).fit(model, CORPUS).pca_
    np.testing.assert_allclose(
        np.abs(pca.pca_.components_), np.abs(full.components_[1:]), atol=1e-6
    )
    assert StaticPCA(dim=4).fit(model, CORPUS).abtt_ == 0  # ⌊32 / 100⌋
    words = StaticPCA(dim=8, abtt=1, fit_on="words").fit(model)
    assert words.pca_.n_fit_samples_ == int(np.any(model.vectors != 0, axis=1).sum())
    with pytest.raises(DemitasseError, match="fit_on"):
        StaticPCA(fit_on="tokens").fit(model, CORPUS)


def test_teacher_embeddings_projected_like_the_sentence_vectors_the_pca_was_fitted_on(
    extractor: WordVectorExtractor,
) -> None:
    model = extractor.to_model("tiny")
    pca = StaticPCA(dim=8, abtt=1).fit(model, CORPUS)
    # The fit sentences' own vectors, centred at their own mean, land where the reduced model
    # puts those sentences.
    projected = pca.project_embeddings(sentence_vectors(model, CORPUS))
    np.testing.assert_allclose(projected, sentence_vectors(pca.transform(model), CORPUS), atol=1e-5)
    # Centred at their own mean: a common offset changes nothing.
    np.testing.assert_allclose(
        pca.project_embeddings(sentence_vectors(model, CORPUS) + 5.0), projected, atol=1e-4
    )
    with pytest.raises(DemitasseError, match="32 columns"):
        pca.project_embeddings(np.ones((3, 8)))


def test_similarity_distribution_loss_is_zero_on_the_teacher_and_positive_elsewhere() -> None:
    generator = torch.Generator().manual_seed(0)
    teacher = torch.randn(16, 8, generator=generator)
    assert float(similarity_distribution_loss(teacher, teacher)) == pytest.approx(0.0, abs=1e-6)
    assert float(similarity_distribution_loss(torch.randn(16, 8, generator=generator), teacher)) > 0


def word_sum_teacher() -> tuple[list[str], np.ndarray]:
    """Texts of four words and a teacher whose sentence vector is a fixed random function of
    the words it contains."""
    rng = np.random.default_rng(0)
    words = ["man", "woman", "dog", "cat", "guitar", "piano", "park", "food", "car", "mat"]
    texts = [" ".join(rng.choice(words, size=4)) for _ in range(512)]
    word_targets = {w: rng.standard_normal(16) for w in words}
    targets = np.stack([sum(word_targets[w] for w in t.split()) for t in texts]).astype(np.float32)
    return texts, targets


def test_distillation_lowers_the_validation_loss(extractor: WordVectorExtractor) -> None:
    model = extractor.to_model("tiny")
    texts, targets = word_sum_teacher()
    distiller = SimilarityDistiller(
        batch_size=32, max_steps=200, eval_every=50, learning_rate=0.05, patience=10
    ).fit(model, texts, targets)
    losses = [entry["validation_loss"] for entry in distiller.history_]
    assert distiller.best_validation_loss_ < 0.5 * losses[0]
    assert distiller.model_.vectors.shape == model.vectors.shape
    assert not np.allclose(distiller.model_.vectors, model.vectors)


def test_an_anchor_keeps_distilled_vectors_nearer_their_start(
    extractor: WordVectorExtractor,
) -> None:
    model = extractor.to_model("tiny")
    texts, targets = word_sum_teacher()
    settings = {"batch_size": 32, "max_steps": 100, "eval_every": 50, "learning_rate": 0.05}
    moved = {}
    for weight in (0.0, 10.0):
        distiller = SimilarityDistiller(anchor_weight=weight, **settings).fit(model, texts, targets)
        moved[weight] = np.linalg.norm(distiller.model_.vectors - model.vectors)
        assert distiller.model_.metadata["distillation"]["anchor_weight"] == weight
    assert 0 < moved[10.0] < 0.5 * moved[0.0]
    with pytest.raises(DemitasseError, match="anchor_weight"):
        SimilarityDistiller(anchor_weight=-1.0, **settings).fit(model, texts, targets)


def test_a_regression_weight_pulls_sentence_vectors_toward_their_targets(
    extractor: WordVectorExtractor,
) -> None:
    model = extractor.to_model("tiny")
    texts, teacher = word_sum_teacher()
    # Targets a bag of words can reach: a sum of other random vectors of the words.
    rng = np.random.default_rng(1)
    word_pull = {word: rng.standard_normal(model.dim) for word in set(" ".join(texts).split())}
    pulls = np.stack([sum(word_pull[w] for w in t.split()) for t in texts]).astype(np.float32)
    settings = {"batch_size": 32, "max_steps": 100, "eval_every": 50, "learning_rate": 0.05}
    agreement = {}
    for weight in (0.0, 10.0):
        distiller = SimilarityDistiller(regression_weight=weight, **settings)
        distiller.fit(model, texts, teacher, pulls)
        vectors = distiller.model_.encode(texts)
        unit = pulls / np.linalg.norm(pulls, axis=1, keepdims=True)
        agreement[weight] = float(np.mean(np.sum(vectors * unit, axis=1)))
        assert distiller.model_.metadata["distillation"]["regression_weight"] == weight
    assert agreement[10.0] > 0.8 and agreement[10.0] > agreement[0.0] + 0.5
    with pytest.raises(DemitasseError, match="needs regression_targets"):
        SimilarityDistiller(regression_weight=1.0, **settings).fit(model, texts, teacher)
    with pytest.raises(DemitasseError, match=f"{len(texts)} × {model.dim}"):
        SimilarityDistiller(regression_weight=1.0, **settings).fit(
            model, texts, teacher, pulls[:, :3]
        )
    with pytest.raises(DemitasseError, match="regression_weight must be >= 0"):
        SimilarityDistiller(regression_weight=-1.0, **settings).fit(model, texts, teacher, pulls)


def test_the_whole_recipe_distils_with_the_pca_projected_teacher_as_regression_target(
    teacher: TransformerEncoder, tmp_path: Path
) -> None:
    from demitasse.static.pipeline import StaticRecipe

    rng = np.random.default_rng(3)
    words = [*WORDS, "singing", "singers"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "\n".join(" ".join(rng.choice(words, size=rng.integers(3, 8))) for _ in range(300)),
        encoding="utf-8",
    )
    recipe = StaticRecipe(
        dim=8, abtt=1, max_occurrences=3, min_count=2, pca_sentences=100, batch_size=16,
        max_steps=40, eval_every=20, regression_weight=0.3,
    )  # fmt: skip
    stages = distill_static(teacher, corpus, tmp_path / "work", recipe)
    summary = stages.distilled.metadata["distillation"]
    assert summary["regression_weight"] == 0.3 and stages.distilled.dim == 8
    assert not np.allclose(stages.distilled.vectors, stages.reduced.vectors)
    # What the PCA and the distillation read: the corpus sentences the teacher encoded.
    assert len(stages.encoded_texts) == int(stages.encoded.sum()) > 0
    assert set(stages.encoded_texts) <= set(stages.corpus)


def toy_word_vector_problem(
    untrained_is_best: bool = False,
) -> tuple[np.ndarray, BatchLoss, np.ndarray, np.ndarray]:
    """Bags of word ids regressed onto fixed random targets. With ``untrained_is_best`` the
    validation targets are the untrained vectors' own outputs, which training must move from."""
    rng = np.random.default_rng(4)
    ids = [list(rng.integers(0, 40, size=rng.integers(1, 6))) for _ in range(300)]
    vectors = rng.normal(size=(40, 8)).astype(np.float32)
    batches = TokenBatches(ids)
    targets = {"train": torch.as_tensor(rng.normal(size=(300, 8)).astype(np.float32))}
    if untrained_is_best:
        flat, offsets = batches.batch(np.arange(300))
        untrained = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(vectors), mode="mean")
        targets["validation"] = untrained(flat, offsets).detach()
    else:
        targets["validation"] = targets["train"]

    def batch_loss(bag: torch.nn.EmbeddingBag, split: str, rows: np.ndarray) -> torch.Tensor:
        flat, offsets = batches.batch(rows)
        return ((bag(flat, offsets) - targets[split][torch.as_tensor(rows)]) ** 2).mean()

    return vectors, batch_loss, np.arange(60, 300), np.arange(60)


def test_word_vectors_are_validated_first_then_every_eval_every_steps_and_at_the_end() -> None:
    vectors, batch_loss, train_rows, valid_rows = toy_word_vector_problem()
    settings = WordVectorTrainer(
        batch_size=16, max_steps=50, eval_every=20, patience=5, learning_rate=0.05, progress=False
    )
    trained = train_word_vectors(vectors, batch_loss, train_rows, valid_rows, settings)
    assert [entry["step"] for entry in trained.history] == [0, 20, 40, 50]
    assert np.isnan(trained.history[0]["train_loss"])
    best = min(trained.history, key=lambda entry: entry["validation_loss"])
    assert (trained.best_step, trained.best_validation_loss) == (
        best["step"],
        best["validation_loss"],
    )
    assert trained.best_validation_loss < trained.history[0]["validation_loss"]


def test_word_vector_training_stops_on_patience_and_returns_the_untrained_vectors() -> None:
    vectors, batch_loss, train_rows, valid_rows = toy_word_vector_problem(untrained_is_best=True)
    settings = WordVectorTrainer(
        batch_size=16, max_steps=1000, eval_every=20, patience=3, learning_rate=0.05
    )
    trained = train_word_vectors(vectors, batch_loss, train_rows, valid_rows, settings)
    assert [entry["step"] for entry in trained.history] == [0, 20, 40, 60]
    assert trained.best_step == 0 and trained.best_validation_loss == 0.0
    np.testing.assert_array_equal(trained.vectors, vectors)


def test_save_load_roundtrip_and_load_encoder(
    extractor: WordVectorExtractor, tmp_path: Path
) -> None:
    model = extractor.to_model("tiny")
    model.metadata["teacher"] = "tiny-bert"
    model.save(tmp_path / "static")
    loaded = load_encoder(tmp_path / "static")
    assert isinstance(loaded, StaticModel)
    assert (loaded.name, loaded.dim, loaded.num_layers) == ("tiny", 32, 1)
    np.testing.assert_array_equal(loaded.encode(CORPUS), model.encode(CORPUS))
    assert loaded.encode_layers(CORPUS[:2])[1].shape == (2, 32)
    assert loaded.metadata["teacher"] == "tiny-bert"
    with pytest.raises(DemitasseError, match="one layer"):
        loaded.encode(CORPUS, layer=2)


def test_a_static_model_is_refused_as_the_teacher_of_another(
    extractor: WordVectorExtractor, tmp_path: Path
) -> None:
    extractor.to_model("tiny").save(tmp_path / "static")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    with pytest.raises(DemitasseError, match="the teacher must be a transformer"):
        distill_static(tmp_path / "static", corpus, work_dir=tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_model2vec_and_sentence_transformers_load_the_export_with_equal_vectors(
    extractor: WordVectorExtractor, tmp_path: Path
) -> None:
    from model2vec import StaticModel as Model2VecModel
    from sentence_transformers import SentenceTransformer

    model = extractor.to_model("tiny")
    out = export_model2vec(model, tmp_path / "m2v")
    texts = [*CORPUS, "singers are unknown", "SINGING Guitar!"]
    ours = model.encode(texts)
    np.testing.assert_allclose(Model2VecModel.from_pretrained(out).encode(texts), ours, atol=1e-6)
    st = SentenceTransformer(str(out), device="cpu")
    np.testing.assert_allclose(st.encode(texts), ours, atol=1e-6)


def test_cli_distill_static_rejects_bad_input_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["distill-static", "--corpus", str(tmp_path / "missing.txt"), "--out", str(tmp_path)]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("demitasse: error:") and "\n" not in err
    assert main(["distill-static", "--corpus", str(tmp_path), "--out", "x", "--dim", "0"]) == 2
    assert (
        main(["distill-static", "--corpus", str(tmp_path), "--out", "x", "--min-count", "0"]) == 2
    )


def test_cross_lingual_alignment_finds_translations_it_could_not_before(
    extractor: WordVectorExtractor,
) -> None:
    from demitasse.data.parallel import ParallelTexts
    from demitasse.evaluation.translation import translation_accuracy
    from demitasse.static.crosslingual import TranslationAligner, foreign_model

    english = extractor.to_model("tiny")
    words = ["man", "woman", "dog", "cat", "guitar", "piano", "park", "food", "car", "mat", "boy"]
    # An invented language whose words look like the English word for something else.
    foreign_word = {w: words[(i + 1) % len(words)] + "s" for i, w in enumerate(words)}
    rng = np.random.default_rng(0)
    source = list(dict.fromkeys(" ".join(rng.choice(words, size=4)) for _ in range(700)))
    target = [" ".join(foreign_word[w] for w in s.split()) for s in source]
    train = ParallelTexts("train", source[:500], target[:500], "en", "xx")
    valid = ParallelTexts("valid", source[500:], target[500:], "en", "xx")
    foreign = foreign_model(english, train.target, min_count=2)
    [[own]], [pieces] = foreign.token_ids(["dogs"]), english.token_ids(["dogs"])
    assert len(pieces) == 2  # English knows "dogs" only as dog + ##s; the foreign model has it
    np.testing.assert_allclose(foreign.vectors[own], english.vectors[pieces].mean(axis=0))

    def accuracy(model: StaticModel) -> float:
        gold = np.arange(len(valid))
        return translation_accuracy(model.encode(valid.target), english.encode(valid.source), gold)

    before = accuracy(foreign)
    aligner = TranslationAligner(batch_size=32, max_steps=300, eval_every=100, learning_rate=0.05)
    after = accuracy(aligner.fit(foreign, english, train, valid).model_)
    assert after > max(50.0, before + 20.0)


def test_mean_vectors_skips_the_unknown_id_and_leaves_empty_rows_zero() -> None:
    from demitasse.static.model import mean_vectors

    vectors = np.arange(20, dtype=np.float32).reshape(5, 4)
    ids = [[1, 1, 3], [], [0], [2, 0, 4, 0], [0, 0]]
    got = mean_vectors(vectors, ids, skip=0)
    expected = [vectors[[i for i in row if i != 0]].mean(0) if set(row) - {0} else 0 * vectors[0]
                for row in ids]  # fmt: skip
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-6)
    np.testing.assert_allclose(mean_vectors(vectors, ids)[3], vectors[[2, 0, 4, 0]].mean(0))


def test_plain_ascii_path_tokenises_exactly_as_the_full_tokenizer(
    extractor: WordVectorExtractor,
) -> None:
    model = extractor.to_model("static")
    texts = [
        "The Man is SINGING guitar.",
        "A dog, singing: in the park!",
        "Ça coûte 5€ — naïve café",  # not ASCII: the full normaliser (accents stripped)
        "tab\tand\nnewline",  # not printable: the full normaliser
        "odd\x0bcontrol\x7fchars",  # removed by the normaliser, not split on
        "漢字 mixed with words",
        "",
        "   ",
    ]
    assert model._plain is not None
    full = model._block_ids_full(texts)
    assert model._block_ids(texts) == full
    printable = [t for t in texts if t.isascii() and t.isprintable()]
    assert model._block_ids_plain(printable) == model._block_ids_full(printable)
    expected = np.stack([
        model.vectors[[i for i in row if i != model.unk_id]].mean(0)
        if [i for i in row if i != model.unk_id] else np.zeros(model.dim, np.float32)
        for row in full
    ])  # fmt: skip
    norms = np.maximum(np.linalg.norm(expected, axis=1, keepdims=True), 1e-12)
    np.testing.assert_allclose(model.encode(texts), expected / norms, atol=1e-6)


def test_distill_static_defaults_on_the_command_line_are_the_recipe_defaults() -> None:
    """The parser does not import the pipeline (start-up time), so its defaults are written
    out: they must stay those of ``StaticRecipe``."""
    import dataclasses

    from demitasse.cli.main import build_parser
    from demitasse.static.pipeline import StaticRecipe

    args = build_parser().parse_args(["distill-static", "--corpus", "c", "--out", "o"])
    recipe = StaticRecipe()
    from_cli = {
        "dim": args.dim,
        "max_sentences": args.max_sentences,
        "min_count": args.min_count,
        "harvest_limit": args.harvest_limit,
        "max_steps": args.max_steps,
        "learning_rate": args.lr,
        "batch_size": args.batch_size,
        "regression_weight": args.regression_weight,
    }
    assert from_cli == {name: getattr(recipe, name) for name in from_cli}
    assert set(from_cli) <= {field.name for field in dataclasses.fields(StaticRecipe)}
