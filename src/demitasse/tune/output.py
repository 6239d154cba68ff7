"""What a tune leaves behind: the chosen model directory (checked by scoring it again from
disk), result records of every configuration, and the console summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from demitasse.evaluation.records import ResultRecord, rescoring_extra
from demitasse.model import CompressedModel
from demitasse.report.tables import markdown_table
from demitasse.tune.choice import HEADLINES, Outcome, Requirement, check_budget
from demitasse.tune.data import TuneData
from demitasse.tune.encoding import EncodedTexts
from demitasse.tune.scoring import LayerVectors, PairSide, Scorer, SearchSide
from demitasse.tune.space import RESCORE_PRECISION, Configuration, quantizer_params


@dataclass(frozen=True)
class WrittenModel:
    """The model a tune wrote, and its scores measured again from the saved directory."""

    path: Path
    outcome: Outcome
    scores: dict[str, float]

    @property
    def quality(self) -> float:
        return next(iter(self.scores.values()))


def build_model(
    config: Configuration, encoded: EncodedTexts, corpus: Any, fit_data: str, batch_size: int
) -> CompressedModel:
    """The configuration as a fitted :class:`CompressedModel`: its encoder (cut at its layer),
    compressor, quantiser and rescoring, fitted on the corpus's vectors of that layer exactly
    as the sweep fitted them."""
    layer = None if config.layer == encoded.last_layer else config.layer
    model = CompressedModel(
        encoded.source, layer=layer, batch_size=batch_size, backend=encoded.backend,
        **config.model_settings(),
    )  # fmt: skip
    return model.fit(vectors=corpus, data_label=fit_data)


def write_model(
    outcome: Outcome,
    encoded: EncodedTexts,
    vectors: LayerVectors,
    scorer: Scorer,
    out: str | Path,
    *,
    fit_data: str,
    batch_size: int = 64,
) -> WrittenModel:
    """Fit and save the chosen configuration at ``out``, load it back and score it as the
    sweep did: what it scores from disk is what the user gets."""
    model = build_model(outcome.config, encoded, vectors.corpus, fit_data, batch_size)
    path = model.save(out)
    loaded = CompressedModel.load(path)
    side = saved_side(loaded, vectors)
    return WrittenModel(Path(path), outcome, scorer.quality(side, loaded.recipe.rescore_factor))


def saved_side(model: CompressedModel, vectors: LayerVectors) -> SearchSide | PairSide:
    """A saved model's index and queries (or pair codes), made by the model's own methods."""
    if vectors.left is not None and vectors.right is not None:
        quantizer = model.stages().quantizer
        left = model.transform(vectors.left)
        right = model.transform(vectors.right)
        return PairSide(quantizer, left, right, model.output_dim)
    index = model.search_index(vectors.documents)
    queries = vectors.documents if vectors.queries is None else vectors.queries
    first_stage, rescore_queries = model.search_queries(queries, dim=index.n_bits)
    return SearchSide(index, first_stage, rescore_queries)


def outcome_records(
    outcomes: Sequence[Outcome],
    data: TuneData,
    needed: Requirement,
    chosen: Outcome | None,
    fit_data: str,
) -> list[ResultRecord]:
    """One result record per score of every outcome (``extra`` says how it searched, its
    latency, its encoder's speed, its retention and whether it was chosen). As every search
    record, its ``bytes_per_vector`` is every byte a document costs: ``extra["index_bytes"]``
    (the codes) plus ``extra["store_bytes"]`` (the rescoring copy)."""
    task = HEADLINES[data.kind][0]
    records = []
    for outcome in outcomes:
        config = outcome.config
        extra = _extra(outcome, needed, outcome is chosen, data.kind)
        for metric, score in outcome.scores.items():
            records.append(
                ResultRecord(
                    model=config.encoder,
                    layer=config.layer,
                    method=config.method,
                    dim=config.dim,
                    precision=config.precision,
                    task=task,
                    dataset=data.name,
                    metric=metric,
                    score=score,
                    bytes_per_vector=outcome.total_bytes,
                    fit_data=fit_data if config.method != "none" else None,
                    extra=dict(extra),
                )
            )
    return records


def _extra(outcome: Outcome, needed: Requirement, chosen: bool, kind: str) -> dict[str, Any]:
    config = outcome.config
    extra = rescoring_extra(
        rescore=config.rescore or 1,
        rescore_precision=None if config.rescore is None else RESCORE_PRECISION,
        rescore_source=None if config.rescore is None else "encoder",
        index_bytes_per_vector=outcome.index_bytes,
        rescore_bytes_per_vector=outcome.rescore_bytes,
    )
    extra |= {"tune": True, "encode_texts_per_s": outcome.speed, "chosen": chosen}
    extra |= quantizer_params(config.precision)
    if outcome.latency_p50_ms is not None:
        extra |= {
            "latency_p50_ms": outcome.latency_p50_ms,
            "latency_p99_ms": outcome.latency_p99_ms,
            **outcome.extra,
        }
    retention = needed.retention(outcome)
    if retention is not None and kind != "label-free":
        extra["retention"] = round(retention, 5)
    if kind == "label-free":
        extra["label_free"] = True
    return extra


def outcome_row(
    outcome: Outcome, needed: Requirement, *, with_encoder: bool, budget: str = "total"
) -> tuple[Any, ...]:
    """One table row: configuration, bytes (under ``"total"``, their sum first), quality,
    retention, speed, latency."""
    # The label-free estimate is a share already; the full model scores 100 on it.
    retention = None if needed.kind == "label-free" else needed.retention(outcome)
    total = () if check_budget(budget) == "memory" else (outcome.total_bytes,)
    return (
        outcome.config.describe(with_encoder=with_encoder),
        *total,
        outcome.index_bytes,
        outcome.rescore_bytes,
        outcome.quality,
        None if retention is None else f"{100 * retention:.1f} %",
        None if outcome.speed is None else round(outcome.speed),
        None if outcome.latency_p50_ms is None else f"{outcome.latency_p50_ms:.2f}",
    )


def outcome_header(needed: Requirement, budget: str = "total") -> tuple[str, ...]:
    total = () if check_budget(budget) == "memory" else ("total B",)
    return (
        "configuration", *total, "index B", "rescore B", needed.metric, "of full", "texts/s",
        "p50 ms",
    )  # fmt: skip


def outcome_table(
    outcomes: Sequence[Outcome],
    needed: Requirement,
    *,
    with_encoder: bool = False,
    budget: str = "total",
) -> str:
    rows = [outcome_row(o, needed, with_encoder=with_encoder, budget=budget) for o in outcomes]
    return markdown_table(outcome_header(needed, budget), rows)
