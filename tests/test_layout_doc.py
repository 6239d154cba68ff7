"""docs/layout.md is checked against the code: it names every unit of ``src/demitasse`` (a
subpackage or a top-level module), nothing that is not one, and lists them so that each imports
only units listed above it (or on its own line), as the import graph says."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_architecture import PACKAGE_DIR, package_imports, unit_edges

LAYOUT = Path(__file__).resolve().parents[1] / "docs" / "layout.md"
#: An entry line of the layout's tree: two spaces, then names ending in ``.py`` or ``/``.
ENTRY = re.compile(r"^  (?P<names>[\w./]+(?:, [\w./]+)*)\s")


def documented_units() -> dict[str, int]:
    """Each unit the layout names → the position of its line (units on one line share it)."""
    block = LAYOUT.read_text(encoding="utf-8").split("```")[1]
    positions: dict[str, int] = {}
    for line in block.splitlines():
        match = ENTRY.match(line)
        if not match:
            continue
        for name in match["names"].split(", "):
            unit = "demitasse." + name.removesuffix("/").removesuffix(".py")
            positions[unit] = len(set(positions.values()))
    return positions


def package_units() -> set[str]:
    units = {f"demitasse.{p.name}" for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()}
    units |= {
        f"demitasse.{p.stem}"
        for p in PACKAGE_DIR.glob("*.py")
        if p.stem not in ("__init__", "__main__")
    }
    return units


def test_the_layout_names_every_unit_and_only_units() -> None:
    documented, actual = set(documented_units()), package_units()
    assert not actual - documented, f"units missing from docs/layout.md: {actual - documented}"
    assert not documented - actual, f"docs/layout.md names no such unit: {documented - actual}"


def test_each_unit_imports_only_units_listed_above_it() -> None:
    position = documented_units()
    wrong = [
        f"{source} imports {target} (listed below it): {imports[0]}"
        for source, targets in unit_edges(package_imports(PACKAGE_DIR)).items()
        for target, imports in targets.items()
        if source in position and target in position and position[target] > position[source]
    ]
    assert not wrong, "docs/layout.md's order breaks the import graph:\n" + "\n".join(wrong)
