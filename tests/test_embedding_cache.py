"""The embedding cache every command shares (issue #50 item 4): its key, its bound and the
eviction of the least recently used shards, safety beside other processes, the work folder a
tune reads first, and what ``demitasse cache`` shows and clears."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from demitasse.encoders.cache import (
    STATS,
    CacheChain,
    EmbeddingCache,
    clear,
    describe,
    evict,
    max_cache_bytes,
    open_cache,
    shared_root,
)
from demitasse.errors import DemitasseError
from demitasse.loading import load_encoder
from tests.helpers import SENTENCES

pytestmark = pytest.mark.usefixtures("one_torch_thread", "isolated_cache")

DIM = 4


def _vectors(n: int, value: float = 1.0) -> dict[int, np.ndarray]:
    return {1: np.full((n, DIM), value, np.float32)}


def _shards(folder: Path) -> list[Path]:
    return sorted(folder.rglob("shard-*.safetensors"))


# ---- the key ----------------------------------------------------------------------------------


def test_the_shared_cache_lives_under_demitasse_cache_and_is_read_by_every_encoder(
    tiny_encoder: Path, tmp_path: Path
) -> None:
    encoder = load_encoder(tiny_encoder, device="cpu")
    first = encoder.encode_layers(SENTENCES, [1, 2])
    (folder,) = shared_root().iterdir()
    assert shared_root() == tmp_path / "cache" / "embeddings"
    STATS.reset()
    again = load_encoder(tiny_encoder, device="cpu").encode_layers(SENTENCES, [1, 2])
    assert (STATS.hits, STATS.misses) == (len(SENTENCES), 0)
    for layer in (1, 2):
        np.testing.assert_array_equal(again[layer], first[layer])
    # One layer cached is no hit for another: the layer keys the vectors too.
    STATS.reset()
    load_encoder(tiny_encoder, device="cpu").encode(SENTENCES[:2], layer=1)
    assert STATS.misses == 0
    (described,) = describe(shared_root())
    assert described.name == folder.name and described.layers == (1, 2)
    assert described.texts == len(SENTENCES)


def test_the_key_holds_the_content_the_sequence_length_pooling_and_backend(
    tiny_encoder: Path, tmp_path: Path
) -> None:
    import shutil

    names = set()
    for options in ({}, {"max_seq_length": 16}, {"pooling": "cls"}, {"normalize": False}):
        encoder = load_encoder(tiny_encoder, device="cpu", **options)
        encoder.encode(SENTENCES[:2])
        names.add(encoder._cache.directory.name)  # type: ignore[attr-defined]
    assert len(names) == 4
    # The same files elsewhere share the folder; one weight changed does not.
    copy = tmp_path / tiny_encoder.name
    shutil.copytree(tiny_encoder, copy)
    same = load_encoder(copy, device="cpu")
    assert same._cache.directory.name in names  # type: ignore[attr-defined]
    with (copy / "model.safetensors").open("r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(b"\1\2\3\4")
    changed = load_encoder(copy, device="cpu")
    assert changed._cache.directory.name not in names  # type: ignore[attr-defined]


def test_a_bound_of_zero_turns_the_shared_cache_off(
    tiny_encoder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE_MAX_BYTES", "0")
    load_encoder(tiny_encoder, device="cpu").encode(SENTENCES)
    assert not shared_root().exists()
    assert open_cache("key", DIM) is None
    for text, expected in [("2G", 2 << 30), ("512M", 512 << 20), ("1000", 1000), (" ", 2 << 30)]:
        monkeypatch.setenv("DEMITASSE_CACHE_MAX_BYTES", text)
        assert max_cache_bytes() == expected
    for bad in ("lots", "-1", "1T"):
        monkeypatch.setenv("DEMITASSE_CACHE_MAX_BYTES", bad)
        with pytest.raises(DemitasseError, match="DEMITASSE_CACHE_MAX_BYTES"):
            max_cache_bytes()


# ---- the bound --------------------------------------------------------------------------------


def test_past_its_bound_the_least_recently_used_shards_go(tmp_path: Path) -> None:
    root = tmp_path / "root"
    writer = EmbeddingCache(root / "a", dim=DIM)
    for i in range(6):
        before = set(_shards(root))
        writer.store([f"text {i}"], _vectors(1, float(i)))
        (shard,) = set(_shards(root)) - before
        os.utime(shard, (1000.0 + i, 1000.0 + i))  # the first written is the oldest
    size = shard.stat().st_size
    # A hit renews its shard: text 0, the oldest, is read and stays.
    reader = EmbeddingCache(root / "a", dim=DIM, max_bytes=4 * size)
    assert reader.fill(["text 0"], _vectors(1, 0.0)) == []
    assert evict(root, 4 * size) == 3 * size  # down to 90% of the bound: 3 shards left
    out = _vectors(6, -1.0)
    missing = EmbeddingCache(root / "a", dim=DIM).fill([f"text {i}" for i in range(6)], out)
    assert missing == [1, 2, 3]
    assert evict(root, 4 * size) == 0  # within the bound: nothing to do


def test_the_bound_is_kept_as_shards_are_written_checked_now_and_then(tmp_path: Path) -> None:
    root = tmp_path / "root"
    cache = EmbeddingCache(root / "a", dim=DIM, max_bytes=1)
    cache.store(["first"], _vectors(1))  # the first write checks: over the bound, evicted
    assert _shards(root) == []
    bound = 16 << 10  # a sixteenth of it is 1 KiB: checked every few shards, not each one
    cache = EmbeddingCache(root / "a", dim=DIM, max_bytes=bound)
    for i in range(400):
        cache.store([f"text {i}"], _vectors(1))
    total = sum(shard.stat().st_size for shard in _shards(root))
    assert total <= bound + (bound // 16) + 512
    assert len(_shards(root)) < 400


def test_a_shard_removed_by_another_process_is_a_silent_miss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "a"
    EmbeddingCache(folder, dim=DIM).store(["x"], _vectors(1))
    reader = EmbeddingCache(folder, dim=DIM)
    reader._build_index()
    for shard in _shards(folder):
        shard.unlink()
    with caplog.at_level("WARNING"):
        assert reader.fill(["x"], _vectors(1)) == [0]
    assert not caplog.records


def test_a_cache_that_cannot_be_written_is_said_once_and_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    cache = EmbeddingCache(tmp_path / "a-file" / "key", dim=DIM)
    with caplog.at_level("WARNING"):
        cache.store(["x"], _vectors(1))
        cache.store(["y"], _vectors(1))
        assert cache.fill(["x"], _vectors(1)) == [0]
    assert sum("not caching embeddings" in r.message for r in caplog.records) == 1


def test_what_the_cache_holds_and_clear_removing_only_its_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    EmbeddingCache(root / "enc-a", dim=DIM).store(["x", "y"], _vectors(2))
    EmbeddingCache(root / "enc-b", dim=DIM).store(
        ["x"], {1: np.ones((1, DIM), np.float32), 3: np.ones((1, DIM), np.float32)}
    )
    killed = root / "enc-a" / ".dt-0123456789-1-abcdef01-xyz.tmp"  # a killed run's temporary
    killed.write_bytes(b"half a shard")
    (root / "enc-b" / "notes.txt").write_text("the user's")
    held = describe(root)
    assert [(f.name, f.texts, f.layers, f.shards) for f in held] == [
        ("enc-a", 2, (1,), 1),
        ("enc-b", 1, (1, 3), 1),
    ]
    files, freed = clear(root)
    assert files == 3 and freed == sum(f.bytes for f in held)
    assert not (root / "enc-a").exists() and (root / "enc-b" / "notes.txt").exists()
    assert describe(root) == [] and clear(tmp_path / "nothing") == (0, 0)


# ---- a tune's work folder ---------------------------------------------------------------------


def test_the_work_folder_is_read_first_and_keeps_a_copy_of_every_vector(tmp_path: Path) -> None:
    shared = EmbeddingCache(tmp_path / "shared" / "k", dim=DIM)
    shared.store(["a", "b"], _vectors(2, 2.0))
    chain = CacheChain(EmbeddingCache(tmp_path / "work" / "k", dim=DIM), shared)
    out = _vectors(3, 0.0)
    assert chain.fill(["a", "b", "c"], out) == [2]
    assert out[1][:2].tolist() == [[2.0] * DIM] * 2
    chain.store(["c"], _vectors(1, 3.0))
    # The shared cache cleared (or evicted): the work folder alone still has them all.
    clear(tmp_path / "shared")
    own = EmbeddingCache(tmp_path / "work" / "k", dim=DIM)
    assert own.fill(["a", "b", "c"], _vectors(3)) == []
    assert EmbeddingCache(tmp_path / "shared" / "k", dim=DIM).fill(["c"], _vectors(1)) == [0]


def test_a_tune_encoder_reads_what_another_command_cached(
    tiny_encoder: Path, tmp_path: Path
) -> None:
    from demitasse.tune.encoding import open_encoder

    load_encoder(tiny_encoder, device="cpu").encode(SENTENCES)  # eval, index, encode…
    STATS.reset()
    open_encoder(str(tiny_encoder), tmp_path / "work").encode(SENTENCES)
    assert (STATS.hits, STATS.misses) == (len(SENTENCES), 0)
    assert _shards(tmp_path / "work" / "embeddings")  # its copy, for resuming
