"""The ``demitasse`` executable's first instructions: signals handled, and held back during
imports, before the command line's modules load.

Ctrl-C raises KeyboardInterrupt wherever Python is. Inside the initialisation of an extension
module that calls back into Python (pybind11 or C++ code of scipy, torch, …) that exception
crosses C++ and the process aborts with SIGABRT before any cleanup runs, and a SIGTERM or SIGHUP
that comes before the handlers are in place kills the process outright. Commands import their
heavy libraries lazily, and the command line's own modules take a second to import: here every
import holds the signals back, and a signal is delivered the moment the import is done, in
Python, where the command's cleanup handles it as any other.
"""

from __future__ import annotations

import builtins
import os
import signal
import sys
import threading
from typing import Any

from demitasse.io import handle_termination, signals_held

_original_import = builtins.__import__
_depth = threading.local()


def _held_import(*args: Any, **kwargs: Any) -> Any:
    if getattr(_depth, "value", 0):  # inside an import already held: nothing more to do
        return _original_import(*args, **kwargs)
    _depth.value = 1
    try:
        with signals_held():
            return _original_import(*args, **kwargs)
    finally:
        _depth.value = 0


def hold_signals_during_imports() -> None:
    """From now on, every import in this process holds the signals back until it is done."""
    builtins.__import__ = _held_import


def run() -> int:
    """The ``demitasse`` executable (:func:`demitasse.cli.main.run` once its modules load)."""
    handle_termination()
    hold_signals_during_imports()
    try:
        from demitasse.cli.main import run as run_command_line
    except KeyboardInterrupt as exc:  # before any command began: nothing to clean up
        signum = getattr(exc, "signum", signal.SIGINT)
        print(f"demitasse: interrupted ({signal.Signals(signum).name}) while starting",
              file=sys.stderr, flush=True)  # fmt: skip
        os._exit(128 + signum)  # as demitasse.cli.main.run leaves after an interruption
    return run_command_line()
