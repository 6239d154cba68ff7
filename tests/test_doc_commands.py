"""Every ``demitasse`` command line in the README and docs/ parses with the real parser: a flag
that does not exist, or a value outside a flag's choices, fails here instead of in a reader's
terminal.

The lines are read from fenced code blocks of any language. Lines ending in a backslash are
joined, a leading ``$ `` and leading ``NAME=value`` assignments are dropped, and a ``#``
comment, or a shell pipe, ``&&``, ``;`` or redirection standing as its own word, ends the
command. The docs write synopses, so two notations are read as such: square brackets mark
optional parts (parsed as if given), and ``a|b`` inside one word offers alternatives (each is
parsed). Placeholders such as ``M`` or ``<dir>`` are fine: parsing checks no paths.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from demitasse.cli.main import build_parser
from tests.conftest import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
#: Words that end the command: what follows is another command or the shell's business.
COMMAND_ENDS = {"|", "||", "&&", ";", "&"}
REDIRECTION = re.compile(r"^\d*>")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
MIN_COMMANDS = 20


@dataclass(frozen=True)
class DocCommand:
    path: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}: {self.text}"


def code_lines(path: Path) -> list[tuple[int, str]]:
    """The lines inside fenced code blocks, with their line numbers, continuations joined."""
    lines: list[tuple[int, str]] = []
    inside = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            inside = not inside
            pending = None
            continue
        if not inside:
            continue
        start, text = pending if pending else (number, "")
        text += line.strip()
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip() + " ")
            continue
        pending = None
        lines.append((start, text))
    return lines


def command_words(text: str) -> list[str] | None:
    """The words of a ``demitasse`` command after ``demitasse``, or None for another line."""
    text = text.removeprefix("$ ")
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # unbalanced quotes: not a command line of ours
        return None
    while words and ASSIGNMENT.match(words[0]):
        words.pop(0)
    if words[:3] == ["python", "-m", "demitasse"]:
        words = words[2:]
    if not words or words[0] != "demitasse":
        return None
    words = words[1:]
    for index, word in enumerate(words):
        if word in COMMAND_ENDS or REDIRECTION.match(word):
            return words[:index]
    return words


def variants(words: list[str]) -> list[list[str]]:
    """The argument lists a synopsis stands for: brackets dropped, the first alternative of
    every ``a|b`` word, then each other alternative in turn."""
    words = [w.replace("[", "").replace("]", "") if w.strip("[]") else "" for w in words]
    words = [w for w in words if w]
    choices = [word.split("|") for word in words]
    first = [options[0] for options in choices]
    found = [first]
    for index, options in enumerate(choices):
        for option in options[1:]:
            found.append([*first[:index], option, *first[index + 1 :]])
    return found


def doc_commands() -> list[DocCommand]:
    return [
        DocCommand(path, number, text)
        for path in DOCUMENTS
        for number, text in code_lines(path)
        if command_words(text) is not None
    ]


COMMANDS = doc_commands()


def test_the_docs_hold_command_lines_to_check() -> None:
    # A broken collector must not make the test below pass over nothing.
    assert len(COMMANDS) >= MIN_COMMANDS, [str(c) for c in COMMANDS]
    assert {c.path.name for c in COMMANDS} >= {"README.md", "cli.md", "tune.md", "scale.md"}
    assert {(command_words(c.text) or [""])[0] for c in COMMANDS} >= {
        "fit", "encode", "transform", "eval", "export", "tune", "train", "embed", "recompress",
        "serve", "index", "search", "report", "distill-static", "demo",
    }  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.path.name}:{c.line}")
def test_every_command_line_in_the_docs_parses(
    command: DocCommand, capsys: pytest.CaptureFixture[str]
) -> None:
    words = command_words(command.text)
    assert words is not None
    for argv in variants(words):
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            error = capsys.readouterr().err.strip()
            pytest.fail(f"{command}\n  parsed as {argv}\n  {error}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$ demitasse demo --out d  # a comment", [["demo", "--out", "d"]]),
        ("DEMITASSE_DATA=x demitasse demo | tee log", [["demo"]]),
        ("demitasse demo > log && demitasse report r --out o", [["demo"]]),
        (
            "demitasse fit [--layer 3] --precision int8|binary --out M",
            [
                ["fit", "--layer", "3", "--precision", "int8", "--out", "M"],
                ["fit", "--layer", "3", "--precision", "binary", "--out", "M"],
            ],
        ),
        ("make demo", None),
        ("pip install demitasse", None),
    ],
)
def test_the_collector_reads_synopses_as_written(
    text: str, expected: list[list[str]] | None
) -> None:
    words = command_words(text)
    assert (None if words is None else variants(words)) == expected


def test_the_collector_joins_continued_lines_inside_code_blocks_only(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "demitasse prose --not-code\n\n```bash\ndemitasse fit --compressor pca \\\n"
        "    --out M\nls\n```\n\n```\n$ demitasse demo\n```\n",
        encoding="utf-8",
    )
    assert code_lines(doc) == [
        (4, "demitasse fit --compressor pca --out M"),
        (6, "ls"),
        (10, "$ demitasse demo"),
    ]


def test_a_broken_flag_or_choice_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["fit", "--method", "pca", "--out", "M"], ["train", "--objective", "pooler"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
    assert "--method" in capsys.readouterr().err
