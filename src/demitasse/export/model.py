"""Export a fitted :class:`~demitasse.model.CompressedModel` in another library's format."""

from __future__ import annotations

from pathlib import Path

from demitasse.compress import Int8Quantizer
from demitasse.errors import DemitasseError
from demitasse.export import model2vec, sentence_transformers
from demitasse.export.model2vec import export_model2vec
from demitasse.export.sentence_transformers import export_sentence_transformer
from demitasse.export.st_rescoring import RescoringPart
from demitasse.model import CompressedModel, check_model_target

#: ``onnx``: the model directory again, its transformer encoder inside as an ONNX graph
#: (:meth:`~demitasse.model.CompressedModel.save` with ``onnx=True``).
FORMATS = ("sentence-transformers", "model2vec", "onnx")


def _not_static() -> DemitasseError:
    return DemitasseError(
        "the model2vec format holds static models only; this model's encoder is a transformer "
        "(use --format sentence-transformers)"
    )


def export_model(
    model: CompressedModel,
    out: str | Path,
    *,
    format: str = "sentence-transformers",
    dim: int | None = None,
) -> Path:
    """Write ``model`` so that sentence-transformers (or model2vec) loads it and gives the
    vectors demitasse gives; ``dim`` sets the default output width (``truncate_dim``). A model
    of product or residual codes (``pq16``, ``rq8``) is refused for sentence-transformers,
    which cannot compute them (see :mod:`demitasse.export.sentence_transformers`)."""
    if format not in FORMATS:
        raise DemitasseError(f"unknown export format {format!r}; known: {', '.join(FORMATS)}")
    if format == "onnx":
        return _export_graph(model, out, dim)
    # Refuse an output that is not ours before the encoder loads.
    (model2vec if format == "model2vec" else sentence_transformers).check_export_target(out)
    recipe = model.recipe
    if recipe.encoder is None:
        raise DemitasseError(
            "a vectors-only model has no encoder to export; sentence-transformers and "
            "model2vec models turn texts into vectors (use 'demitasse transform' for vectors)"
        )
    if dim is not None:
        model.bytes_per_vector(dim)  # a one-line error for a width the model does not produce
    if format == "sentence-transformers":
        sentence_transformers.check_exportable(model.quantizer)  # before the encoder loads
    if format == "model2vec" and recipe.encoder_kind != "static":  # known before it loads
        raise _not_static()
    # Loading the encoder checks its files against the fingerprint recorded at fit time.
    encoder = model.load_encoder()
    if encoder.dim != recipe.input_dim:
        raise DemitasseError(
            f"the encoder gives {encoder.dim} dims but the model takes {recipe.input_dim}"
        )
    if format == "model2vec":
        return _export_model2vec(model, out, dim)
    return export_sentence_transformer(
        recipe.encoder,
        out,
        layer=recipe.layer,
        dim=dim,
        compressor=model.compressor,
        quantizer=model.quantizer,
        normalize=recipe.normalize,
        rescoring=_rescoring_part(model),
    )


def _rescoring_part(model: CompressedModel) -> RescoringPart | None:
    """How the model rescores, for the export (None: it does not)."""
    store, factor = model.stages().rescore_store, model.recipe.rescore_factor
    if store is None or factor is None:
        return None
    ranges = store.quantizer
    assert ranges is None or isinstance(ranges, Int8Quantizer)
    return RescoringPart(factor, ranges)


def _export_graph(model: CompressedModel, out: str | Path, dim: int | None) -> Path:
    check_model_target(out)
    if dim is not None:
        raise DemitasseError("--dim applies to sentence-transformers and model2vec exports; "
                             "the model directory keeps all its widths")  # fmt: skip
    kind = model.recipe.encoder_kind
    if kind != "transformer":
        raise DemitasseError("the onnx format carries a transformer encoder; this model's "
                             f"encoder is {kind or 'none (vectors only)'}")  # fmt: skip
    return model.save(out, onnx=True)


def _export_model2vec(model: CompressedModel, out: str | Path, dim: int | None) -> Path:
    from demitasse.static.model import StaticModel

    encoder = model.load_encoder()
    if not isinstance(encoder, StaticModel):
        raise _not_static()
    # A bias-free linear compressor folds into the word vectors; others are refused there.
    return export_model2vec(encoder, out, compressor=model.compressor, dim=dim)
