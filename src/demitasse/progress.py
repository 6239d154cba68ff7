"""Progress of long work, one way for every command: a tqdm bar with rate and ETA on a
terminal; elsewhere (a log file, CI, ``nohup``) a line every half minute and a last line with
the count, the time and the rate, so a run that takes an hour is never silent. ``enabled=False``
(``--quiet``) shows nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from types import TracebackType
from typing import Any, Self, TypeVar

#: Seconds between two lines of a progress that is not on a terminal.
LINE_INTERVAL_S = 30.0

T = TypeVar("T")


def progress(
    desc: str,
    *,
    total: int | None = None,
    unit: str = "it",
    enabled: bool = True,
    initial: int = 0,
    leave: bool = True,
) -> Any:
    """A progress counter with tqdm's ``update``/``set_postfix``/``close``/context-manager
    interface: a bar on a terminal (stderr), lines otherwise, nothing when not ``enabled``.
    ``initial``: what a resumed run had done; ``leave=False``: no trace once closed (a bar
    inside another's work)."""
    from tqdm.auto import tqdm

    if not enabled:
        return tqdm(total=total, disable=True)
    if sys.stderr.isatty():
        return tqdm(
            total=total, desc=desc, unit=f" {unit}", smoothing=0.1, initial=initial, leave=leave
        )
    return LineProgress(desc, total=total, unit=unit, initial=initial, leave=leave)


def tracked(
    items: Iterable[T],
    desc: str,
    *,
    unit: str = "it",
    enabled: bool = True,
    leave: bool = True,
) -> Iterator[T]:
    """``items`` one by one, counted by :func:`progress` (its total when it has a length)."""
    total = len(items) if isinstance(items, Sized) else None
    with progress(desc, total=total, unit=unit, enabled=enabled, leave=leave) as bar:
        for item in items:
            yield item
            bar.update(1)


class LineProgress:
    """Progress as lines on stderr: ``desc: n/total unit, r unit/s, ETA m:ss`` at most every
    :data:`LINE_INTERVAL_S` seconds, and at the end (with ``leave``) ``desc: n unit in t s
    (r unit/s)``."""

    def __init__(
        self,
        desc: str,
        *,
        total: int | None = None,
        unit: str = "it",
        initial: int = 0,
        leave: bool = True,
    ) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.n = self._initial = initial
        self.started = self._last = time.perf_counter()
        self._leave, self._closed = leave, False
        self._postfix = ""

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if now - self._last >= LINE_INTERVAL_S:
            self._last = now
            self._line(self._status(now))

    def set_postfix(self, **values: Any) -> None:
        """Figures shown after the count in the next line (a training loss)."""
        self._postfix = "".join(f", {name}={value}" for name, value in values.items())

    def _rate(self, now: float) -> float:
        """Units a second in this run (a resumed run's earlier ones not counted)."""
        return (self.n - self._initial) / max(now - self.started, 1e-9)

    def _status(self, now: float) -> str:
        rate = self._rate(now)
        done = f"{self.n:,}" if self.total is None else f"{self.n:,}/{self.total:,}"
        eta = ""
        if self.total is not None and rate > 0:
            left = max(self.total - self.n, 0) / rate
            eta = f", ETA {int(left // 60)}:{int(left % 60):02d}"
        return f"{done} {self.unit}, {rate:,.1f} {self.unit}/s{eta}{self._postfix}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._leave:
            return
        now = time.perf_counter()
        seconds, rate = now - self.started, self._rate(now)
        self._line(f"{self.n:,} {self.unit} in {seconds:.0f} s ({rate:,.1f} {self.unit}/s)")

    def _line(self, text: str) -> None:
        print(f"{self.desc}: {text}", file=sys.stderr, flush=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None:  # the error's own line says what happened; no rate after it
            self._closed = True
        self.close()
