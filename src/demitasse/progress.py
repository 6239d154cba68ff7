"""Progress of long work, one way for every command: a tqdm bar with rate and ETA on a
terminal; elsewhere (a log file, CI, ``nohup``) a line every half minute and a last line with
the count, the time and the rate, so a run that takes an hour is never silent. ``enabled=False``
(``--quiet``) shows nothing.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, Self

#: Seconds between two lines of a progress that is not on a terminal.
LINE_INTERVAL_S = 30.0


def progress(desc: str, *, total: int | None = None, unit: str = "it", enabled: bool = True) -> Any:
    """A progress counter with tqdm's ``update``/``close``/context-manager interface: a bar on
    a terminal (stderr), lines otherwise, nothing when not ``enabled``."""
    from tqdm.auto import tqdm

    if not enabled:
        return tqdm(total=total, disable=True)
    if sys.stderr.isatty():
        return tqdm(total=total, desc=desc, unit=f" {unit}", smoothing=0.1)
    return LineProgress(desc, total=total, unit=unit)


class LineProgress:
    """Progress as lines on stderr: ``desc: n/total unit, r unit/s, ETA m:ss`` at most every
    :data:`LINE_INTERVAL_S` seconds, and at the end ``desc: n unit in t s (r unit/s)``."""

    def __init__(self, desc: str, *, total: int | None = None, unit: str = "it") -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.n = 0
        self.started = self._last = time.perf_counter()
        self._closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if now - self._last >= LINE_INTERVAL_S:
            self._last = now
            self._line(self._status(now))

    def _status(self, now: float) -> str:
        rate = self.n / max(now - self.started, 1e-9)
        done = f"{self.n:,}" if self.total is None else f"{self.n:,}/{self.total:,}"
        eta = ""
        if self.total is not None and rate > 0:
            left = max(self.total - self.n, 0) / rate
            eta = f", ETA {int(left // 60)}:{int(left % 60):02d}"
        return f"{done} {self.unit}, {rate:,.1f} {self.unit}/s{eta}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        seconds = time.perf_counter() - self.started
        rate = self.n / max(seconds, 1e-9)
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
