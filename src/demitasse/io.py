"""Safe outputs: nothing the user already has is lost, whatever they type or interrupt.

Every file and folder demitasse writes goes through here:

- A file is written to a temporary sibling and renamed over the target, so an interrupted run
  leaves the previous file or the new one, never half of one. Only a regular file (or nothing)
  is replaced: a folder, a symbolic link or a device under the target name is refused. A
  command's output, a file or a folder, is never one of its inputs, inside one or holding one
  (:func:`check_not_input`, from :mod:`demitasse.io_targets`); a file replaces one only if
  the user says so (``--overwrite``).
- A folder output is built in a temporary sibling and swapped in. It replaces only an empty
  folder or an earlier output of the same kind whose every file demitasse wrote there, as its
  marker (:data:`MARKER`, written last) lists them with sizes and SHA-256: else one line names
  the first other file (the user's notes, a forged marker's folder, a changed file), before
  the work and again just before the swap, and nothing is touched.
- The swap (old aside, new in, old deleted) runs with SIGINT, SIGTERM and SIGHUP deferred, so
  an interruption takes effect before the swap (the old output stays) or after it (the new one
  is complete). :func:`handle_termination` makes SIGTERM and SIGHUP interrupt like Ctrl-C, so
  temporary files are removed on every one of them.
- Temporaries are named ``.dt-<hash of the target name>-<pid>-<machine>-…`` (any valid target
  name works). The next run on a target removes what killed runs (``kill -9``) left beside it
  once their process is gone, and puts back an output a killed swap had moved aside. Results
  get the permissions a plain ``open``/``mkdir`` would give (umask respected).
- An error raised while an output is written (a full disk, a library's complaint, a folder
  that cannot be written to) names the user's target, never the hidden temporary.
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
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from demitasse.errors import DemitasseError
from demitasse.io_targets import check_not_input

#: Written last into every folder output: ``{"kind", "complete": true, "files": {name: [size,
#: sha256]}, "links": {name: target}, "folders": [name, ...]}``, names relative with ``/``.
MARKER = ".demitasse-output.json"
_HELD_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: A leftover temporary of another machine (a shared disk), or of a version that named no
#: process, is removed only once nothing in it changed for this long.
STALE_SECONDS = 24 * 3600
_MACHINE = hashlib.sha1(socket.gethostname().encode("utf-8", "surrogatepass")).hexdigest()[:8]
#: Temporaries this process is writing now (another thread's are not leftovers).
_WRITING: set[str] = set()
#: SHA-256 of files already read, by (device, inode, size, mtime, ctime): a folder checked
#: before the work and again before the swap is read once.
_DIGESTS: dict[tuple[int, ...], str] = {}


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
                    _WRITING.discard(str(path))
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


# ---- temporaries: whose they are, and what killed runs left --------------------------------


def _target_tag(target: Path) -> str:
    # A hash of the name, not the name: a 250-byte target name must still leave room.
    return ".dt-" + hashlib.sha1(target.name.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def _is_stale(path: Path, rest: str) -> bool:
    """Whether the temporary ``path`` (``rest``: its name after the target's tag) is a killed
    run's: its process is gone, or it is another machine's or unnamed and long untouched."""
    named = re.fullmatch(r"-(\d+)-([0-9a-f]{8})-.+\.(?:tmp|old)", rest, re.DOTALL)
    if named is None and re.fullmatch(r"[a-z0-9_]{8}.*\.(?:tmp|old)", rest, re.DOTALL) is None:
        return False  # not a temporary's name
    if named is not None and named[2] == _MACHINE:
        pid = int(named[1])
        if pid == os.getpid():
            return str(path) not in _WRITING
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, OverflowError):
            return True  # no such process
        except OSError:
            pass  # PermissionError: it runs, as another user
        return False
    try:  # when anything in it (a file, or a folder and all it holds) last changed
        changed = [path.lstat().st_mtime] + [
            (Path(top) / name).lstat().st_mtime
            for top, folders, files in os.walk(path)
            for name in folders + files
        ]
    except OSError:
        return False
    return time.time() - max(changed) > STALE_SECONDS


def clear_leftovers(target: str | Path) -> None:
    """Remove the temporaries that killed runs (``kill -9``, a power cut) left beside
    ``target``, those of runs still going left alone; an earlier output that a swap killed
    midway had moved aside is put back first."""
    target = Path(target)
    tag = _target_tag(target)
    try:
        with os.scandir(target.parent) as entries:
            names = sorted(e.name for e in entries if e.name.startswith(tag))
    except OSError:
        return
    stale = [target.parent / n for n in names if _is_stale(target.parent / n, n[len(tag) :])]
    # Only from a swap killed midway, its new output beside: else it may be half deleted.
    runs = {p.name.rsplit("-", 1)[0] for p in stale if p.suffix == ".tmp" and p.name.count("-") > 1}
    aside = [p for p in stale if p.suffix == ".old" and p.name.rsplit("-", 1)[0] in runs]
    if aside and not os.path.lexists(target):
        with signals_held(), contextlib.suppress(OSError):
            aside[-1].replace(target)
            stale.remove(aside[-1])
    if stale:
        remove_temporaries(*stale)


@contextlib.contextmanager
def _named_after(target: Path) -> Iterator[None]:
    """Errors raised in the block name ``target`` where they named one of its hidden
    temporaries: those mean nothing to the user, and are gone by the time they read it."""
    tag = _target_tag(target)
    hidden = re.compile(re.escape(tag) + r"(?:-\d+-[0-9a-f]{8}-)?\w{8}(?:\.\w+)*?\.(?:tmp|old)")

    def renamed(value: object) -> object:
        return hidden.sub(lambda _: target.name, value) if isinstance(value, str) else value

    try:
        yield
    except Exception as exc:
        if any(isinstance(arg, str) and tag in arg for arg in exc.args):
            with contextlib.suppress(AttributeError, TypeError):
                exc.args = tuple(renamed(arg) for arg in exc.args)
        for attribute in ("filename", "filename2") if isinstance(exc, OSError) else ():
            value = getattr(exc, attribute, None)
            if isinstance(value, str | os.PathLike):
                setattr(exc, attribute, renamed(os.fspath(value)))
        raise


def _temporary(target: Path, suffix: str, folder: bool) -> Path:
    """A new temporary file or folder beside ``target``, noted as being written. Called with
    signals held, and assigned before they are let through: else nobody would remove it."""
    maker = tempfile.mkdtemp if folder else tempfile.mkstemp
    prefix = f"{_target_tag(target)}-{os.getpid()}-{_MACHINE}-"  # whose run: see the module doc
    made = maker(dir=target.parent, prefix=prefix, suffix=suffix)
    if isinstance(made, tuple):
        os.close(made[0])
        made = made[1]
    _WRITING.add(made)
    return Path(made)


# ---- files -----------------------------------------------------------------------------------


def check_file_target(target: str | Path) -> Path:
    """``target`` as a Path, or a one-line error if something other than a file is there."""
    target = Path(target)
    if not target.name:
        raise DemitasseError(f"{target} is not a file name")
    clear_leftovers(target)
    if target.is_symlink():
        raise DemitasseError(f"refusing to replace {target}: it is a symbolic link")
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):
        what = "a directory" if target.is_dir() else "not a regular file"
        raise DemitasseError(f"refusing to write {target}: it is {what}")
    return target


def check_new_file(
    target: str | Path, *, overwrite: bool, inputs: Iterable[str | Path | None] = ()
) -> Path:
    """``target`` as a Path if a command's file output may be written there, else one line:
    never one of the command's ``inputs`` (files or folders, a file in one neither), and an
    existing file only with ``overwrite`` (the ``--overwrite`` flag)."""
    target = check_file_target(target)
    check_not_input(target, inputs)
    if target.exists() and not overwrite:
        raise DemitasseError(
            f"refusing to replace {target}: the file exists; pass --overwrite to replace it"
        )
    return target


@contextlib.contextmanager
def atomic_path(target: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it replaces ``target``."""
    target = check_file_target(target)
    tmp: Path | None = None
    try:
        with _named_after(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            with signals_held():
                tmp = _temporary(target, suffix + ".tmp", folder=False)
            yield tmp
            tmp.chmod(0o666 & ~_umask())  # mkstemp makes 0600 files
            with signals_held():
                tmp.replace(target)
                _WRITING.discard(str(tmp))
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


# ---- folders: the marker, and what it lets a new output replace ------------------------------


def _digest(path: Path, info: os.stat_result) -> str:
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if key not in _DIGESTS:
        if len(_DIGESTS) > 1 << 17:  # a long run (checkpoints): what it read long ago goes
            _DIGESTS.clear()
        with path.open("rb") as f:
            _DIGESTS[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _DIGESTS[key]


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as entries:
        return sorted(entries, key=lambda entry: entry.name)


def _listing(root: Path, prefix: str = "", listing: dict[str, Any] | None = None) -> dict:
    """What the marker lists: every file (size, SHA-256), link and folder under ``root``."""
    listing = listing or {"files": {}, "links": {}, "folders": []}
    for entry in _entries(root):
        name, path = prefix + entry.name, Path(entry.path)
        if entry.is_symlink():
            listing["links"][name] = str(path.readlink())
        elif entry.is_dir():
            listing["folders"].append(name)
            _listing(path, name + "/", listing)
        elif name != MARKER:
            info = entry.stat(follow_symlinks=False)
            listing["files"][name] = [info.st_size, _digest(path, info)]
    return listing


def _write_marker(root: Path, kind: str) -> None:
    marker = {"kind": kind, "complete": True, **_listing(root)}
    # ASCII escapes: a name that is not UTF-8 (kept as surrogates) goes through as well.
    (root / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="ascii")


def _read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a complete output in ``folder``, or None (none, unreadable, damaged)."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(marker, dict) or marker.get("complete") is not True:
        return None
    for key, kind in (("files", dict), ("links", dict), ("folders", list)):
        if not isinstance(marker.setdefault(key, kind()), kind):
            return None
    marker["folders"] = {name for name in marker["folders"] if isinstance(name, str)}
    return marker


def _foreign(root: Path, marker: dict[str, Any], prefix: str = "", read: bool = True) -> Any:
    """The first entry under ``root`` that ``marker`` does not list as written there just as
    it is now (None: every one is; without ``read``, sizes only). A folder holding a marker of
    its own that lists all it holds (a report written into an evaluation's) is demitasse's."""
    for entry in _entries(root):
        name, path = prefix + entry.name, Path(entry.path)
        if entry.is_symlink():
            if marker["links"].get(name) != str(path.readlink()):
                return path
        elif entry.is_dir(follow_symlinks=False):
            listed = name in marker["folders"]
            found = _foreign(path, marker, name + "/", read) if listed else path
            inner = _read_marker(path) if found is not None else None
            if found is not None and (inner is None or _foreign(path, inner, "", read)):
                return found
        elif not (name == MARKER or _written(path, entry, marker["files"].get(name), read)):
            return path
    return None


def _written(path: Path, entry: os.DirEntry[str], listed: Any, read: bool) -> bool:
    """Whether the regular file at ``path`` is the one listed: its size, then its SHA-256."""
    if not entry.is_file(follow_symlinks=False) or not isinstance(listed, list | tuple):
        return False
    info = entry.stat(follow_symlinks=False)
    same_size = len(listed) == 2 and listed[0] == info.st_size
    return same_size and (not read or listed[1] == _digest(path, info))


def _why_not_replaceable(target: Path, kind: str) -> str | None:
    """None if the existing folder ``target`` may be replaced by a ``kind`` output, else why."""
    if not any(target.iterdir()):
        return None
    marker = _read_marker(target)
    if marker is None or marker.get("kind") != kind:
        return f"it holds files that are not a demitasse {kind}"
    # Sizes first: a file of the user's is found without reading a gigabyte of weights.
    found = _foreign(target, marker, read=False) or _foreign(target, marker)
    if found is None:
        return None
    name = found.relative_to(target).as_posix()
    if any(name in marker[key] for key in ("files", "links", "folders")):
        return f"{found} changed since demitasse wrote it"
    earlier = "" if marker["files"] else " (its marker lists none: an earlier demitasse's?)"
    return f"{found} is not a file demitasse wrote there{earlier}"


def _check_directory(target: Path, kind: str, recognise: Callable[[Path], bool] | None) -> None:
    if target.is_symlink():
        raise DemitasseError(f"refusing to replace {target}: it is a symbolic link")
    if not target.exists():
        return
    if not target.is_dir():
        raise DemitasseError(f"refusing to replace {target}: it is a file, not a folder")
    with contextlib.suppress(OSError, ValueError, RecursionError, DemitasseError):
        if recognise is not None and recognise(target):
            return
    try:
        why = _why_not_replaceable(target, kind)
    except OSError as exc:
        why = f"it cannot be checked ({exc.strerror or exc})"
    if why is not None:
        raise DemitasseError(
            f"refusing to replace {target}: {why}; move your files out, or choose a new or "
            "empty folder"
        )


def check_directory_target(
    target: str | Path,
    kind: str,
    recognise: Callable[[Path], bool] | None = None,
    *,
    inputs: Iterable[str | Path | None] = (),
    nested: bool = False,
) -> Path:
    """``target`` as a Path if a ``kind`` output may be written there, else a one-line error.

    Allowed: nothing there, an empty folder, an earlier output of the same kind whose every
    file its marker lists as written there (unchanged), or a folder ``recognise`` knows to be
    demitasse's own (its cache); never one of the command's ``inputs``, inside one (unless
    ``nested``) or holding one. What killed runs left beside it is removed first.
    """
    target = Path(target)
    check_not_input(target, inputs, nested=nested)  # first: the one message that names the input
    clear_leftovers(target)
    _check_directory(target, kind, recognise)
    return target


@contextlib.contextmanager
def atomic_directory(
    target: str | Path,
    *,
    kind: str,
    recognise: Callable[[Path], bool] | None = None,
    inputs: Iterable[str | Path | None] = (),
) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success it becomes ``target`` (see the module doc).
    ``inputs``: what the output may not be, lie inside or hold (:func:`check_not_input`).

    The marker is written last, so a folder that lacks it was never completed.
    """
    target = check_directory_target(target, kind, recognise, inputs=inputs)
    tmp: Path | None = None
    old: Path | None = None
    try:
        with _named_after(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            with signals_held():
                tmp = _temporary(target, ".tmp", folder=True)
            yield tmp
            _open_permissions(tmp)
            _write_marker(tmp, kind)
            _check_directory(target, kind, recognise)  # nothing of the user's came meanwhile
            with signals_held():  # the old output goes in the same held block: no gap to cut
                old = _swap(tmp, target)
                tmp = None
                remove_temporaries(old)
                old = None
    finally:
        remove_temporaries(tmp, old)


def _swap(tmp: Path, target: Path) -> Path | None:
    """Move ``target`` aside (returned) and ``tmp`` in; on failure the old one goes back."""
    old = None
    if target.exists():
        old = _temporary(target, ".old", folder=True)
        old.rmdir()
        target.replace(old)
    try:
        tmp.replace(target)
    except OSError:
        if old is not None:  # the user's output goes back where it was
            old.replace(target)
            _WRITING.discard(str(old))
        raise
    _WRITING.discard(str(tmp))
    return old


def _open_permissions(root: Path) -> None:
    """Give a finished output the permissions plain ``mkdir``/``open`` would have given:
    ``mkdtemp``, ``mkstemp`` and some libraries make them owner-only."""
    umask = _umask()
    root.chmod(0o777 & ~umask)
    for path in root.rglob("*"):
        if not path.is_symlink():
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
