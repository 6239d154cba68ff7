"""Bulk work on millions of records: embed text corpora and re-compress stored vectors into
sharded Parquet, resumable after any interruption, on one machine or on Ray.

- :func:`run_bulk` with a :class:`BulkJob` (``demitasse embed`` / ``demitasse recompress``);
- :class:`DemitasseEncoder` and :class:`DemitasseRecompressor`, for ``map_batches`` in a Ray
  Data pipeline of one's own;
- :func:`read_output` reads a finished output's shards back.

Ray is imported only by ``engine="ray"`` (the ``ray`` extra).
"""

from demitasse.bulk.actors import DemitasseEncoder, DemitasseRecompressor
from demitasse.bulk.job import EMBED, RECOMPRESS, BulkJob
from demitasse.bulk.manifest import MANIFEST, Manifest, load_manifest, read_output
from demitasse.bulk.ray_engine import RayOptions
from demitasse.bulk.run import ENGINES, run_bulk
from demitasse.bulk.shards import PROVENANCE_KEY, shard_provenance
from demitasse.bulk.sources import Columns, InputFile, expand_inputs

__all__ = [
    "EMBED",
    "ENGINES",
    "MANIFEST",
    "PROVENANCE_KEY",
    "RECOMPRESS",
    "BulkJob",
    "Columns",
    "DemitasseEncoder",
    "DemitasseRecompressor",
    "InputFile",
    "Manifest",
    "RayOptions",
    "expand_inputs",
    "load_manifest",
    "read_output",
    "run_bulk",
    "shard_provenance",
]
