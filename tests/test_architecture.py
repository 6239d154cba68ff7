"""The import graph of ``src/demitasse`` goes one way: no cycle between its units, and no unit
reaches into another's private modules or names.

A unit is a subpackage (``demitasse.compress``) or a top-level module (``demitasse.io``,
``demitasse.model``). Every import counts, including those inside functions and under
``TYPE_CHECKING``: a lazy import is still a dependency. The package's ``__init__`` and
``__main__`` sit above everything and may import anything.
"""

from __future__ import annotations

import ast
from collections import defaultdict, deque
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import demitasse

PACKAGE_DIR = Path(demitasse.__file__).resolve().parent


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (the submodule, when a ``from`` import names one)
    name: str | None  # the imported name, when it is not a module
    line: int

    def __str__(self) -> str:
        what = self.target if self.name is None else f"{self.target}.{self.name}"
        return f"{self.source} (line {self.line}) imports {what}"


def module_names(package_dir: Path) -> dict[Path, str]:
    """Dotted name of every module file under ``package_dir`` (a package is its __init__)."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[path] = ".".join(parts)
    return names


def _imported_module(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(path: Path, module: str, known: set[str]) -> list[Import]:
    """Every import statement anywhere in ``path``'s syntax tree, with relative imports
    resolved and ``from package import submodule`` read as an import of the submodule."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _imported_module(node, module, path.name == "__init__.py")
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in known:
                    found.append(Import(module, submodule, None, node.lineno))
                else:
                    found.append(Import(module, target, alias.name, node.lineno))
    return found


def package_imports(package_dir: Path) -> list[Import]:
    """The imports between modules of the package at ``package_dir`` (third-party ones left
    out), except those of its ``__init__`` and ``__main__``, which may import anything."""
    package = package_dir.name
    names = module_names(package_dir)
    exempt = {package, f"{package}.__main__"}
    found = []
    for path, module in names.items():
        if module in exempt:
            continue
        found += [
            imp
            for imp in imports_of(path, module, set(names.values()))
            if imp.target == package or imp.target.startswith(f"{package}.")
        ]
    return found


def unit_of(module: str) -> str:
    """``pkg.sub.mod`` → ``pkg.sub``; a top-level module is its own unit."""
    return ".".join(module.split(".")[:2])


def unit_edges(imports: list[Import]) -> dict[str, dict[str, list[Import]]]:
    """unit → units it imports → the imports that make the edge."""
    edges: dict[str, dict[str, list[Import]]] = defaultdict(lambda: defaultdict(list))
    for imp in imports:
        source, target = unit_of(imp.source), unit_of(imp.target)
        if source != target:
            edges[source][target].append(imp)
    return edges


