"""Evaluate encoder layer × compressor × dimension × precision on any set of tasks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from demitasse.compress import Quantizer, compressor_class, make_compressor, make_quantizer
from demitasse.compress.vocabulary import resolve_auto
from demitasse.encoders.base import Encoder
from demitasse.errors import DemitasseError
from demitasse.evaluation.records import ResultRecord, rescoring_extra
from demitasse.evaluation.tasks import EmbeddedTexts, Task
from demitasse.model import CompressedModel, encoder_vectors
from demitasse.pipeline import Stages, fit_quantizer, fit_rescore_store
from demitasse.progress import progress as show_progress

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EncoderStore:
    """The encoder's full output of the evaluation texts at one layer, kept for rescoring from
    source ``"encoder"``, and the int8 ranges of the fit texts' normalised output."""

    vectors: np.ndarray
    quantizer: Quantizer | None


@dataclass(frozen=True)
class CompressorSpec:
    """A compressor as named on the command line: ``pca``, ``pca-abtt``, ``pca:whiten=true``
    (``method`` and ``params`` from :func:`~demitasse.compress.resolve_compressor`)."""

    label: str
    method: str | None  # None: the encoder's own vectors, full width
    params: dict[str, object] = field(default_factory=dict)

    def build(self, input_dim: int, max_dim: int | None):  # noqa: ANN201
        params = resolve_auto(dict(self.params), input_dim)
        if self.method is None:
            raise DemitasseError(f"{self.label!r} is the encoder's own vectors, not a compressor")
        return make_compressor(self.method, dim=max_dim, **params)


