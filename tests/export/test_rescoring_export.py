"""A model that rescores leaves the tool with its rescoring (issue #50): the exported
sentence-transformers folder carries the ranges of what each document keeps and a README recipe
in sentence-transformers + faiss that reproduces the model's search, run here in a process that
cannot import demitasse, and scored against demitasse's own nDCG@10."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from demitasse import CompressedModel
from demitasse.data.beir import load_beir
from demitasse.evaluation.ranking_metrics import evaluate_run
from demitasse.export import export_model
from tests.helpers import build_tiny_model, write_beir

pytest.importorskip("faiss")

#: Blocks every import of demitasse in the recipe's process: the recipe needs none of it.
NO_DEMITASSE = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "demitasse":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def _recipe(folder: Path) -> str:
    readme = (folder / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Search with rescoring", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)[:1]
    return code.replace('"path/to/this/folder"', repr(str(folder)))


@pytest.mark.parametrize("rescore_precision", ["int8", "float32"])
def test_an_exported_rescoring_model_searches_as_demitasse_does(
    tmp_path: Path, rescore_precision: str
) -> None:
    encoder = build_tiny_model(tmp_path / "tiny")
    beir = load_beir(write_beir(tmp_path / "beir", n_docs=160, n_queries=40), split="test")
    model = CompressedModel(
        encoder, compressor="pca", dim=16, precision="binary", cache=False,
        quantizer_params={"rotation": "itq"}, rescore_factor=4,
        rescore_precision=rescore_precision,
    ).fit(beir.corpus_texts)  # fmt: skip
    _, rows = model.search(model.search_index(beir.corpus_texts), beir.query_texts, 10)
    ours = _ndcg(rows, beir)

    folder = export_model(model, tmp_path / "st")
    info = json.loads((folder / "demitasse_export.json").read_text())
    assert info["rescoring"]["factor"] == 4 and info["rescoring"]["precision"] == rescore_precision
    assert (folder / "rescore_ranges.safetensors").is_file() == (rescore_precision == "int8")
    (tmp_path / "texts.json").write_text(json.dumps([beir.corpus_texts, beir.query_texts]))
    script = (
        NO_DEMITASSE
        + textwrap.dedent(
            f"""
        import json
        documents, queries = json.load(open({str(tmp_path / "texts.json")!r}))
        """
        )
        + _recipe(folder)
        + f"\nimport numpy\nnumpy.save({str(tmp_path / 'rows.npy')!r}, rows)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = _ndcg(np.load(tmp_path / "rows.npy"), beir)
    assert abs(theirs - ours) <= 1.0, (theirs, ours)  # nDCG@10 × 100: within 0.01
    assert ours > 0


def _ndcg(rows: np.ndarray, beir) -> float:
    run = {
        query: {beir.corpus_ids[r]: float(len(found) - rank) for rank, r in enumerate(found)}
        for query, found in zip(beir.query_ids, rows, strict=True)
    }
    return evaluate_run(run, beir.qrels, ["ndcg@10"])["ndcg@10"]
