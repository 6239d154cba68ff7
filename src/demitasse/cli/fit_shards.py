"""``demitasse fit --vectors 'dir/*.parquet'``: fit on vectors stored as Parquet shards,
never holding them all. PCA (whitened, ABTT) is fitted from shard statistics, locally or on
Ray; other compressors, and the int8/binary calibration, from a seeded uniform sample."""

from __future__ import annotations

import argparse
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demitasse.cli.arguments import non_negative_int, positive_int
from demitasse.errors import DataError, DemitasseError

if TYPE_CHECKING:
    from demitasse.compress import Compressor
    from demitasse.evaluation.grid import CompressorSpec
    from demitasse.model import CompressedModel

logger = logging.getLogger(__name__)

#: Vectors drawn for compressors that need the vectors themselves, unless --sample says.
DEFAULT_SAMPLE = 100_000
_GLOB_CHARACTERS = frozenset("*?[")


def add_shard_options(source: Any) -> None:  # an argparse argument group
    """``--sample``, ``--seed`` and ``--engine`` of ``fit --vectors``."""
    source.add_argument(
        "--sample", type=positive_int, default=None,
        help=f"fit learned compressors and int8/binary calibration on a seeded uniform sample "
        f"of N vectors drawn across the shards (default {DEFAULT_SAMPLE:,}); PCA uses them all",
    )  # fmt: skip
    source.add_argument("--seed", type=non_negative_int, default=0, help="seed of --sample")
    source.add_argument("--engine", choices=("local", "ray"), default="local",
                        help="where PCA's shard statistics are computed")  # fmt: skip


def wants_shards(args: argparse.Namespace) -> bool:
    """Whether ``--vectors`` names Parquet shards (a glob or a directory) or the shard options
    are used; a single .npy or .parquet file without them is read into memory as before."""
    vectors = str(args.vectors)
    sharded = bool(_GLOB_CHARACTERS & set(vectors)) or Path(vectors).is_dir()
    options = args.sample is not None or args.engine != "local"
    if options and not sharded and not vectors.lower().endswith(".parquet"):
        raise DemitasseError("--sample and --engine take Parquet vectors: a glob, a directory "
                             "or a .parquet file")  # fmt: skip
    return sharded or options


def fit_from_shards(
    args: argparse.Namespace, spec: CompressorSpec | None, supervision: dict[str, Any]
) -> CompressedModel:
    """The model ``fit`` saves, fitted on the shards of ``--vectors``."""
    from demitasse.compress import PCA
    from demitasse.compress.shards import vector_shards, vector_width
    from demitasse.model import CompressedModel

    started = time.perf_counter()
    paths = vector_shards(args.vectors)
    width = vector_width(paths, args.vector_column)
    model = CompressedModel(
        args.model, layer=args.layer, precision=args.precision, normalize=args.normalize,
        batch_size=args.batch_size,
    )  # fmt: skip
    if model.recipe.encoder is not None and width != model.load_encoder().dim:
        raise DataError(
            f"the shards' vectors have {width} dimensions, but {args.model} gives "
            f"{model.load_encoder().dim}: --model must name the encoder that made them"
        )
    compressor = None if spec is None else spec.build(width, args.dim)
    fit_data = args.data_label or Path(str(args.vectors)).name
    if isinstance(compressor, PCA):
        if supervision:
            raise DemitasseError("pca takes no supervision; drop --pairs/--beir/--qrels")
        info = _fit_pca(model, compressor, paths, args, fit_data)
    else:
        model.compressor = compressor
        sample, info = _draw(paths, args)
        model.fit(vectors=sample, data_label=fit_data, **supervision)
    assert model.fit_info is not None
    model.fit_info.update(info, shards=len(paths), column=args.vector_column)
    model.fit_info["seconds"] = round(time.perf_counter() - started, 3)
    return model


def _fit_pca(
    model: CompressedModel, pca: Compressor, paths: list[Path], args: argparse.Namespace,
    fit_data: str,
) -> dict[str, Any]:  # fmt: skip
    """Fit ``pca`` from the shards' statistics (and the quantiser from a sample, if any)."""
    from demitasse.compress import PCA, make_quantizer
    from demitasse.compress.sampling import Reservoir
    from demitasse.compress.shards import scan_shards, shard_statistics
    from demitasse.compress.statistics import VectorStatistics
    from demitasse.persistence import demitasse_version

    assert isinstance(pca, PCA)
    calibrate = model.recipe.precision != "float32"
    reservoir = Reservoir(args.sample or DEFAULT_SAMPLE, args.seed) if calibrate else None
    if args.engine == "ray":
        statistics = shard_statistics(paths, column=args.vector_column, engine="ray")
        if reservoir is not None:
            scan_shards(paths, reservoir, column=args.vector_column)
    else:  # one pass feeds both
        statistics = VectorStatistics()
        scan_shards(
            paths, statistics, *([reservoir] if reservoir else []), column=args.vector_column
        )
    pca.fit_from_statistics(statistics, fit_data=fit_data)
    model.compressor = pca
    # A model whose compressor was fitted elsewhere, as CompressedModel.load builds one.
    model.fit_info = {
        "source": "vectors",
        "fit_data": fit_data,
        "n_samples": int(statistics.count),
        "sha256": None,  # the shards are never read as one array to hash
        "supervision": [],
        "fitted_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "demitasse_version": demitasse_version(),
    }
    if reservoir is not None:
        recipe = model.recipe
        quantizer = make_quantizer(recipe.precision, **recipe.quantizer_params)
        model.quantizer = quantizer.fit(
            model.transform(reservoir.sample, precision="float32", normalize=False)
        )
    return {
        "statistics": args.engine,
        "sample": None if reservoir is None else _sample_info(reservoir),
    }


def _draw(paths: list[Path], args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    from demitasse.compress.sampling import Reservoir
    from demitasse.compress.shards import scan_shards

    reservoir = Reservoir(args.sample or DEFAULT_SAMPLE, args.seed)
    scan_shards(paths, reservoir, column=args.vector_column)
    return reservoir.sample, {"sample": _sample_info(reservoir)}


def _sample_info(reservoir: Any) -> dict[str, int]:
    drawn = min(reservoir.size, reservoir.seen)
    logger.info("sampled %d of %d vectors (seed %d)", drawn, reservoir.seen, reservoir.seed)
    return {"size": drawn, "of": reservoir.seen, "seed": reservoir.seed}
