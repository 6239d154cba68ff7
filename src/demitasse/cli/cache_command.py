"""``demitasse cache``: where the embedding cache every command shares lives, what it holds (its
size, per encoder configuration), and ``--clear`` to empty it."""

from __future__ import annotations

import argparse
from typing import Any


def add_cache_parser(commands: Any) -> None:  # argparse's subparsers action
    cache = commands.add_parser(
        "cache",
        help="show the embedding cache every command shares (where, size); --clear empties it",
        description="Show where the embedding cache lives ($DEMITASSE_CACHE/embeddings, "
        "default ~/.cache/demitasse/embeddings), its size and what it holds per encoder "
        "configuration. encode, embed, index, eval and tune read vectors from it and add "
        "those they compute; past its bound ($DEMITASSE_CACHE_MAX_BYTES, default 2G; 0 "
        "turns it off) the least recently used are removed.",
    )
    cache.add_argument(
        "--clear",
        action="store_true",
        help="remove every cached vector (only the files demitasse wrote there)",
    )


def run_cache(args: argparse.Namespace) -> int:
    from demitasse.encoders.cache import (
        MAX_BYTES_VARIABLE,
        clear,
        describe,
        max_cache_bytes,
        shared_root,
    )

    root = shared_root()
    if args.clear:
        files, freed = clear(root)
        print(f"cleared the embedding cache at {root}: {size_text(freed)} freed ({files} files)")
        return 0
    bound = max_cache_bytes()
    limit = f"bound {size_text(bound)}" if bound else "off"
    print(f"embedding cache: {root} ({limit}; ${MAX_BYTES_VARIABLE})")
    folders = describe(root)
    for folder in folders:
        layers = ",".join(map(str, folder.layers)) or "-"
        print(f"  {size_text(folder.bytes):>10}  {folder.texts:>9} texts  layers {layers:<8} "
              f"{folder.name}")  # fmt: skip
    texts = sum(folder.texts for folder in folders)
    shards = sum(folder.shards for folder in folders)
    total = size_text(sum(folder.bytes for folder in folders))
    print(f"{total} in all: {texts} texts in {shards} shards, {len(folders)} encoder "
          f"configurations")  # fmt: skip
    return 0


def size_text(size: int) -> str:
    """``size`` bytes for a reader: ``512 B``, ``8.0 MiB``, ``2.0 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
