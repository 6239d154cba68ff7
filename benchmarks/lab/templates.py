"""Benchmark prose from Markdown templates, so a script computes figures and never writes text.

A template file is the Markdown of one ``RESULTS.md`` section with ``string.Template``
placeholders (``$name`` or ``${name}``; ``$$`` is a dollar sign). Text that appears only in
some runs (a table for one setting, a sentence for one option) is a *part*: it follows a line
``<!-- part: NAME -->`` and runs to the next such line. The text before the first part line
is the section itself. Leading and trailing line breaks of every part are dropped, so parts
can be set apart by blank lines in the file; :func:`join_blocks` puts rendered parts back
together with one blank line between them, as Markdown paragraphs are written.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from demitasse.errors import DataError, one_line
from lab.results_file import update_section

#: The name of the text before the first part line: the section itself.
SECTION = "section"
_PART_LINE = re.compile(r"^<!-- part: ([A-Za-z_][A-Za-z0-9_]*) -->$", re.MULTILINE)


@dataclass(frozen=True)
class SectionTemplate:
    """The parts of one template file, each a ``string.Template``."""

    path: Path
    parts: Mapping[str, string.Template]

    @classmethod
    def load(cls, path: str | Path) -> SectionTemplate:
        """Read and check a template file (one-line DataError for a bad one)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read the template {path}: {one_line(exc)}") from None
        pieces = _PART_LINE.split(text)
        names = [SECTION, *pieces[1::2]]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise DataError(f"template {path} names the part {duplicated[0]!r} twice")
        parts = {
            name: string.Template(body.strip("\n"))
            for name, body in zip(names, pieces[::2], strict=True)
        }
        for name, template in parts.items():
            if not template.is_valid():
                raise DataError(
                    f"template {path}, part {name!r}: a '$' that starts no placeholder "
                    "(write '$$' for a dollar sign)"
                )
        return cls(path, parts)

    def placeholders(self, part: str = SECTION) -> list[str]:
        """The names ``part`` needs, in the order they first appear."""
        return list(dict.fromkeys(self._part(part).get_identifiers()))

    def fill(self, part: str = SECTION, /, **values: object) -> str:
        """``part`` with every placeholder replaced by ``str(value)``; values it does not
        use are ignored, so one set of run facts can fill several parts."""
        missing = [name for name in self.placeholders(part) if name not in values]
        if missing:
            raise DataError(
                f"template {self.path}, part {part!r}: no value for {', '.join(missing)}"
            )
        return self._part(part).substitute(values)

    def _part(self, part: str) -> string.Template:
        if part not in self.parts:
            raise DataError(
                f"template {self.path} has no part {part!r}; it has {', '.join(self.parts)}"
            )
        return self.parts[part]


def join_blocks(*blocks: str) -> str:
    """Markdown blocks (paragraphs, tables, parts) one blank line apart; empty ones left out."""
    return "\n\n".join(block for block in blocks if block)


def fill_section(
    results: str | Path, name: str, template: SectionTemplate, /, **values: object
) -> str:
    """Fill ``template``'s section, put it in place of section ``name`` of the results file
    (atomically, see :func:`~lab.results_file.update_section`) and return it."""
    body = template.fill(SECTION, **values)
    update_section(results, name, body)
    return body
