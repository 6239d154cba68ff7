"""Long work is never silent: a bar on a terminal, elsewhere a line every half minute and a
last line with the rate; --quiet shows nothing (issue #50)."""

from __future__ import annotations

import pytest

from demitasse import progress as progress_module
from demitasse.progress import LineProgress, progress, tracked


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


def test_tracked_counts_items_and_a_nested_progress_leaves_no_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)
    assert list(tracked(range(3), "batches", unit="batches")) == [0, 1, 2]
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("batches: 3 batches in ")
    assert list(tracked(iter("ab"), "search", leave=False)) == ["a", "b"]  # no length: no total
    lines = capsys.readouterr().err.splitlines()  # a line per item here, and no closing line
    assert [line.split(", ")[0] for line in lines] == ["search: 1 it", "search: 2 it"]


def test_a_resumed_run_counts_its_own_rate_and_shows_its_figures(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)
    with progress("training", total=10, unit="steps", initial=8) as bar:
        bar.set_postfix(loss="0.125")
        bar.update(1)
    first, last = capsys.readouterr().err.splitlines()
    assert first.startswith("training: 9/10 steps, ") and first.endswith(", loss=0.125")
    assert last.startswith("training: 9 steps in ")


def test_off_a_terminal_an_encoder_writes_lines_not_bar_frames(
    tiny_encoder, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every long loop goes through demitasse.progress: in a log, tqdm's carriage-return
    frames ("0%|  | 0/310") were what an encoder left; now it is the same lines as embed's."""
    from demitasse.loading import load_encoder

    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)
    encoder = load_encoder(str(tiny_encoder), cache=False)
    encoder.show_progress = True
    encoder.encode([f"sentence number {i}" for i in range(20)], batch_size=4)
    err = capsys.readouterr().err
    assert "\r" not in err and "%|" not in err, err
    assert err.splitlines()[-1].startswith(f"encoding with {encoder.name}: 5 batches in ")
