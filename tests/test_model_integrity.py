"""Integrity of a model directory: the encoder's files hashed in full (through the cache of
file hashes, valid while a file's stamp holds), each part checked against the content hash
recorded at save, the parts' widths against each other, and a record stripped of its hashes
refused as damaged."""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from demitasse import CompressedModel
from demitasse.encoders import file_hashes
from demitasse.encoders.cache import content_hash, fingerprint_directory
from demitasse.encoders.file_hashes import HASHES_FILE, file_sha256, hash_file
from demitasse.errors import DemitasseError
from tests.helpers import WORDS, build_tiny_model


def _sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(3, 9))) for _ in range(n)]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file read to be hashed (the files of tests are fresh: cache them anyway, and
    whatever their size)."""
    monkeypatch.setattr(file_hashes, "RACY_SECONDS", 0.0)
    monkeypatch.setattr(file_hashes, "CACHED_MIN_BYTES", 1)
    read: list[Path] = []

    def counted(path: Path) -> str:
        read.append(path)
        return hash_file(path)

    monkeypatch.setattr(file_hashes, "hash_file", counted)
    return read


def one_line_error(call: Callable[[], object], match: str) -> str:
    with pytest.raises(DemitasseError, match=match) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message, message
    return message


# ---- the cache of file hashes ----------------------------------------------------------------


def test_a_file_is_hashed_in_full_and_once_while_its_stamp_holds(
    tmp_path: Path, hashed: list[Path]
) -> None:
    data = tmp_path / "weights.bin"
    data.write_bytes(bytes(range(256)) * 20_000)  # 5 MB: above the old "ends only" rule
    first = file_sha256(data)
    assert hashed == [data] and first == hash_file(data)
    assert file_sha256(data) == first and hashed == [data]  # a hit: not read again
    file_hashes._known.clear()  # a fresh process: from the cache file
    assert file_sha256(data) == first and hashed == [data]
    # One byte changed in the middle, size unchanged: a new stamp, hashed again in full.
    time.sleep(0.02)
    with data.open("r+b") as handle:
        handle.seek(2_560_000)
        handle.write(b"\xff")
    assert file_sha256(data) != first and hashed == [data, data]


def test_an_edit_whose_mtime_is_put_back_is_seen(tmp_path: Path, hashed: list[Path]) -> None:
    """ctime is in the stamp: ``os.utime`` puts mtime back but moves ctime to now."""
    data = tmp_path / "weights.bin"
    data.write_bytes(b"\x01" * 100_000)
    before = data.stat()
    first = file_sha256(data)
    time.sleep(0.02)
    with data.open("r+b") as handle:  # in place: same inode, same size
        handle.seek(50_000)
        handle.write(b"\x02")
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert data.stat().st_ino == before.st_ino and data.stat().st_mtime_ns == before.st_mtime_ns
    assert file_sha256(data) != first and len(hashed) == 2
    # A changed copy put in its place with the old mtime: another inode, hashed again too.
    copy = tmp_path / "copy.bin"
    copy.write_bytes(b"\x01" * 100_000)
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    copy.replace(data)
    assert file_sha256(data) == first and len(hashed) == 3


def test_a_fresh_file_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file changed within the last RACY_SECONDS could change again within one tick of
    its timestamp: it is hashed each time until it has settled."""
    monkeypatch.setattr(file_hashes, "CACHED_MIN_BYTES", 1)
    data = tmp_path / "new.bin"
    data.write_bytes(b"x" * 1000)
    file_sha256(data)
    assert not (tmp_path / "cache" / HASHES_FILE).exists()


@pytest.mark.parametrize(
    "content", [b'{"kind": "demitasse-file-hashes", "version": 1, "files": {"X": [1, 2, 3, 4, '
                b'5, "beef"]}}', b'{"kind": "demitasse-file-hashes", "version": 0}']
)  # fmt: skip
def test_a_cache_file_of_demitasse_with_bad_entries_is_replaced(
    tmp_path: Path, hashed: list[Path], content: bytes
) -> None:
    data = tmp_path / "weights.bin"
    data.write_bytes(b"w" * 1000)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / HASHES_FILE).write_bytes(content)
    assert file_sha256(data) == hash_file(data)
    written = json.loads((tmp_path / "cache" / HASHES_FILE).read_text())
    assert list(written["files"]) == [str(data)]  # replaced by a good one


