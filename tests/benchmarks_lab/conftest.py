"""The lab (``benchmarks/lab``) is no part of the installed package: its tests import it from
``benchmarks/``, as the scripts do when run as ``python benchmarks/<name>.py``.

This folder is not called ``lab``: ``tests/`` is no package, so pytest imports each of its
folders as a top-level package, and a ``tests/lab`` would hide the lab itself."""

from __future__ import annotations

import sys

from tests.conftest import REPO

BENCHMARKS = REPO / "benchmarks"

# Appended, not prepended: the scripts beside ``lab`` (``static.py``, ``serve.py``, ...) must
# not shadow a package of the same name.
if str(BENCHMARKS) not in sys.path:
    sys.path.append(str(BENCHMARKS))
