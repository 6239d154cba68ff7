"""The whole recipe: extract word vectors, reduce them with sentence-level PCA + ABTT, distil.

Every stage's model is kept (the benchmark's ablation needs them), and the slow extraction is
checkpointed in a work directory so that a rerun resumes instead of starting over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from demitasse.data import read_corpus
from demitasse.encoders.resolve import cache_root
from demitasse.encoders.transformer import TransformerEncoder, load_transformer
from demitasse.errors import DemitasseError
from demitasse.io import atomic_write_json
from demitasse.static.distill import SimilarityDistiller
from demitasse.static.extract import WordVectorExtractor
from demitasse.static.model import StaticModel, is_static_model_dir
from demitasse.static.pca import StaticPCA


@dataclass
class StaticRecipe:
    """Settings of :func:`distill_static` (defaults: the benchmark's run)."""

    dim: int = 256
    abtt: int | None = None  # None: ⌊teacher dim / 100⌋
    max_sentences: int | None = 250_000  # corpus sentences (shuffled; None: all) counted
    harvest_limit: int | None = None  # of those, how many to harvest (None: all)
    max_occurrences: int = 100
    min_count: int = 5
    pca_sentences: int = 100_000
    learning_rate: float = 3e-3  # chosen on STS-B dev among 3e-4, 1e-3, 3e-3, 1e-2
    batch_size: int = 512  # chosen on dev among 128, 512, 1024 (static_batch_choices.json)
    temperature: float = 0.05  # of both in-batch similarity distributions
    regression_weight: float = 0.3  # pull of each sentence toward its teacher embedding
    anchor_weight: float = 0.0  # pull of each trained word vector toward its start
    max_steps: int = 10_000
    eval_every: int = 250
    patience: int = 4
    seed: int = 0  # the corpus sample and order, and the distillation's batches and split


@dataclass
class StaticStages:
    """The model after each stage, and the wall time of each stage in seconds."""

    extracted: StaticModel
    reduced: StaticModel
    distilled: StaticModel
    corpus: list[str]
    encoded: np.ndarray
    seconds: dict[str, float] = field(default_factory=dict)
    pca: StaticPCA | None = None
    distiller: SimilarityDistiller | None = None

    @property
    def encoded_texts(self) -> list[str]:
        """The corpus sentences the teacher encoded: what the PCA and the distillation read."""
        return encoded_sentences(self.corpus, self.encoded)


def encoded_sentences(corpus: list[str], encoded: np.ndarray) -> list[str]:
    """The sentences of ``corpus`` that the extraction's teacher encoded (``encoded`` flags)."""
    return [corpus[i] for i in np.flatnonzero(encoded)]


def shuffled_corpus(path: str | Path, limit: int | None, seed: int) -> list[str]:
    """The corpus in a seeded random order, so that any prefix is a sample of every source."""
    texts = read_corpus(path)
    order = np.random.default_rng(seed).permutation(len(texts))
    return [texts[i] for i in order[:limit]]


def extract_stage(
    teacher: TransformerEncoder,
    corpus: list[str],
    recipe: StaticRecipe,
    work_dir: Path,
    *,
    progress: bool = False,
) -> tuple[StaticModel, np.ndarray, float]:
    """Extracted model and which corpus rows the teacher encoded; reused from ``work_dir``."""
    saved, encoded_file = work_dir / "extracted", work_dir / "encoded.npy"
    settings = {
        "teacher": teacher.name,
        "sentences": len(corpus),
        "harvest_limit": recipe.harvest_limit,
        "max_occurrences": recipe.max_occurrences,
        "min_count": recipe.min_count,
    }
    if is_static_model_dir(saved) and encoded_file.is_file():
        model = StaticModel.load(saved)
        if model.metadata.get("extraction") == settings:
            return model, np.load(encoded_file), float(model.metadata.get("extract_s", 0.0))
    extractor = WordVectorExtractor(
        max_occurrences=recipe.max_occurrences,
        min_count=recipe.min_count,
        harvest_limit=recipe.harvest_limit,
        checkpoint_dir=work_dir / "checkpoints",
        progress=progress,
    ).fit(teacher, corpus)
    seconds = sum(extractor.timings_.values())  # with the harvesting of interrupted runs
    model = extractor.to_model(f"static-{teacher.name}")
    model.metadata.update(
        teacher=teacher.name, extraction=settings, extract_s=seconds, timings=extractor.timings_
    )
    model.save(saved)
    np.save(encoded_file, extractor.encoded_)
    return model, extractor.encoded_, seconds


def distill_static(
    teacher: TransformerEncoder | str | Path,
    corpus_path: str | Path,
    work_dir: str | Path | None = None,
    recipe: StaticRecipe | None = None,
    *,
    progress: bool = False,
) -> StaticStages:
    """Run extraction → sentence-level PCA with ABTT → similarity distillation.

    ``work_dir`` keeps the extraction checkpoints (default: demitasse's cache folder).
    """
    recipe = recipe or StaticRecipe()
    if recipe.dim < 1:
        raise DemitasseError(f"dim must be a positive integer, got {recipe.dim}")
    corpus = shuffled_corpus(corpus_path, recipe.max_sentences, recipe.seed)
    teacher = _transformer_teacher(teacher)
    if recipe.dim > teacher.dim:
        raise DemitasseError(f"dim must be in 1..{teacher.dim} for {teacher.name}")
    if work_dir is None:
        work_dir = cache_root() / "static" / f"{teacher.name}-{len(corpus)}"
    extracted, encoded, extract_s = extract_stage(
        teacher, corpus, recipe, Path(work_dir), progress=progress
    )
    encoded_texts = encoded_sentences(corpus, encoded)
    pca, reduced, pca_s = reduce_stage(extracted, encoded_texts, recipe)
    distiller, distill_s = distill_stage(teacher, reduced, encoded_texts, recipe, progress, pca=pca)
    seconds = {"extract": extract_s, "pca": pca_s, "distill": distill_s}
    distilled = distiller.model_
    distilled.metadata["seconds"] = seconds
    return StaticStages(
        extracted=extracted,
        reduced=reduced,
        distilled=distilled,
        corpus=corpus,
        encoded=encoded,
        seconds=seconds,
        pca=pca,
        distiller=distiller,
    )


def _transformer_teacher(teacher: TransformerEncoder | str | Path) -> TransformerEncoder:
    if isinstance(teacher, TransformerEncoder):
        return teacher
    if is_static_model_dir(Path(teacher).expanduser()):
        raise DemitasseError(f"the teacher must be a transformer sentence encoder: {teacher}")
    return load_transformer(teacher)


def reduce_stage(
    extracted: StaticModel, encoded_texts: list[str], recipe: StaticRecipe
) -> tuple[StaticPCA, StaticModel, float]:
    """Sentence-level PCA with ABTT, its reduced model and its wall time."""
    started = time.perf_counter()
    pca = StaticPCA(dim=recipe.dim, abtt=recipe.abtt).fit(
        extracted, encoded_texts[: recipe.pca_sentences]
    )
    reduced = pca.transform(extracted)
    return pca, reduced, time.perf_counter() - started


def distill_stage(
    teacher: TransformerEncoder,
    reduced: StaticModel,
    encoded_texts: list[str],
    recipe: StaticRecipe,
    progress: bool,
    pca: StaticPCA | None = None,
) -> tuple[SimilarityDistiller, float]:
    """The fitted distiller (its ``model_`` is the distilled model) and its wall time; ``pca``
    (the reduction ``reduced`` came from) places the teacher's embeddings in its coordinates
    for ``recipe.regression_weight``."""
    started = time.perf_counter()
    # The extraction left these sentences' embeddings in the teacher's cache: no re-encoding.
    targets = teacher.encode(encoded_texts, batch_size=64)
    pulls = pca.project_embeddings(targets) if pca and recipe.regression_weight else None
    distiller = SimilarityDistiller(
        learning_rate=recipe.learning_rate,
        batch_size=recipe.batch_size,
        temperature=recipe.temperature,
        regression_weight=recipe.regression_weight,
        anchor_weight=recipe.anchor_weight,
        max_steps=recipe.max_steps,
        eval_every=recipe.eval_every,
        patience=recipe.patience,
        seed=recipe.seed,
        progress=progress,
    ).fit(reduced, encoded_texts, targets, pulls)
    return distiller, time.perf_counter() - started


def write_stage_summary(stages: StaticStages, path: Path) -> None:
    assert stages.distiller is not None
    atomic_write_json(
        path,
        {
            "seconds": stages.seconds,
            "corpus_sentences": len(stages.corpus),
            "encoded_sentences": int(stages.encoded.sum()),
            "vocabulary": len(stages.distilled.vectors),
            "best_step": stages.distiller.best_step_,
            # The first validation comes before any training step: its train loss is NaN,
            # which JSON cannot hold.
            "history": [
                {k: None if v != v else v for k, v in entry.items()}
                for entry in stages.distiller.history_
            ],
        },
    )
