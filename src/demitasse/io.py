"""Safe outputs: nothing the user already has is lost, whatever they type or interrupt.

Every file and folder demitasse writes goes through here:

- A file is written to a temporary sibling and renamed over the target, so an interrupted run
  leaves the previous file or the new one, never half of one. Only a regular file (or nothing)
  is replaced: a folder, a symbolic link or a device under the target name is refused.
- A folder output is built in a temporary sibling and swapped in. It replaces only an empty
  folder or a complete earlier demitasse output of the same kind: such outputs carry a marker
  file written last (:data:`MARKER`). Anything else under that name is refused with one line,
  and nothing is touched.
- The swap (old aside, new in, old deleted) runs with SIGINT, SIGTERM and SIGHUP deferred, so
  an interruption takes effect before the swap (the old output stays) or after it (the new one
  is complete). :func:`handle_termination` makes SIGTERM and SIGHUP interrupt like Ctrl-C, so
  temporary files are removed on every one of them.
- Temporary names are short (a hash of the target name), so any valid target name works, and
  results get the permissions a plain ``open``/``mkdir`` would give (umask respected).
- An error raised while an output is written (a full disk, a library's complaint) names the
  user's target, never the hidden temporary it was being written to.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from demitasse.errors import DemitasseError

#: Written last into every folder output: ``{"kind": ..., "complete": true}``.
MARKER = ".demitasse-output.json"
_HELD_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is, as Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def handle_termination() -> None:
    """Make SIGTERM and SIGHUP raise :class:`Interrupted`, so cleanup code runs for them too."""

    def raise_interrupted(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, raise_interrupted)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back for the block; they are delivered after it.

    Python runs signal handlers in the main thread, whichever thread the kernel gave the signal
    to (blocking it in this thread alone would not do: torch and tokenizers run threads of their
    own). So, in the main thread, the handlers are swapped for one that notes the signal, and
    each noted signal goes to the handler it was meant for once the block is done. Elsewhere
    no handler can interrupt the block.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum: int, _frame: object) -> None:
        noted.append(signum)

    previous: dict[int, Any] = {}
    try:  # a signal during the swap of handlers still gets every one of them put back
        for signum in _HELD_SIGNALS:
            handler = signal.getsignal(signum)
            if handler is not None:  # None: set outside Python, which cannot be put back
                previous[signum] = handler
                signal.signal(signum, note)
        yield
    finally:
        arrived = _restore_handlers(previous)
        for signum in dict.fromkeys(noted):
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)  # the default action, now that it is safe
        if arrived is not None:
            raise arrived


def _restore_handlers(previous: dict[int, Any]) -> KeyboardInterrupt | None:
    """Put every handler back, even if one put back already fires midway; return what fired.

    Python runs a handler between any two bytecodes, so a signal whose own handler is back
    can interrupt this loop; then the others would stay on ``note`` for good.
    """
    arrived: KeyboardInterrupt | None = None
    waiting = list(previous.items())
    while waiting:
        try:
            while waiting:
                signal.signal(*waiting[0])  # setting one twice is harmless
                waiting.pop(0)
        except KeyboardInterrupt as exc:
            arrived = exc
    return arrived


def remove_temporaries(*paths: Path | None) -> None:
    """Remove temporary files or folders, with signals held; a signal raised before they
    could be held is raised again once the paths are gone, so none is ever left behind."""
    arrived: KeyboardInterrupt | None = None
    while True:
        try:
            with signals_held():
                for path in paths:
                    if path is None:
                        continue
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
            break
        except KeyboardInterrupt as exc:  # removing again is harmless
            arrived = arrived or exc
    if arrived is not None:
        raise arrived


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _temporary_prefix(target: Path) -> str:
    # A hash of the name, not the name: a 250-byte target name must still leave room.
    return ".dt-" + hashlib.sha1(target.name.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def check_file_target(target: str | Path) -> Path:
    """``target`` as a Path, or a one-line error if something other than a file is there."""
    target = Path(target)
    if target.is_symlink():
        raise DemitasseError(f"refusing to replace {target}: it is a symbolic link")
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):
        what = "a directory" if target.is_dir() else "not a regular file"
        raise DemitasseError(f"refusing to write {target}: it is {what}")
    if not target.name:
        raise DemitasseError(f"{target} is not a file name")
    return target


def _name_target(exc: BaseException, tmp: Path, target: Path) -> None:
    """Rewrite ``exc`` in place so that it names ``target`` where it named ``tmp``: the hidden
    temporary means nothing to the user, and is gone by the time they read the message."""
    old, new = str(tmp), str(target)

    def renamed(value: object) -> object:
        return value.replace(old, new) if isinstance(value, str) else value

    if any(isinstance(arg, str) and old in arg for arg in exc.args):
        with contextlib.suppress(AttributeError, TypeError):
            exc.args = tuple(renamed(arg) for arg in exc.args)
    if isinstance(exc, OSError):
        for attribute in ("filename", "filename2"):
            value = getattr(exc, attribute, None)
            if isinstance(value, str | os.PathLike):
                setattr(exc, attribute, renamed(os.fspath(value)))


@contextlib.contextmanager
def atomic_path(target: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``."""
    target = check_file_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp: Path | None = None
    try:
        with signals_held():  # a signal now would leave a temporary file nobody removes
            fd, tmp_name = tempfile.mkstemp(
                dir=target.parent, prefix=_temporary_prefix(target), suffix=suffix + ".tmp"
            )
            os.close(fd)
            tmp = Path(tmp_name)
        try:
            yield tmp
        except Exception as exc:
            _name_target(exc, tmp, target)
            raise
        tmp.chmod(0o666 & ~_umask())  # mkstemp makes 0600 files
        with signals_held():
            tmp.replace(target)
            tmp = None
    finally:
        remove_temporaries(tmp)