def evaluate_grid(
    encoder: Encoder,
    tasks: Sequence[Task],
    *,
    specs: Sequence[CompressorSpec],
    dims: Sequence[int],
    precisions: Sequence[str] = ("float32",),
    layers: Sequence[int] | None = None,
    fit_texts: Sequence[str] | None = None,
    fit_data: str | None = None,
    batch_size: int = 64,
    progress: bool = False,
    quantizer_params: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[ResultRecord]:
    """Score every layer × compressor × dim × precision on every task.

    Texts are encoded once per layer (the encoder caches them); compressors and quantiser
    calibration ranges are fitted on ``fit_texts`` only, never on the evaluation texts.
    ``quantizer_params`` gives a precision's quantiser options (``{"binary": {"rotation":
    "itq"}}``); its records carry them in ``extra``. Rescoring variants of source
    ``"encoder"`` rescore against the layer's full output (int8 ranges from the fit texts).
    """
    layers = list(layers) if layers else [encoder.num_layers]
    needs_fit = any(s.method and compressor_class(s.method).learns_from_data for s in specs)
    if (needs_fit or any(p != "float32" for p in precisions)) and not fit_texts:
        raise DemitasseError(
            "PCA, random projection and quantised precisions need fit data (--fit-data)"
        )
    texts = list(dict.fromkeys(t for task in tasks for t in task.texts()))
    vectors, fit_vectors = _encode_layers(encoder, texts, fit_texts, layers, batch_size)
    full_dim = encoder.dim
    usable_dims = sorted({d for d in dims if d <= full_dim}, reverse=True)
    records: list[ResultRecord] = []
    n_configs = len(layers) * len(precisions) * sum(_n_dims(s, usable_dims) for s in specs)
    bar = show_progress("configurations evaluated", total=n_configs, enabled=progress)
    for layer in layers:
        store = _encoder_store(tasks, vectors[layer], fit_vectors.get(layer))
        for spec in specs:
            spec_dims = [full_dim] if spec.method is None else usable_dims
            if not spec_dims:
                continue
            compressor = None
            if spec.method is not None:
                compressor = spec.build(full_dim, max(spec_dims))
                # Only truncation runs without fit data, and it learns nothing but the width.
                compressor.fit(fit_vectors.get(layer, vectors[layer]), fit_data=fit_data)
                spec_dims = [d for d in spec_dims if d <= compressor.output_dim_]
            for dim in spec_dims:
                fields = {"model": encoder.name, "layer": layer, "method": spec.label, "dim": dim}
                reduce = Stages(compressor, make_quantizer("float32"), dim).compress
                records += _score_precisions(
                    reduce(vectors[layer]),
                    reduce(fit_vectors[layer]) if fit_vectors else None,
                    texts, tasks, precisions, fields,
                    fit_data if compressor is not None else None, fit_data, bar,
                    store=store, quantizer_params=quantizer_params or {},
                )  # fmt: skip
    bar.close()
    return records


def _n_dims(spec: CompressorSpec, usable_dims: list[int]) -> int:
    """How many widths of ``spec`` the grid scores (the encoder's own vectors: one)."""
    return 1 if spec.method is None else len(usable_dims)


def _encode_layers(
    encoder: Encoder,
    texts: list[str],
    fit_texts: Sequence[str] | None,
    layers: list[int],
    batch_size: int,
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """The evaluation texts' and the fit texts' vectors at each layer (none without fit texts)."""
    logger.info("encoding %d evaluation texts, layers %s", len(texts), layers)
    vectors = encoder.encode_layers(texts, layers, batch_size=batch_size)
    fit_vectors: dict[int, np.ndarray] = {}
    if fit_texts:
        logger.info("encoding %d fit texts", len(fit_texts))
        fit_vectors = encoder.encode_layers(list(fit_texts), layers, batch_size=batch_size)
    return vectors, fit_vectors


def _score_precisions(
    reduced: np.ndarray,
    reduced_fit: np.ndarray | None,
    texts: list[str],
    tasks: Sequence[Task],
    precisions: Sequence[str],
    fields: dict[str, Any],
    compressor_fit_data: str | None,
    fit_data: str | None,
    bar: Any,
    *,
    store: EncoderStore | None = None,
    quantizer_params: Mapping[str, Mapping[str, Any]],
) -> list[ResultRecord]:
    """Records of one layer × compressor × dim at every precision (quantisers calibrated on
    the fit data's vectors, never on the evaluation texts)."""
    records: list[ResultRecord] = []
    # Document vectors kept as int8 for rescoring get ranges from the fit data, like codes.
    rescore_quantizer = None
    if reduced_fit is not None and _keeps_int8_vectors(tasks, "compressed"):
        rescore_quantizer = make_quantizer("int8").fit(reduced_fit)
    for precision in precisions:
        params = dict(quantizer_params.get(precision, {}))
        quantizer = fit_quantizer(precision, reduced_fit, params)
        dim = fields["dim"]
        embedded = EmbeddedTexts(
            texts,
            quantizer.quantize(reduced),
            quantizer,
            dim,
            vectors=reduced,
            rescore_quantizer=rescore_quantizer,
            encoder_vectors=None if store is None else store.vectors,
            encoder_rescore_quantizer=None if store is None else store.quantizer,
        )
        common: dict[str, Any] = {
            **fields,
            "precision": precision,
            "bytes_per_vector": quantizer.bytes_per_vector(dim),
            "fit_data": compressor_fit_data if precision == "float32" else fit_data,
        }
        for record in score_embedded(embedded, tasks, params, **common):
            records.append(record)
            logger.info(_summary_line(record))
        bar.update()
    return records


def evaluate_model(
    model: CompressedModel,
    tasks: Sequence[Task],
    *,
    dims: Sequence[int] | None = None,
    precisions: Sequence[str] | None = None,
    extra: Mapping[str, Any] | None = None,
    vectors_of: Callable[[list[str]], np.ndarray] | None = None,
) -> list[ResultRecord]:
    """Score a fitted :class:`CompressedModel` exactly as it is: its encoder, layer, fitted
    compressor and calibrated quantiser, at each of ``dims`` (default: its full output width)
    and ``precisions`` (default: the precision it was fitted for).

    A model that rescores is scored as it searches (:meth:`CompressedModel.search`): its
    codes find ``k·F`` candidates, rescored against its store of the encoder's full output;
    pair similarities (STS) are those rescoring scores. Its records carry the rescoring
    factor and both byte counts in ``extra``. ``vectors_of(texts)`` gives the encoder's
    output for texts (default :func:`~demitasse.model.encoder_vectors`: encoding them), e.g.
    vectors computed already for some of them."""
    dims = list(dims) if dims else [model.output_dim]
    precisions = list(precisions) if precisions else [model.recipe.precision]
    for dim in dims:  # check every request before the slow encoding
        for precision in precisions:
            model.bytes_per_vector(dim, precision)
    texts = list(dict.fromkeys(t for task in tasks for t in task.texts()))
    logger.info("encoding %d evaluation texts", len(texts))
    encoder = model.load_encoder()
    vectors = encoder_vectors(model, texts) if vectors_of is None else vectors_of(texts)
    fit_data = (model.fit_info or {}).get("fit_data")
    records: list[ResultRecord] = []
    for dim in dims:
        reduced = model.stages(dim, "float32").compress(vectors)
        for precision in precisions:
            quantizer = model.stages(dim, precision).quantizer
            embedded = _model_embedded(model, texts, vectors, reduced, dim, precision)
            described = _model_extra(model, quantizer.bytes_per_vector(dim), extra)
            common: dict[str, Any] = {
                "model": encoder.name,
                "layer": model.recipe.layer or encoder.num_layers,
                "method": model.recipe.compressor,
                "dim": dim,
                "precision": precision,
                "bytes_per_vector": quantizer.bytes_per_vector(dim),
                "fit_data": fit_data,
            }
            for record in score_embedded(embedded, tasks, described, **common):
                records.append(record)
                logger.info(_summary_line(record))
    return records


def _model_embedded(
    model: CompressedModel,
    texts: list[str],
    vectors: np.ndarray,
    reduced: np.ndarray,
    dim: int,
    precision: str,
) -> EmbeddedTexts:
    """``texts`` as ``model`` stores them at ``dim`` and ``precision``, with its rescoring."""
    stages = model.stages(dim, precision)
    store = stages.rescore_store
    return EmbeddedTexts(
        texts,
        stages.quantize(reduced),
        stages.quantizer,
        dim,
        vectors=reduced,
        rescore_quantizer=model.quantizer if model.recipe.precision == "int8" else None,
        encoder_vectors=None if store is None else vectors,
        encoder_rescore_quantizer=None if store is None else store.quantizer,
        rescoring=model.rescoring,
    )


def _model_extra(
    model: CompressedModel, index_bytes: int, extra: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``extra`` for every record of ``model``; one that rescores says how, on every task."""
    if model.rescoring is None:
        return dict(extra or {})
    described = rescoring_extra(
        rescore=model.rescoring.multiplier,
        rescore_precision=model.rescoring.precision,
        rescore_source=model.rescoring.source,
        index_bytes_per_vector=index_bytes,
        rescore_bytes_per_vector=_store_bytes(model),
    )
    return {**described, **(extra or {})}


def _store_bytes(model: CompressedModel) -> int:
    """Bytes per document of the model's rescoring store (0 without one)."""
    store = model.stages().rescore_store
    width = model.recipe.input_dim
    return 0 if store is None or width is None else store.bytes_per_vector(width)


def score_embedded(
    embedded: EmbeddedTexts,
    tasks: Sequence[Task],
    extra: Mapping[str, Any] | None = None,
    **fields: Any,
) -> list[ResultRecord]:
    """One record per score of every task on ``embedded``; ``fields`` fill the rest of each
    record (model, layer, method, dim, precision, bytes_per_vector, fit_data). A score whose
    ``extra`` counts ``index_bytes`` and ``store_bytes`` (a search) costs their sum."""
    records = []
    for task in tasks:
        for score in task.evaluate(embedded):
            merged = {**score.extra, **(extra or {})}
            record_fields = dict(fields)
            if "index_bytes" in merged and "store_bytes" in merged:
                record_fields["bytes_per_vector"] = merged["index_bytes"] + merged["store_bytes"]
            records.append(
                ResultRecord(
                    task=task.name,
                    dataset=score.dataset,
                    metric=score.metric,
                    score=score.score,
                    extra=merged,
                    **record_fields,
                )
            )
    return records


def evaluate_vectors(
    vectors: np.ndarray,
    texts: Sequence[str],
    tasks: Sequence[Task],
    *,
    model: str,
    method: str,
    layer: int | None = None,
    fit_data: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> list[ResultRecord]:
    """Score float32 ``vectors`` (row i embeds ``texts[i]``) on every task: for vectors made
    outside :func:`evaluate_grid`, e.g. by a trained model with its own head."""
    quantizer = make_quantizer("float32")
    dim = vectors.shape[1]
    embedded = EmbeddedTexts(list(texts), quantizer.quantize(vectors), quantizer, dim)
    return score_embedded(
        embedded, tasks, extra, model=model, layer=layer, method=method, dim=dim,
        precision="float32", bytes_per_vector=quantizer.bytes_per_vector(dim), fit_data=fit_data,
    )  # fmt: skip


def _rescoring_variants(tasks: Sequence[Task], source: str) -> list[Any]:
    """The tasks' rescoring variants that keep document vectors from ``source``."""
    return [
        variant
        for task in tasks
        for variant in getattr(task, "rescoring", ())
        if getattr(variant, "source", "compressed") == source
    ]


def _keeps_int8_vectors(tasks: Sequence[Task], source: str) -> bool:
    """Whether a task rescores against document vectors from ``source`` kept as int8."""
    return any(v.precision == "int8" for v in _rescoring_variants(tasks, source))


def _encoder_store(
    tasks: Sequence[Task], vectors: np.ndarray, fit_vectors: np.ndarray | None
) -> EncoderStore | None:
    """The layer's full output for the tasks' rescoring from source ``"encoder"`` (None when
    no task rescores so); int8 ranges come from the fit texts, never the evaluation texts."""
    if not _rescoring_variants(tasks, "encoder"):
        return None
    quantizer = None
    if fit_vectors is not None and _keeps_int8_vectors(tasks, "encoder"):
        quantizer = fit_rescore_store(fit_vectors, "int8").quantizer
    return EncoderStore(vectors, quantizer)


def _summary_line(record: ResultRecord) -> str:
    return (
        f"layer {record.layer} {record.method:>10} {record.precision:>7} dim {record.dim:>4}: "
        f"{record.task} {record.dataset} {record.metric} {record.score:.2f}"
    )
