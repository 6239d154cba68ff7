"""Exporters: models that other libraries load without demitasse."""

from demitasse.export.model import FORMATS, export_model
from demitasse.export.model2vec import export_model2vec
from demitasse.export.sentence_transformers import export_sentence_transformer

__all__ = ["FORMATS", "export_model", "export_model2vec", "export_sentence_transformer"]
