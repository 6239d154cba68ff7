"""One model from fit to evaluation to export: the saved model scores what the sweep scores,
and its sentence-transformers export gives its vectors.

For each configuration, a :class:`CompressedModel` is fitted on the STS-B train sentences that
are in no STS test or dev split, saved, loaded back and scored on the 7 STS sets
(``evaluate_model``, what ``demitasse eval --model M`` runs); the string-spec sweep
(``evaluate_grid``, what ``demitasse eval --compressor ...`` runs) is fitted on the same texts.
The loaded model is then exported to sentence-transformers and the export's vectors of 2,000
STS sentences are compared with the model's own float vectors (cosine per row).

    python benchmarks/model_roundtrip.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from _common import HERE, RESULTS_MD, template
from demitasse import CompressedModel
from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import STSB_FIT_DATA, stsb_fit_sentences
from demitasse.evaluation import (
    ResultRecord,
    build_tasks,
    evaluate_grid,
    evaluate_model,
    machine_description,
    write_records,
)
from demitasse.export import export_model
from demitasse.loading import load_encoder
from demitasse.report import markdown_table
from demitasse.report.plots import save_figure
from lab.templates import fill_section

NAME = "model_roundtrip"
#: (method spec, dim, precision): the issue's PCA-64-int8, and two more shapes of model.
CONFIGS = (("pca", 64, "int8"), ("truncate", 128, "binary"), ("pca-whiten", 32, "float32"))
EXPORT_TEXTS = 2000


def _average(records: list[ResultRecord]) -> float:
    return next(r.score for r in records if r.dataset == "avg")


def _export_cosine(model: CompressedModel, texts: list[str], folder: Path) -> float:
    from sentence_transformers import SentenceTransformer

    export_model(model, folder)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts, batch_size=64)
    ours = model.encode(texts)
    cosine = np.sum(theirs * ours, axis=1) / (
        np.linalg.norm(theirs, axis=1) * np.linalg.norm(ours, axis=1)
    )
    return float(cosine.min())


def run(args: argparse.Namespace) -> tuple[list[ResultRecord], list[list[object]]]:
    tasks = build_tasks(["sts"], args.data_dir)
    fit_texts = stsb_fit_sentences(args.data_dir)
    encoder = load_encoder(args.model)
    sample = list(dict.fromkeys(tasks[0].texts()))[:EXPORT_TEXTS]
    records: list[ResultRecord] = []
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for spec_text, dim, precision in CONFIGS:
            spec = parse_compressor_specs(spec_text)[0]
            model = CompressedModel(encoder, precision=precision)
            model.compressor = spec.build(encoder.dim, dim)
            model.fit(fit_texts, data_label=STSB_FIT_DATA).save(Path(scratch) / spec_text)
            loaded = CompressedModel.load(Path(scratch) / spec_text)
            saved = evaluate_model(loaded, tasks, extra={"path": "model directory"})
            sweep = evaluate_grid(
                encoder, tasks, specs=[spec], dims=[dim], precisions=[precision],
                fit_texts=fit_texts, fit_data=STSB_FIT_DATA,
            )  # fmt: skip
            for record in sweep:
                record.extra["path"] = "string-spec sweep"
            cosine = _export_cosine(loaded, sample, Path(scratch) / f"{spec_text}-st")
            records += [*saved, *sweep]
            difference = _average(saved) - _average(sweep)
            rows.append([spec.label, dim, precision, _average(saved), _average(sweep),
                         f"{difference:+.4f}", f"{cosine:.7f}"])  # fmt: skip
    return records, rows


def plot(rows: list[list[object]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    labels = [f"{r[0]}-{r[1]}-{r[2]}" for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [float(r[3]) for r in rows], 0.4, label="eval --model (saved model)")  # type: ignore[arg-type]
    ax.bar(x + 0.2, [float(r[4]) for r in rows], 0.4, label="string-spec sweep")  # type: ignore[arg-type]
    ax.set_xticks(x, labels)
    ax.set_ylabel("7-set STS average (Spearman ×100)")
    ax.set_ylim(60, 80)
    ax.legend(fontsize=8)
    ax.set_title("The saved model scores what the sweep scores")
    fig.tight_layout()
    return save_figure(fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    args = parser.parse_args()
    started = time.perf_counter()
    records, rows = run(args)
    write_records(HERE / "results" / f"{NAME}.json", records)
    figure = plot(rows, HERE / "results" / f"{NAME}.png")
    headers = ["method", "dim", "precision", "eval --model", "sweep", "difference",
               f"export: min cosine over {EXPORT_TEXTS} sentences"]  # fmt: skip
    body = fill_section(
        RESULTS_MD,
        NAME,
        template(NAME),
        machine=machine_description(),
        wall_seconds=f"{time.perf_counter() - started:.0f}",
        model=args.model,
        export_texts=EXPORT_TEXTS,
        table=markdown_table(headers, rows),
        plot=figure.name,
    )
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
