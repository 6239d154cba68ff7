"""Static sentence encoders distilled from a transformer (Wada et al., 2025)."""

from demitasse.static.model import StaticModel, is_static_model_dir

__all__ = ["StaticModel", "is_static_model_dir"]
