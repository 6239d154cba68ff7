"""Keep ``benchmarks/RESULTS.md`` as one section per benchmark, each replaced on its next run.

A benchmark owns its section's text, so a re-run replaces it, except for notes written by hand
between ``<!-- notes -->`` and ``<!-- /notes -->`` lines: those outlive re-runs (they are put
back at the end of the new section) until someone deletes them.
"""

from __future__ import annotations

import re
from pathlib import Path

from demitasse.io import atomic_write_text

HEADER = (
    "# Benchmark results\n\n"
    "Each section is written by the benchmark script it names, with the exact command and the "
    "machine that produced it. Machine-readable rows: `benchmarks/results/<name>.json`.\n"
)
NOTES = re.compile(r"^<!-- notes -->\n.*?^<!-- /notes -->$", re.DOTALL | re.MULTILINE)


def update_section(path: str | Path, name: str, body: str) -> None:
    """Replace (or append) the section ``name`` of a results Markdown file, atomically."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else HEADER
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    old = pattern.search(text)
    kept = [note for note in NOTES.findall(old.group(0)) if note not in body] if old else []
    section = "\n\n".join([f"{begin}\n{body.strip()}", *kept]) + f"\n{end}"
    text = pattern.sub(lambda _: section, text) if old else text.rstrip() + "\n\n" + section + "\n"
    atomic_write_text(path, text)