@pytest.mark.parametrize(
    "content", [b"{", b"[]", b'{"kind": "other"}', b"\xff\xfe", b'{"mine": 1}']
)
def test_a_file_of_the_same_name_not_written_by_demitasse_is_left_alone(
    tmp_path: Path, hashed: list[Path], content: bytes
) -> None:
    """DEMITASSE_CACHE may point at a user's folder: a file-hashes.json demitasse did not
    write is ignored and never replaced (the hashes are then computed in full each time)."""
    data = tmp_path / "weights.bin"
    data.write_bytes(b"w" * 1000)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / HASHES_FILE).write_bytes(content)
    assert file_sha256(data) == hash_file(data) == file_sha256(data)
    assert (tmp_path / "cache" / HASHES_FILE).read_bytes() == content


def test_a_cache_that_cannot_be_written_is_no_error(
    tmp_path: Path, hashed: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "a-file" / "cache"))
    data = tmp_path / "weights.bin"
    data.write_bytes(b"w" * 1000)
    assert file_sha256(data) == hash_file(data)


def test_the_content_hash_covers_every_file_but_hidden_ones(tmp_path: Path) -> None:
    folder = tmp_path / "enc"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"\0" * (6 << 20))
    (folder / "1_Pooling" / "config.json").write_text("{}")
    before = fingerprint_directory(folder)
    assert content_hash(folder)[:20] == before and len(content_hash(folder)) == 64
    (folder / ".demitasse-onnx").mkdir()
    (folder / ".demitasse-onnx" / "model.onnx").write_bytes(b"graph")
    (folder / ".gitattributes").write_text("*.bin lfs")
    assert fingerprint_directory(folder) == before
    with (folder / "model.safetensors").open("r+b") as handle:  # the middle of a large file
        handle.seek(3 << 20)
        handle.write(b"\1")
    assert fingerprint_directory(folder) != before


# ---- the encoder -------------------------------------------------------------------------------


