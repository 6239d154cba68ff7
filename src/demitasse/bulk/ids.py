"""Every id of a bulk output once: a repeated id (an id column that names two records, in one
file or in two) stops ``embed`` and ``recompress`` in one line that names the id and both
records, as ``index`` and ``tune`` refuse a repeated ``_id``.

The ids of the shards written so far are held as 64-bit hashes with their places (input file
and record): 16 bytes an id, 16 MB a million, in sorted numpy runs that merge as they grow (a
merge briefly holds a second copy of the two runs it joins), so a chunk is checked by binary
search. The shard being written holds its ids as strings (at most ``--shard-rows`` of them,
about 10 MB at the default 100,000). A chunk's id whose hash is among the written ones is
compared with the id read back from its shard before the run is refused: two ids that only
share a hash never stop a run. A resumed run reads the ids of the shards already written
first, so it checks exactly what an uninterrupted run checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from demitasse.errors import DataError

#: A place is ``file << 40 | record``: up to 2**40 records a file, 2**23 files.
_FILE_SHIFT = 40


class DuplicateIdError(DataError):
    """Two records of a bulk run's inputs have the same id."""


Record = tuple[int, int]  # (input file, 0-based record of that file)


class SeenIds:
    """The ids of a bulk output: :meth:`add` checks and records a chunk of the shard being
    written, :meth:`close_shard` files that shard's ids with the written ones once it is
    durable, :meth:`drop_shard` forgets them when it is abandoned.

    ``written_id(file, record)`` reads back the id of a record of a written shard;
    ``place(file, record)`` says where a record is, for the message: its file's path and
    ``("line", n)`` or ``("row", n)``.
    """

    def __init__(
        self,
        written_id: Callable[[int, int], str],
        place: Callable[[int, int], tuple[str, tuple[str, int]]],
    ) -> None:
        self._written_id = written_id
        self._place = place
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted hashes, places)
        self._open: dict[str, int] = {}  # id → record, of the shard being written
        self._open_file = -1

    def __len__(self) -> int:
        return sum(len(hashes) for hashes, _ in self._runs) + len(self._open)

    def add(self, ids: Sequence[str], file: int, first: int) -> None:
        """Check and record ``ids``, records ``first``… of input ``file`` in the shard being
        written; the first repeated id, in record order, raises :class:`DuplicateIdError`."""
        if self._open and file != self._open_file:
            raise RuntimeError("a shard of another file is still open")  # a caller's bug
        self._open_file = file
        hits = self._hash_hits(ids)
        chunk = dict(zip(ids, range(first, first + len(ids)), strict=True))
        if not hits.any() and len(chunk) == len(ids) and self._open.keys().isdisjoint(chunk):
            self._open.update(chunk)  # the usual case, at C speed
            return
        hits = hits.tolist()
        for i, ident in enumerate(ids):
            earlier = self._open.get(ident)
            if earlier is None and hits[i]:
                earlier_place = self._written_place(ident)
                if earlier_place is not None:
                    raise self._duplicate(ident, (file, first + i), earlier_place)
            if earlier is not None:
                raise self._duplicate(ident, (file, first + i), (file, earlier))
            self._open[ident] = first + i

    def close_shard(self) -> None:
        """The shard being written is durable: its ids join the written ones."""
        if not self._open:
            return
        hashes = np.fromiter(map(hash, self._open), np.int64, len(self._open))
        records = np.fromiter(self._open.values(), np.int64, len(self._open))
        order = np.argsort(hashes, kind="stable")
        places = (self._open_file << _FILE_SHIFT) + records[order]
        self._runs.append((hashes[order], places))
        self._open = {}
        # Merge while a run is no larger than the one after it: at most log2(n) runs.
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= len(self._runs[-1][0]):
            later = self._runs.pop()
            self._runs[-1] = _merge(self._runs[-1], later)

    def drop_shard(self) -> None:
        """The shard being written was abandoned: its ids are in no output."""
        self._open = {}

    def _hash_hits(self, ids: Sequence[str]) -> np.ndarray:
        """For each id, whether a written id has its hash."""
        hashes = np.fromiter(map(hash, ids), np.int64, len(ids))
        order = np.argsort(hashes)  # sorted keys: each search starts where the last ended
        hashes = hashes[order]
        found = np.zeros(len(ids), dtype=bool)
        for run, _ in self._runs:
            at = np.minimum(np.searchsorted(run, hashes), len(run) - 1)
            found |= run[at] == hashes
        hits = np.empty_like(found)
        hits[order] = found
        return hits

    def _written_place(self, ident: str) -> Record | None:
        """The written record whose id is ``ident`` (among those sharing its hash), or None."""
        key = hash(ident)
        for run, places in self._runs:
            lo, hi = np.searchsorted(run, key, "left"), np.searchsorted(run, key, "right")
            for place in places[lo:hi].tolist():
                record = (place >> _FILE_SHIFT, place & ((1 << _FILE_SHIFT) - 1))
                if self._written_id(*record) == ident:
                    return record
        return None

    def _duplicate(self, ident: str, record: Record, earlier: Record) -> DuplicateIdError:
        (path, here), (first_path, first) = self._place(*record), self._place(*earlier)
        where = f"{first[0]} {first[1]}" if record[0] == earlier[0] else _at(first_path, first)
        return DuplicateIdError(
            f"{_at(path, here)}: duplicate id {ident!r} (first on {where}); ids must be "
            "unique (the shards written so far are kept)"
        )


def _at(path: str, position: tuple[str, int]) -> str:
    """``path:7`` for a line, ``path: row 6`` for a row, as the other readers name them."""
    unit, n = position
    return f"{path}:{n}" if unit == "line" else f"{path}: {unit} {n}"


def _merge(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted runs (hashes, places) as one, in linear time."""
    at = np.searchsorted(a[0], b[0], side="right") + np.arange(len(b[0]))
    from_a = np.ones(len(a[0]) + len(b[0]), dtype=bool)
    from_a[at] = False
    merged = []
    for a_values, b_values in zip(a, b, strict=True):
        values = np.empty(len(from_a), dtype=np.int64)
        values[at] = b_values
        values[from_a] = a_values
        merged.append(values)
    return merged[0], merged[1]
