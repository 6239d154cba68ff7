"""Experiment grids: TOML read into a schema dataclass, every bad file a one-line error."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from demitasse.errors import DataError
from lab import load_grid


@dataclass(frozen=True)
class Variant:
    description: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Grid:
    dims: list[int]
    weight: float
    variants: dict[str, Variant]
    targets: dict[int, float] = field(default_factory=dict)
    stages: tuple[int, ...] = (128, 64)
    note: str | None = None

    def __post_init__(self) -> None:
        if not self.variants:
            raise ValueError("'variants' must name at least one variant")


GOOD = """
dims = [256, 64]
weight = 5              # an integer where a float is due becomes a float
targets = { 32 = 1.5, 8 = 4.0 }

[variants.nested-0-5]
description = "as `nested`, at half the rate"
options = { matryoshka_dims = [128, 64, 32], inner_rate = 0.5, exit_heads = true }

[variants."paper (reference)"]
description = "the paper's objective"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_grid_reads_into_its_schema_in_file_order(tmp_path: Path) -> None:
    grid = load_grid(write(tmp_path, GOOD), Grid)
    assert grid.dims == [256, 64]
    assert grid.weight == 5.0 and isinstance(grid.weight, float)
    assert grid.targets == {32: 1.5, 8: 4.0}
    assert list(grid.variants) == ["nested-0-5", "paper (reference)"]
    nested = grid.variants["nested-0-5"]
    assert nested.options == {
        "matryoshka_dims": [128, 64, 32],
        "inner_rate": 0.5,
        "exit_heads": True,
    }
    assert grid.variants["paper (reference)"] == Variant("the paper's objective")
    assert grid.stages == (128, 64) and grid.note is None


def test_tuples_and_optional_keys_are_read_when_given(tmp_path: Path) -> None:
    text = GOOD.replace("weight = 5 ", 'stages = [32, 16]\nnote = "x"\nweight = 5 ')
    grid = load_grid(write(tmp_path, text), Grid)
    assert grid.stages == (32, 16) and grid.note == "x"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dims = [256", "is not valid TOML"),
        (GOOD.replace("weight = 5", "weigth = 5"), "unknown key 'weigth'"),
        (GOOD.replace("weight = 5", ""), "the file lacks the key 'weight'"),
        (GOOD.replace("dims = [256, 64]", 'dims = [256, "64"]'), "dims[1] must be an integer"),
        (GOOD.replace("dims = [256, 64]", "dims = 256"), "dims must be an array, got 256"),
        (GOOD.replace("weight = 5", "weight = true"), "weight must be a number, got True"),
        (GOOD.replace("32 = 1.5", "x32 = 1.5"), "targets.x32: the key must be an integer"),
        (
            GOOD.replace('description = "the paper', 'descripton = "the paper'),
            "unknown key 'variants.paper (reference).descripton'",
        ),
        (
            GOOD.replace("inner_rate = 0.5, exit_heads = true", "inner_rate = 0.5").replace(
                "options = {", "options = 3 #"
            ),
            "variants.nested-0-5.options must be a table, got 3",
        ),
        ("dims = []\nweight = 1\n[variants]\n", "the file: 'variants' must name at least one"),
    ],
)
def test_a_bad_grid_is_one_line_naming_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DataError) as caught:
        load_grid(path, Grid)
    shown = str(caught.value)
    assert message in shown
    assert str(path) in shown
    assert "\n" not in shown


def test_a_missing_grid_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^cannot read the grid .*absent\.toml: .*No such file"):
        load_grid(tmp_path / "absent.toml", Grid)


def test_a_schema_type_grids_cannot_hold_is_a_programming_error(tmp_path: Path) -> None:
    @dataclass
    class Odd:
        value: int | str

    with pytest.raises(TypeError, match=re.escape("only 'X | None' unions")):
        load_grid(write(tmp_path, "value = 1\n"), Odd)