def flip_a_weight(weights: Path) -> None:
    """Flip the sign of one float in the middle of a safetensors file, in place (same size,
    same inode)."""
    with weights.open("r+b") as handle:
        (header,) = struct.unpack("<Q", handle.read(8))
        start, end = 8 + header, weights.stat().st_size
        middle = start + ((end - start) // 2) // 4 * 4
        handle.seek(middle + 3)
        byte = handle.read(1)[0]
        handle.seek(middle + 3)
        handle.write(bytes([byte ^ 0x80]))


@pytest.fixture
def fitted(tmp_path: Path, hashed: list[Path]) -> tuple[Path, Path, list[str], np.ndarray]:
    """A tiny encoder, a model fitted on it and saved (the encoder's hashes now cached), some
    texts and their codes before the save."""
    encoder = build_tiny_model(tmp_path / "enc")
    model = CompressedModel(encoder, compressor="pca", dim=8, precision="int8", cache=False)
    texts = _sentences(5, seed=1)
    model.fit(_sentences(80))
    codes = model.encode(texts)
    return encoder, model.save(tmp_path / "m"), texts, codes


def test_an_untouched_model_loads_bit_identically_without_hashing_its_encoder_again(
    fitted: tuple[Path, Path, list[str], np.ndarray], hashed: list[Path]
) -> None:
    encoder, path, texts, codes = fitted
    loaded = CompressedModel.load(path, cache=False)
    read = len(hashed)
    np.testing.assert_array_equal(loaded.encode(texts), codes)
    assert len(hashed) == read  # the encoder's files: all from the cache
    config = json.loads((path / "config.json").read_text())
    assert config["format_version"] == 4
    assert config["encoder"]["fingerprint"] == fingerprint_directory(encoder)
    assert sorted(config["part_hashes"]) == ["compressor/", "quantizer/"]
    assert config["part_hashes"]["compressor/"] == content_hash(path / "compressor")


@pytest.mark.parametrize("how", ["edited", "mtime put back", "copied with mtime put back"])
def test_an_encoder_weight_changed_in_the_middle_is_refused(
    fitted: tuple[Path, Path, list[str], np.ndarray], how: str
) -> None:
    encoder, path, texts, _ = fitted
    weights = encoder / "model.safetensors"
    before = weights.stat()
    time.sleep(0.02)
    if how == "copied with mtime put back":
        copy = weights.with_name("copy")
        shutil.copyfile(weights, copy)
        flip_a_weight(copy)
        os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
        copy.replace(weights)
    else:
        flip_a_weight(weights)
        if how == "mtime put back":
            os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert weights.stat().st_size == before.st_size
    loaded = CompressedModel.load(path, cache=False)
    one_line_error(
        lambda: loaded.encode(texts),
        r"the encoder .* differs from the one this model was fitted with \(fingerprint ",
    )


def edit_config(path: Path, change: Callable[[dict], None]) -> None:
    config = json.loads((path / "config.json").read_text())
    change(config)
    (path / "config.json").write_text(json.dumps(config))


def test_a_record_without_the_fingerprint_or_the_hashes_is_damaged(
    fitted: tuple[Path, Path, list[str], np.ndarray], tmp_path: Path
) -> None:
    _, path, texts, _ = fitted
    changes: list[tuple[Callable[[dict], object], str]] = [
        (lambda c: c["encoder"].pop("fingerprint"), "encoder record .* lacks its content finger"),
        (lambda c: c.pop("part_hashes"), "does not record the content hashes of exactly its "
         r"parts \(compressor/, quantizer/\)"),
        (lambda c: c["part_hashes"].pop("quantizer/"), "damaged"),
        (lambda c: c.update(part_hashes={}), "damaged"),
    ]  # fmt: skip
    for i, (change, message) in enumerate(changes):
        copy = shutil.copytree(path, tmp_path / f"copy{i}")
        edit_config(copy, change)
        one_line_error(lambda: CompressedModel.load(copy, cache=False), message)  # noqa: B023
    # A fingerprint set to null is compared as it is: the encoder's files have one.
    copy = shutil.copytree(path, tmp_path / "null")
    edit_config(copy, lambda c: c["encoder"].update(fingerprint=None))
    loaded = CompressedModel.load(copy, cache=False)
    one_line_error(lambda: loaded.encode(texts), r"\(fingerprint \w+ != None\)")


# ---- the parts ---------------------------------------------------------------------------------


def vectors_model(seed: int, dim: int = 4) -> CompressedModel:
    """PCA to ``dim`` with int8 codes and int8 rescoring ranges, fitted on vectors (seed)."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((200, 16)).astype(np.float32)
    model = CompressedModel(compressor="pca", dim=dim, precision="int8", rescore_factor=2)
    return model.fit(vectors=vectors)


@pytest.mark.parametrize("part", ["compressor", "quantizer", "rescore"])
def test_a_part_of_another_model_is_refused_even_with_the_same_shapes(
    tmp_path: Path, part: str
) -> None:
    ours = vectors_model(0).save(tmp_path / "ours")
    theirs = vectors_model(1).save(tmp_path / "theirs")
    shutil.rmtree(ours / part)
    shutil.copytree(theirs / part, ours / part)
    message = one_line_error(
        lambda: CompressedModel.load(ours),
        f"{part}/ does not belong to this model: its content hash differs from the one "
        "recorded at fit",
    )
    assert message.startswith(str(ours))


def test_the_parts_widths_must_chain(tmp_path: Path) -> None:
    ours = vectors_model(0, dim=4).save(tmp_path / "ours")
    wider = vectors_model(0, dim=6).save(tmp_path / "wider")
    shutil.rmtree(ours / "compressor")
    shutil.copytree(wider / "compressor", ours / "compressor")
    one_line_error(
        lambda: CompressedModel.load(ours),
        "quantizer/ takes 4 dims, compressor/ gives 6; it does not belong to this model",
    )


def test_an_untouched_vectors_model_transforms_as_before(tmp_path: Path) -> None:
    model = vectors_model(0)
    vectors = np.random.default_rng(5).standard_normal((7, 16)).astype(np.float32)
    loaded = CompressedModel.load(model.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.transform(vectors), model.transform(vectors))
    assert loaded.state_hash() == model.state_hash()


@pytest.mark.parametrize("kind", ["other", 3, None])
def test_a_config_of_another_kind_is_refused(tmp_path: Path, kind: object) -> None:
    vectors = np.random.default_rng(0).standard_normal((40, 12)).astype(np.float32)
    path = CompressedModel(compressor="pca", dim=4).fit(vectors=vectors).save(tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    config["kind"] = kind
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(DemitasseError, match="kind"):
        CompressedModel.load(path)
