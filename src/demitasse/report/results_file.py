"""Keep ``benchmarks/RESULTS.md`` as one section per benchmark, each replaced on its next run."""

from __future__ import annotations

import re
from pathlib import Path

from demitasse.io import atomic_write_text

HEADER = (
    "# Benchmark results\n\n"
    "Each section is written by the benchmark script it names, with the exact command and the "
    "machine that produced it. Machine-readable rows: `benchmarks/results/<name>.json`.\n"
)


def update_section(path: str | Path, name: str, body: str) -> None:
    """Replace (or append) the section ``name`` of a results Markdown file, atomically."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else HEADER
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    section = f"{begin}\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    atomic_write_text(path, text)
