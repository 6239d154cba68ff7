"""Every benchmark script imports and answers ``--help``: a script nobody runs must not rot."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

BENCHMARKS = REPO / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_benchmark_script_answers_help(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # scripts import their neighbours
    monkeypatch.setattr(sys, "argv", [script.name, "--help"])
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered as importlib's recipe does: dataclasses (a script's grid schema) look their
    # module up there.
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as done:
        module.main()
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out


@dataclass(frozen=True)
class Widths:
    dims: list[int]


def test_a_bad_grid_or_template_ends_a_script_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _common

    monkeypatch.setattr(_common, "HERE", tmp_path)
    (tmp_path / "grids").mkdir()
    (tmp_path / "grids" / "widths.toml").write_text('dims = [256, "64"]\n', encoding="utf-8")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "widths.md").write_text("costs $5\n", encoding="utf-8")
    for load in (lambda: _common.grid("widths", Widths), lambda: _common.template("widths")):
        with pytest.raises(SystemExit) as done:
            load()
        assert done.value.code == 2
        message = capsys.readouterr().err
        assert message.startswith("error: ") and message.count("\n") == 1
