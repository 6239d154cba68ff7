"""The shape the code keeps (issues #27, #48): no module in ``src/`` over 600 lines, no
function in ``src/`` or the benchmarks' lab (``benchmarks/lab/``) over 60 lines and no
benchmark ``main()`` over 80, counted from ``def`` to the last line of the body.

Ruff bounds complexity (C901) and statement count (PLR0915), but a function can pass both and
still run to pages of keyword arguments and f-string prose; its length is what a reader meets.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

MAX_FUNCTION_LINES = 60
MAX_BENCHMARK_MAIN_LINES = 80

SOURCES = sorted((REPO / "src" / "demitasse").rglob("*.py"))
LAB = sorted((REPO / "benchmarks" / "lab").rglob("*.py"))
BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.AST, scope: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method, nested ones too, with its dotted name (``Class.method``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{scope}{node.name}", node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from _functions(node, f"{scope}{node.name}.")
        else:
            yield from _functions(node, scope)


def _length(node: Function) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _describe(path: Path, name: str, node: Function) -> str:
    return f"{path.relative_to(REPO)}:{node.lineno} {name} ({_length(node)} lines)"


def test_the_checks_see_the_package_and_every_benchmark_main() -> None:
    # A wrong folder would make the two tests below pass over nothing.
    names = {name for path in SOURCES for name, _ in _functions(_parse(path))}
    assert {"build_parser", "CompressedModel.fit", "evaluate_grid"} <= names
    lab = {name for path in LAB for name, _ in _functions(_parse(path))}
    assert {"load_grid", "run_in_workers", "SectionTemplate.fill"} <= lab
    scripts = [path for path in BENCHMARKS if not path.name.startswith("_")]
    assert scripts
    for script in scripts:
        assert any(
            isinstance(node, ast.FunctionDef) and node.name == "main"
            for node in _parse(script).body
        ), f"{script.name} has no main()"


def test_no_function_in_src_or_the_lab_is_longer_than_60_lines() -> None:
    too_long = [
        _describe(path, name, node)
        for path in SOURCES + LAB
        for name, node in _functions(_parse(path))
        if _length(node) > MAX_FUNCTION_LINES
    ]
    assert not too_long, (
        f"functions over {MAX_FUNCTION_LINES} lines; split them into named pieces:\n  "
        + "\n  ".join(too_long)
    )


def test_no_benchmark_main_is_longer_than_80_lines() -> None:
    too_long = [
        _describe(path, node.name, node)
        for path in BENCHMARKS
        for node in _parse(path).body
        if isinstance(node, ast.FunctionDef)
        and node.name == "main"
        and _length(node) > MAX_BENCHMARK_MAIN_LINES
    ]
    assert not too_long, (
        f"benchmark main()s over {MAX_BENCHMARK_MAIN_LINES} lines; move the work into library "
        "functions:\n  " + "\n  ".join(too_long)
    )


MAX_MODULE_LINES = 600


def test_no_module_in_src_is_longer_than_600_lines() -> None:
    """Issue #48: a module a newcomer can read; a longer one is split by what its parts do."""
    long = {
        str(path.relative_to(REPO)): n
        for path in SOURCES
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
