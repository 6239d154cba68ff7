"""Ray's one false alarm, kept off the stderr of a successful ``--engine ray`` run.

Ray Data starts each actor of a pool with its function passed by object reference and lets the
actor restart (``max_restarts=-1``); for every such actor Ray's core logs, at error level, that
a restart fails if that object is lost (ray-project/ray#57733, open). The driver holds those
objects for the whole run, so the restart works and the line is a false alarm, printed on
every run. Turning restarts off would silence it at the source, but a run would then fail with
the first node a cluster loses. So while the pipeline executes, the driver's stderr (file
descriptor 2, where Ray's C++ core writes) goes through a filter that drops exactly that
message about Ray Data's own actors and passes everything else on as it comes.

The filter is a separate process, not a thread: if the driver dies (a C++ abort with its last
log lines, ``kill -9``), the filter still reads the pipe to its end and forwards what it holds.
It runs as ``python -I -S`` on this file, which therefore imports only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

#: Both parts are in Ray's line (``core_worker.cc``) about an actor of a Ray Data pool (Ray
#: Data names its actor class ``MapWorker(<stage>)``); the same message about any other actor
#: is a user's own and goes through.
FALSE_ALARM = (
    b"Actor with class name: 'MapWorker(",
    b"has constructor arguments in the object store and max_restarts > 0",
)

#: How long the driver waits for the filter to copy what is left once the run is over; longer
#: only if another process shares the pipe (the filter then goes on serving it).
DRAIN_S = 5.0


def is_false_alarm(line: bytes) -> bool:
    return all(part in line for part in FALSE_ALARM)


def copy_filtered(source: int, target: int) -> None:
    """Copy ``source`` to ``target`` until its end, without the false alarm's lines.

    A partial line goes on at once (a progress bar that redraws itself with ``\\r`` writes no
    newline), unless it may begin one of Ray's lines (``[`` and a timestamp), which waits for
    its newline so that it can be judged whole."""
    pending = b""
    while chunk := os.read(source, 65536):
        data = pending + chunk
        cut = data.rfind(b"\n") + 1
        lines, pending = data[:cut], data[cut:]
        kept = b"".join(x for x in lines.splitlines(keepends=True) if not is_false_alarm(x))
        if pending and not pending.lstrip(b"\r").startswith(b"["):
            kept, pending = kept + pending, b""
        _write_all(target, kept)
    _write_all(target, pending)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def without_false_alarm() -> Iterator[None]:
    """Run the body with this process's stderr filtered; unfiltered where a filter cannot
    start (not POSIX, no file descriptor 2, no interpreter to run it)."""
    started = _start_filter()
    if started is None:
        yield
        return
    try:
        yield
    finally:
        _stop_filter(*started)


def _start_filter() -> tuple[subprocess.Popen[bytes], int] | None:
    if os.name != "posix" or not sys.executable:
        return None
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        return None
    read_end, write_end = os.pipe()
    try:
        # A session of its own: Ctrl-C and a closed terminal signal the driver, which reports
        # them on stderr, so the filter must outlive it rather than die with it.
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__], stdin=read_end, stdout=saved, stderr=saved,
            start_new_session=True,
        )  # fmt: skip
    except OSError:
        os.close(saved)
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    return child, saved


def _stop_filter(child: subprocess.Popen[bytes], saved: int) -> None:
    sys.stderr.flush()
    os.dup2(saved, 2)  # closes the pipe's last end in this process: the filter reaches its end
    os.close(saved)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=DRAIN_S)


if __name__ == "__main__":
    copy_filtered(sys.stdin.fileno(), sys.stdout.fileno())
