"""RESULTS.md prose from templates: parts, placeholders, and the section put in place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from demitasse.errors import DataError
from lab.results_file import update_section
from lab.templates import SECTION, SectionTemplate, fill_section, join_blocks

TEMPLATE = """## Run (`${name}`)

Command: `python x.py ${arguments}`<BR>
Machine: ${machine}.${note}

${table}

<!-- part: note -->
 Means over seeds ${seeds}; costs $$0.

<!-- part: setting -->

### ${title}

${rows} rows.

""".replace("<BR>", "  ")  # a Markdown line break: two trailing spaces


def load(tmp_path: Path, text: str = TEMPLATE) -> SectionTemplate:
    path = tmp_path / "run.md"
    path.write_text(text, encoding="utf-8")
    return SectionTemplate.load(path)


def test_a_template_splits_into_the_section_and_its_parts(tmp_path: Path) -> None:
    template = load(tmp_path)
    assert list(template.parts) == [SECTION, "note", "setting"]
    assert template.placeholders() == ["name", "arguments", "machine", "note", "table"]
    assert template.placeholders("setting") == ["title", "rows"]


def test_filling_keeps_the_text_byte_for_byte(tmp_path: Path) -> None:
    template = load(tmp_path)
    note = template.fill("note", seeds="0,1")
    assert note == " Means over seeds 0,1; costs $0."
    body = template.fill(
        name="run", arguments="--seeds 0,1", machine="2 cores", note=note, table="| a |",
        unused="ignored",
    )  # fmt: skip
    assert body == (
        "## Run (`run`)\n\nCommand: `python x.py --seeds 0,1`  \n"
        "Machine: 2 cores. Means over seeds 0,1; costs $0.\n\n| a |"
    )
    # Leading and trailing blank lines of a part are layout, not text.
    assert template.fill("setting", title="Unsupervised", rows=3) == ("### Unsupervised\n\n3 rows.")


def test_join_blocks_sets_blocks_one_blank_line_apart_and_drops_empty_ones() -> None:
    assert join_blocks("### A", "", "text", "| t |") == "### A\n\ntext\n\n| t |"
    assert join_blocks() == ""


def test_a_missing_value_or_part_is_one_line_naming_the_template(tmp_path: Path) -> None:
    template = load(tmp_path)
    with pytest.raises(DataError, match=r"run\.md, part 'setting': no value for rows$"):
        template.fill("setting", title="x")
    with pytest.raises(DataError, match=r"has no part 'settings'; it has section, note, setting"):
        template.fill("settings")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("costs $5\n", "part 'section': a '$' that starts no placeholder"),
        ("a\n<!-- part: x -->\nb\n<!-- part: x -->\nc\n", "names the part 'x' twice"),
    ],
)
def test_a_bad_template_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DataError, match=re.escape(message)):
        load(tmp_path, text)


def test_a_missing_template_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^cannot read the template .*none\.md: .*No such file"):
        SectionTemplate.load(tmp_path / "none.md")


def test_fill_section_replaces_only_its_own_page_and_index_line(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    update_section(results, "other", "## Other\n\nkept")
    update_section(results, "run", "## Run (`run`)\n\nold figures")
    template = load(tmp_path)
    values = {"name": "run", "arguments": "", "machine": "m", "note": "", "table": "| new |"}
    body = fill_section(results, "run", template, **values)
    index = results.read_text(encoding="utf-8")
    assert "<!-- BEGIN run -->\n- [Run (`run`)](results/run.md)\n<!-- END run -->" in index
    assert "figures" not in index and index.index("BEGIN other") < index.index("BEGIN run")
    page = (tmp_path / "results" / "run.md").read_text(encoding="utf-8")
    assert body.strip() in page and "old figures" not in page
    assert "kept" in (tmp_path / "results" / "other.md").read_text(encoding="utf-8")
    assert {p.name for p in tmp_path.iterdir()} == {"RESULTS.md", "run.md", "results"}
    assert {p.name for p in (tmp_path / "results").iterdir()} == {"run.md", "other.md"}


def test_a_page_links_from_its_own_folder(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    body = "## Plot\n\n![a](results/a.png) [doc](../docs/x.md) [web](https://x.org) [h](#top)"
    page = update_section(results, "plot", body).read_text(encoding="utf-8")
    assert "![a](a.png) [doc](../../docs/x.md) [web](https://x.org) [h](#top)" in page


def test_hand_written_notes_outlive_a_re_run(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    page = update_section(results, "bench", "Command: `run`\n\n| a |\n|---|\n| 1 |")
    text = page.read_text()
    note = "<!-- notes -->\nNote (by hand): the first run was on a loaded machine.\n<!-- /notes -->"
    page.write_text(text.replace("| 1 |\n", "| 1 |\n\n" + note + "\n"))
    update_section(results, "bench", "Command: `run`\n\n| a |\n|---|\n| 2 |")
    text = page.read_text()
    assert "| 2 |" in text and "| 1 |" not in text
    assert text.count(note) == 1 and text.index("| 2 |") < text.index(note)
    update_section(results, "bench", "Command: `run`\n\n| a |\n|---|\n| 3 |")
    assert page.read_text().count(note) == 1


def test_every_link_of_the_results_index_and_its_pages_resolves() -> None:
    benchmarks = Path(__file__).resolve().parents[2] / "benchmarks"
    pages = [benchmarks / "RESULTS.md", *sorted((benchmarks / "results").glob("*.md"))]
    broken = [
        (page.name, target)
        for page in pages
        for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
        if not re.match(r"^[a-z]+:|^#", target) and not (page.parent / target).exists()
    ]
    assert broken == []
    assert len((benchmarks / "RESULTS.md").read_bytes()) < 30 * 1024


def test_every_results_page_is_generated_by_a_benchmark_script_named_on_it() -> None:
    """RESULTS.md links one generated page per benchmark: each page carries the marker its
    writer puts first and names the script (``benchmarks/<script>.py``) that wrote it, and
    every page the index links exists."""
    from tests.benchmarks_lab.conftest import BENCHMARKS

    pages = sorted((BENCHMARKS / "results").glob("*.md"))
    assert pages
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert text.startswith("<!-- generated by the "), page.name
        scripts = re.findall(r"(?:benchmarks/|python )([a-z_0-9]+)\.py", text)
        assert scripts and (BENCHMARKS / f"{scripts[0]}.py").is_file(), page.name
    index = (BENCHMARKS / "RESULTS.md").read_text(encoding="utf-8")
    linked = re.findall(r"\]\((results/[^)]+\.md)\)", index)
    assert linked and all((BENCHMARKS / link).is_file() for link in linked)
