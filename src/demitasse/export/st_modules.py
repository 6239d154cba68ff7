"""A fitted demitasse compressor as a sentence-transformers module, for exports of non-linear
compressors (adaptor, SMEC, MCR², Isomap, LLE) that no built-in module computes.

The module folder *is* a saved compressor (``config.json`` + ``state.safetensors``, written by
``Compressor.save``, no pickle), plus ``demitasse_module.json`` with the output width. Loading
it runs demitasse code, so sentence-transformers (>= 6) asks for ``trust_remote_code=True``
and the environment needs ``pip install demitasse``. Inference only: the compressor runs in
numpy on the CPU, so no gradient flows through it.
"""

from __future__ import annotations

from typing import Any, Self

import torch
from sentence_transformers.base.modules import Module

from demitasse.compress import Compressor, load_compressor


class CompressorModule(Module):
    """Replaces ``features["sentence_embedding"]`` by ``compressor.transform(·, dim=dim)``.

    ``dim`` is passed to the compressor rather than left to ``truncate_dim``, because for some
    compressors (SMEC's stages) the ``k``-wide output is not a prefix of the full one.
    """

    # The folder's config.json belongs to the saved compressor.
    config_file_name = "demitasse_module.json"
    config_keys: list[str] = ["dim"]  # noqa: RUF012  (overrides Module's list attribute)

    def __init__(self, compressor: Compressor, dim: int | None = None) -> None:
        super().__init__()
        self.compressor = compressor
        self.dim = int(compressor.output_dim_ if dim is None else dim)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        x = features["sentence_embedding"]
        out = self.compressor.transform(x.detach().float().cpu().numpy(), dim=self.dim)
        features["sentence_embedding"] = torch.from_numpy(out).to(device=x.device, dtype=x.dtype)
        return features

    def get_embedding_dimension(self) -> int:
        return self.dim

    def save(
        self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any
    ) -> None:
        self.compressor.save(output_path)  # first: it replaces the folder atomically
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        init_defaults: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Self:
        config = cls.load_config(
            model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
            revision=revision, local_files_only=local_files_only,
        )  # fmt: skip
        directory = cls.load_dir_path(
            model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
            revision=revision, local_files_only=local_files_only,
        )  # fmt: skip
        return cls(load_compressor(str(directory)), dim=config.get("dim"))

    def __repr__(self) -> str:
        return f"CompressorModule({self.compressor!r}, dim={self.dim})"
