"""One pipeline: a configuration built by ``tune``'s sweep, by ``eval``'s sweep and as a saved
model runs the same stages (:mod:`demitasse.pipeline`), so it makes bit-identical codes and
scores exactly alike, rescoring included."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from demitasse.data.beir import load_beir
from demitasse.evaluation import RetrievalTask, evaluate_grid
from demitasse.evaluation.grid import CompressorSpec
from demitasse.evaluation.ranking_metrics import evaluate_run
from demitasse.model import CompressedModel
from demitasse.search import Rescoring
from demitasse.tune import SweepSettings, SweepSpace, load_tune_data
from demitasse.tune.space import Configuration, quantizer_params
from demitasse.tune.sweep import Sweep
from tests.helpers import build_tiny_model, write_beir

pytestmark = pytest.mark.usefixtures("one_torch_thread")

METRICS = ("ndcg@10", "mrr@10", "recall@10")
LAYER = 2


class StoredVectors:
    """An encoder that returns the vectors tune's sweep computed for each text, so every path
    starts from the same encoder output and only the stages after it are compared."""

    name = "model"
    num_layers = LAYER

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._row = {text: i for i, text in enumerate(texts)}
        self._vectors = vectors
        self.dim = vectors.shape[1]

    def encode(self, texts: Sequence[str], layer: int | None = None, batch_size: int = 32):
        return self._vectors[[self._row[t] for t in texts]]

    def encode_layers(self, texts: Sequence[str], layers=None, batch_size: int = 32):
        return {layer: self.encode(texts) for layer in (layers or [LAYER])}


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Sweep, Path]:
    folder = tmp_path_factory.mktemp("pipeline")
    model = build_tiny_model(folder / "tiny", layers=LAYER, hidden=32)
    beir = write_beir(folder / "beir")
    space = SweepSpace(
        methods=("none", "pca"),
        precisions=("float32", "int8", "binary"),
        rescore_factors=(2,),
        codes=("rq4",),
        backends=("torch",),
    )
    sweep = Sweep(str(model), load_tune_data(beir=beir), space, SweepSettings(folder / "work"))
    sweep.embed()
    sweep.open_store()
    sweep.run()
    return sweep, beir


CONFIGURATIONS = [
    Configuration("model", LAYER, "pca", 16, "int8"),
    Configuration("model", LAYER, "pca", 16, "int8", rescore=2),
    Configuration("model", LAYER, "none", 32, "rq4"),
    Configuration("model", LAYER, "pca", 8, "binary", rescore=2),
]


@pytest.mark.parametrize("config", CONFIGURATIONS, ids=lambda c: c.describe())
def test_tune_eval_and_a_saved_model_make_the_same_codes_and_scores(
    swept: tuple[Sweep, Path], config: Configuration, tmp_path: Path
) -> None:
    sweep, beir = swept
    dataset = load_beir(beir)
    vectors = sweep.layer_vectors(sweep.main, LAYER)
    queries = vectors.queries
    assert queries is not None
    tuned = next(o for o in sweep.outcomes() if o.config == config)

    # As a saved model, fitted as tune writes it (on the corpus vectors of that layer).
    built = CompressedModel(**config.model_settings()).fit(vectors=vectors.corpus)
    model = CompressedModel.load(built.save(tmp_path / "model"))
    codes = model.transform(vectors.documents, precision=config.precision)
    assert np.array_equal(sweep.stages(config).encode(vectors.documents), codes)
    _, rows = model.search(model.search_index(vectors.documents), queries, k=10)
    ids = np.asarray(dataset.corpus_ids, dtype=object)
    run = {q: ids[r].tolist() for q, r in zip(dataset.query_ids, rows, strict=True)}
    assert evaluate_run(run, dataset.qrels, METRICS) == tuned.scores

    # Through eval's sweep, from the same encoder output.
    texts = sweep.data.texts()
    encoder = StoredVectors(texts, sweep.main.vectors[LAYER])
    rescoring = [Rescoring(config.rescore, "int8", "encoder")] if config.rescore else []
    task = RetrievalTask(dataset, metrics=METRICS, rescoring=rescoring)
    method = config.method
    records = evaluate_grid(
        encoder,  # type: ignore[arg-type]
        [task],
        specs=[CompressorSpec(method, None if method == "none" else method)],
        dims=[config.dim],
        precisions=["float32", config.precision],
        layers=[LAYER],
        fit_texts=sweep.data.corpus,
        quantizer_params={config.precision: quantizer_params(config.precision)},
    )
    graded = {
        r.metric: r.score
        for r in records
        if r.precision == config.precision and r.extra["rescore"] == (config.rescore or 1)
    }
    assert graded == tuned.scores