def atomic_write_bytes(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(target: str | Path, text: str) -> None:
    atomic_write_bytes(target, text.encode("utf-8"))


def strict_json(obj: Any, indent: int | None = 2) -> str:
    """JSON text that other tools can read: a non-finite number is an error, not ``NaN``."""
    try:
        return json.dumps(obj, indent=indent, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:
        raise DemitasseError(f"cannot write JSON: {exc}") from None


def atomic_write_json(target: str | Path, obj: Any) -> None:
    atomic_write_text(target, strict_json(obj) + "\n")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


#: A ``\\ud800``-``\\udfff`` escape: half of a surrogate pair, or a lone surrogate (no text).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def read_json(path: str | Path) -> Any:
    """Parse a JSON file strictly: no NaN/Infinity, no integers too large to be a float, no
    number too large for one (``1e999`` would be read as infinity), or a string holding a lone
    surrogate (``"\\ud800"`` is valid JSON but not text: it cannot be written to a UTF-8 file,
    nor drawn)."""

    def finite_int(text: str) -> int:
        value = int(text)
        if len(text) > 300 or not math.isfinite(float(value)):
            raise ValueError(f"integer {text[:20]}… is too large")
        return value

    def finite_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"number {text[:20]} is too large")
        return value

    text = Path(path).read_text(encoding="utf-8")
    value = json.loads(
        text, parse_constant=_reject_constant, parse_int=finite_int, parse_float=finite_float
    )
    if _SURROGATE_ESCAPE.search(text):  # rare: then check whether every one is half of a pair
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start]
            raise ValueError(
                f"a string holds the lone surrogate {bad!r}, which is not text"
            ) from None
    return value


def holds_output(path: Path, kind: str) -> bool:
    """Whether ``path`` holds a complete demitasse output of ``kind`` (its marker says so)."""
    try:
        marker = read_json(path / MARKER)
    except (OSError, ValueError, RecursionError):
        return False
    return (
        isinstance(marker, dict) and marker.get("kind") == kind and marker.get("complete") is True
    )


def check_directory_target(
    target: str | Path, kind: str, recognise: Callable[[Path], bool] | None = None
) -> Path:
    """``target`` as a Path if a ``kind`` output may be written there, else a one-line error.

    Allowed: nothing there, an empty folder, a complete earlier output of the same kind (its
    marker says so), or a folder ``recognise`` knows to be demitasse's own (its cache).
    """
    target = Path(target)
    if target.is_symlink():
        raise DemitasseError(f"refusing to replace {target}: it is a symbolic link")
    if not target.exists():
        return target
    if not target.is_dir():
        raise DemitasseError(f"refusing to replace {target}: it is a file, not a folder")
    if not any(target.iterdir()) or holds_output(target, kind):
        return target
    if recognise is not None:
        try:
            if recognise(target):
                return target
        except (OSError, ValueError, RecursionError, DemitasseError):
            pass
    raise DemitasseError(
        f"refusing to replace {target}: it holds files that are not a demitasse {kind}; "
        "choose a new or empty folder"
    )


@contextlib.contextmanager
def atomic_directory(
    target: str | Path, *, kind: str, recognise: Callable[[Path], bool] | None = None
) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success it becomes ``target`` (see the module doc).

    The marker is written last, so a folder that lacks it was never completed.
    """
    target = check_directory_target(target, kind, recognise)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = _temporary_prefix(target)
    tmp: Path | None = None
    old: Path | None = None
    try:
        with signals_held():  # a signal now would leave a temporary folder nobody removes
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=prefix, suffix=".tmp"))
        try:
            yield tmp
        except Exception as exc:
            _name_target(exc, tmp, target)
            raise
        _open_permissions(tmp)
        (tmp / MARKER).write_text(strict_json({"kind": kind, "complete": True}) + "\n")
        with signals_held():  # the old output goes in the same held block: no gap to cut
            if target.exists():
                old = Path(tempfile.mkdtemp(dir=target.parent, prefix=prefix, suffix=".old"))
                old.rmdir()
                target.replace(old)
            try:
                tmp.replace(target)
            except OSError:
                if old is not None:  # the user's output goes back where it was
                    old.replace(target)
                    old = None
                raise
            tmp = None
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
                old = None
    finally:
        remove_temporaries(tmp, old)


def _open_permissions(root: Path) -> None:
    """Give a finished output the permissions plain ``mkdir``/``open`` would have given:
    ``mkdtemp``, ``mkstemp`` and some libraries make them owner-only."""
    umask = _umask()
    root.chmod(0o777 & ~umask)
    for path in root.rglob("*"):
        if path.is_symlink():
            continue
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


@contextlib.contextmanager
def atomic_npy(target: str | Path, shape: tuple[int, ...], dtype: str = "float32") -> Iterator[Any]:
    """Yield a memory-mapped ``.npy`` array to fill; it appears at ``target`` only when done."""
    import numpy as np

    with atomic_path(target, suffix=".npy") as tmp:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        yield array
        array.flush()
        del array