def _strongly_connected(edges: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan's algorithm; the graph has a few dozen nodes, so recursion is fine."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges.get(node, {})):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(
    start: str, members: set[str], edges: dict[str, dict[str, list[Import]]]
) -> list[str]:
    """The shortest path start → … → start inside one strongly connected component (breadth
    first, so the cycle shown is the simplest one to read)."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(edges.get(node, {})):
            if succ == start:
                path = [node]
                while (before := parent[path[-1]]) is not None:
                    path.append(before)
                return [*reversed(path), start]
            if succ in members and succ not in parent:
                parent[succ] = node
                queue.append(succ)
    raise AssertionError(f"{start} is on no cycle of {sorted(members)}")


def find_cycles(edges: dict[str, dict[str, list[Import]]]) -> list[str]:
    """One readable cycle per group of units that import each other, with the import behind
    each step, e.g. ``a -> b -> a (a.x (line 3) imports b.y; b.y (line 9) imports a.z)``."""
    cycles = []
    for component in _strongly_connected(edges):
        if len(component) < 2:
            continue
        cycle = _shortest_cycle(component[0], set(component), edges)
        steps = [edges[a][b][0] for a, b in pairwise(cycle)]
        cycles.append(f"{' -> '.join(cycle)} ({'; '.join(map(str, steps))})")
    return cycles


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def private_imports(imports: list[Import]) -> list[Import]:
    """Imports of another unit's private module (a path component with one leading
    underscore) or private name."""
    return [
        imp
        for imp in imports
        if unit_of(imp.source) != unit_of(imp.target)
        and (any(map(_private, imp.target.split("."))) or (imp.name and _private(imp.name)))
    ]


# ---- the package itself ------------------------------------------------------------------------


def test_no_cycle_between_the_units_of_demitasse() -> None:
    cycles = find_cycles(unit_edges(package_imports(PACKAGE_DIR)))
    assert not cycles, "import cycles between units:\n" + "\n".join(cycles)


def test_no_unit_imports_a_private_module_or_name_of_another() -> None:
    found = private_imports(package_imports(PACKAGE_DIR))
    assert not found, "private imports across units:\n" + "\n".join(map(str, found))


def test_the_graph_holds_the_dependencies_the_layout_is_built_on() -> None:
    # Guards the two tests above against passing on a graph that lost its edges.
    edges = unit_edges(package_imports(PACKAGE_DIR))
    assert {"demitasse.encoders", "demitasse.static"} <= set(edges["demitasse.loading"])
    assert "demitasse.encoders" in edges["demitasse.static"]
    assert "demitasse.static" not in edges["demitasse.encoders"]
    assert "demitasse.persistence" in edges["demitasse.compress"]
    # A lazy import inside a function counts: the model loads its encoder only when asked.
    model_loading = edges["demitasse.model_encoder"]["demitasse.loading"]
    assert any(imp.source == "demitasse.model_encoder" for imp in model_loading)


# ---- the checks catch what they should, on a planted package -----------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


PLANTED = {
    "pkg/__init__.py": "from pkg.alpha import one\nfrom pkg.beta._hidden import secret\n",
    "pkg/__main__.py": "from pkg.gamma import three\n",
    "pkg/alpha/__init__.py": "",
    "pkg/alpha/one.py": "import os\n\n\ndef late():\n    from ..beta import two\n",
    "pkg/alpha/_inner.py": "",
    "pkg/alpha/uses_inner.py": "from pkg.alpha._inner import x\nfrom ._inner import y\n",
    "pkg/beta/__init__.py": "",
    "pkg/beta/_hidden.py": "secret = 1\n",
    "pkg/beta/two.py": (
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import pkg.gamma.three\n"
    ),
    "pkg/gamma/__init__.py": "",
    "pkg/gamma/three.py": "from pkg.alpha.one import _helper\nfrom pkg import beta\n",
    "pkg/top.py": "import pkg.beta._hidden as hidden\n",
}


def test_a_planted_cycle_is_found_and_named_through_lazy_relative_and_type_checking_imports(
    tmp_path: Path,
) -> None:
    _write(tmp_path, PLANTED)
    cycles = find_cycles(unit_edges(package_imports(tmp_path / "pkg")))
    assert len(cycles) == 1
    assert cycles[0].startswith("pkg.alpha -> pkg.beta -> pkg.gamma -> pkg.alpha (")
    assert "pkg.alpha.one (line 5) imports pkg.beta.two" in cycles[0]
    assert "pkg.beta.two (line 4) imports pkg.gamma.three" in cycles[0]


def test_the_package_init_and_main_may_import_anything(tmp_path: Path) -> None:
    _write(tmp_path, PLANTED)
    imports = package_imports(tmp_path / "pkg")
    assert {imp.source for imp in imports} == {
        "pkg.alpha.one",
        "pkg.alpha.uses_inner",
        "pkg.beta.two",
        "pkg.gamma.three",
        "pkg.top",
    }


def test_private_modules_and_names_are_refused_across_units_only(tmp_path: Path) -> None:
    _write(tmp_path, PLANTED)
    found = sorted(map(str, private_imports(package_imports(tmp_path / "pkg"))))
    assert found == [
        "pkg.gamma.three (line 1) imports pkg.alpha.one._helper",
        "pkg.top (line 1) imports pkg.beta._hidden",
    ]


def test_two_units_importing_each_other_make_a_two_step_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/model.py": "from pkg.evaluation.records import Record\n",
            "pkg/evaluation/__init__.py": "",
            "pkg/evaluation/records.py": "from pkg import model\n",
        },
    )
    assert find_cycles(unit_edges(package_imports(tmp_path / "pkg"))) == [
        "pkg.evaluation -> pkg.model -> pkg.evaluation ("
        "pkg.evaluation.records (line 1) imports pkg.model; "
        "pkg.model (line 1) imports pkg.evaluation.records.Record)"
    ]
