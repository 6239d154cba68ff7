"""What an output may never be: one of its command's inputs, inside one, or holding one.

Issue #49's one rule, shared by every command that writes a file or a folder: writing there
would replace (or fill, or swap away) what the user gave the command to read. The relation is
found however the two are spelt: trailing slashes, ``..``, symbolic links (resolved) and hard
links (the same file). An input that does not exist is nothing of the user's to keep: an
encoder's hub name, a data set's name, or a missing file that its reader reports.

:mod:`demitasse.io` applies the rule to its file and folder targets (``check_new_file``,
``check_directory_target(inputs=...)``) and re-exports :func:`check_not_input`; the commands
call them with every path they read, before any work. Only two kinds of folder may hold an
output (``nested``): the results a report renders, and the shared data folder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from demitasse.errors import DemitasseError


def relation(target: str | Path, given: str | Path) -> str | None:
    """How the path ``target`` stands to the path ``given``: ``"is"``, ``"is inside"``,
    ``"holds"`` or None (apart, or a path that cannot be resolved)."""
    target, given = Path(target), Path(given).expanduser()
    try:
        if target.exists() and given.exists() and target.samefile(given):
            return "is"  # a hard link, or the same folder under two names
        where, source = target.resolve(), given.resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if where == source:
        return "is"
    if where.is_relative_to(source):
        return "is inside"
    return "holds" if source.is_relative_to(where) else None


def check_not_input(
    target: str | Path, inputs: Iterable[str | Path | None], *, nested: bool = False
) -> None:
    """A one-line error if the output ``target`` (a file or a folder) is one of its command's
    ``inputs``, lies inside one or holds one: writing it would replace what the user gave.
    ``nested``: it may lie inside an input folder (a report written into the evaluation it
    renders, which keeps that evaluation replaceable, as the report has a marker of its own;
    results beside the named data sets of the shared data folder)."""
    for given in inputs:
        if not given or not Path(given).expanduser().exists():
            continue
        where = relation(target, given)
        if where and not (nested and where == "is inside"):
            raise DemitasseError(f"refusing to write {target}: it {where} the input {given}; "
                                 "choose another output name")  # fmt: skip


def check_apart(outputs: Mapping[str, str | Path | None]) -> None:
    """A one-line error if two outputs of one command (``{flag: path}``) are one path or one
    holds the other: the later written would replace the earlier, or fill it with files its
    marker does not list, and be refused only once the work is done."""
    named = [(flag, path) for flag, path in outputs.items() if path]
    for i, (flag, path) in enumerate(named):
        for earlier, other in named[:i]:
            if where := relation(path, other):
                raise DemitasseError(f"refusing to write {flag} {path}: it {where} {earlier} "
                                     f"{other}; give each output its own folder")  # fmt: skip
