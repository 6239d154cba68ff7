"""Long work is never silent: a bar on a terminal, elsewhere a line every half minute and a
last line with the rate; --quiet shows nothing (issue #50)."""

from __future__ import annotations

import pytest

from demitasse import progress as progress_module
from demitasse.progress import LineProgress, progress


def test_off_a_terminal_progress_is_lines_with_rate_and_eta(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)
    with progress("embed", total=4, unit="texts") as bar:  # stderr is not a terminal here
        assert isinstance(bar, LineProgress)
        bar.update(1)
        bar.update(3)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("embed: 1/4 texts, ") and "texts/s, ETA 0:0" in lines[0]
    assert lines[-1].startswith("embed: 4 texts in ") and lines[-1].endswith("texts/s)")


def test_quiet_shows_nothing_and_an_error_ends_without_a_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with progress("embed", unit="texts", enabled=False) as bar:
        bar.update(5)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError), progress("embed", unit="texts") as bar:
        bar.update(2)
        raise ValueError("a bad row")
    assert capsys.readouterr().err == ""  # the error's own line says what happened
