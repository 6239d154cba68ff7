"""Exporters: models that other libraries load without demitasse."""

from demitasse.export.sentence_transformers import export_sentence_transformer

__all__ = ["export_sentence_transformer"]
