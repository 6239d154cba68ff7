"""The report: tables, plots, and the Markdown + HTML pages, checked in a headless browser."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from demitasse.errors import DataError
from demitasse.evaluation.records import ResultRecord
from demitasse.report.plots import (
    Point,
    pareto_front,
    plot_layer_heatmap,
    plot_quality_vs_search_speed,
    plot_sts_vs_dim,
)
from demitasse.report.render import ReportPaths, render_report
from demitasse.report.tables import headline, sts_table, task_table

MODEL = "toy-model"
LAYERS = (3, 6)
FULL_DIM = 256
DIMS = (128, 32)
METHODS = ("none", "truncate", "pca")
PRECISIONS = ("float32", "int8", "binary")
BYTES_PER_VALUE = {"float32": 4.0, "int8": 1.0, "binary": 1 / 8}
# task -> (data sets, metrics, whether it writes an "avg" row); the slower-to-draw layer plots
# only for two tasks, which also covers a report mixing one-layer and several-layer tasks.
TASKS = {
    "sts": (("STS12", "STS-B"), ("spearman",), True),
    "classification": (("MR", "CR"), ("accuracy",), True),
    "retrieval": (("SciFact", "NFCorpus"), ("ndcg@10", "recall@100", "mrr@10"), False),
    "clustering": (("TwentyNewsgroups",), ("accuracy", "nmi", "seconds"), False),
    "translation": (("de-en", "fr-en"), ("accuracy",), True),
}
SEVERAL_LAYERS = ("sts", "retrieval")


def _configs() -> list[tuple[int, str, int, str]]:
    return [
        (layer, method, dim, precision)
        for layer in LAYERS
        for method in METHODS
        for dim in ((FULL_DIM,) if method == "none" else DIMS)
        for precision in PRECISIONS
    ]


def _record(layer: int, method: str, dim: int, precision: str, **fields: object) -> ResultRecord:
    return ResultRecord(
        model=MODEL,
        layer=layer,
        method=method,
        dim=dim,
        precision=precision,
        bytes_per_vector=int(np.ceil(dim * BYTES_PER_VALUE[precision])),
        fit_data="synthetic",
        machine="test machine",
        **fields,  # type: ignore[arg-type]
    )


def synthetic_records() -> list[ResultRecord]:
    """Plausible scores for every task and efficiency measurements, deterministic."""
    rng = np.random.default_rng(0)
    records = []
    for layer, method, dim, precision in _configs():
        quality = (
            60 + 3 * layer + 4 * np.log2(dim) - {"float32": 0, "int8": 1, "binary": 6}[precision]
        )
        quality -= {"none": 0, "truncate": 3, "pca": 1}[method]
        for task, (datasets, metrics, with_avg) in TASKS.items():
            if layer != LAYERS[-1] and task not in SEVERAL_LAYERS:
                continue
            for metric in metrics:
                scores = [
                    quality / 1.2 + rng.normal(0, 1.5)
                    if metric != "seconds"
                    else float(rng.uniform(1, 3))
                    for _ in datasets
                ]
                names = [*datasets, "avg"] if with_avg else list(datasets)
                values = [*scores, float(np.mean(scores))] if with_avg else scores
                records += [
                    _record(
                        layer,
                        method,
                        dim,
                        precision,
                        task=task,
                        dataset=name,
                        metric=metric,
                        score=float(v),
                    )
                    for name, v in zip(names, values, strict=True)
                ]
        speed = 4e5 / (dim * BYTES_PER_VALUE[precision]) * (1 + rng.uniform(0, 0.1))
        for metric, value in (
            ("latency_p50_ms", 1000 / speed),
            ("latency_p99_ms", 2500 / speed),
            ("queries_per_s", speed),
            ("index_bytes", int(dim * BYTES_PER_VALUE[precision] * 1000)),
        ):
            records.append(
                _record(
                    layer,
                    method,
                    dim,
                    precision,
                    task="efficiency",
                    dataset="search",
                    metric=metric,
                    score=value,
                )
            )
    for layer in LAYERS:
        records.append(
            _record(
                layer,
                "none",
                FULL_DIM,
                "float32",
                task="efficiency",
                dataset="encode",
                metric="sentences_per_s",
                score=3000.0 / layer,
            )
        )
    for method in ("truncate", "pca"):
        for dim in DIMS:
            records.append(
                _record(
                    LAYERS[-1],
                    method,
                    dim,
                    "float32",
                    task="efficiency",
                    dataset="transform",
                    metric="vectors_per_s",
                    score=1e6 / dim,
                )
            )
    return records


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ReportPaths:
    out = tmp_path_factory.mktemp("report")
    return render_report(synthetic_records(), out, title="toy report")


def test_headline_prefers_avg_then_only_dataset_then_mean() -> None:
    records = synthetic_records()
    assert headline(records, "sts").label == "avg"
    assert headline(records, "clustering").metric == "accuracy"
    assert headline(records, "clustering").label == "TwentyNewsgroups"
    retrieval = headline(records, "retrieval")
    assert retrieval.metric == "ndcg@10"
    assert retrieval.label == "mean of 2 data sets"
    assert len(retrieval.scores) == len(_configs())


def test_task_table_has_dataset_columns_and_keeps_sts_table() -> None:
    records = synthetic_records()
    table = task_table(records, "retrieval", "recall@100", show_model=False)
    assert table.header == (
        "layer",
        "method",
        "precision",
        "dim",
        "bytes",
        "SciFact",
        "NFCorpus",
        "mean",
    )
    assert len(table.rows) == len(_configs())
    assert table.rows[0][:4] == (3, "none", "float32", FULL_DIM)
    text = sts_table(records)
    assert text.splitlines()[0].split("|")[1].strip() == "model"
    assert "STS12" in text and "avg" in text


def test_pareto_front_keeps_only_undominated_points() -> None:
    key = (MODEL, 1, "pca", 8, "float32")
    points = [Point(key, 1, 90), Point(key, 10, 80), Point(key, 5, 70), Point(key, 100, 50)]
    assert [(p.speed, p.quality) for p in pareto_front(points)] == [(100, 50), (10, 80), (1, 90)]


def test_plots_refuse_what_they_cannot_draw(tmp_path: Path) -> None:
    sts_only = [r for r in synthetic_records() if r.task == "sts" and r.layer == LAYERS[-1]]
    with pytest.raises(DataError, match="several layers"):
        plot_layer_heatmap(sts_only, tmp_path / "h.png", "sts")
    with pytest.raises(DataError, match="queries_per_s"):
        plot_quality_vs_search_speed(sts_only, tmp_path / "s.png", "sts")
    with pytest.raises(DataError, match="no sts records"):
        plot_sts_vs_dim([], tmp_path / "x.png")
    with pytest.raises(DataError, match="no result records"):
        render_report([], tmp_path)


def test_sts_only_report_has_its_table_and_figures(tmp_path: Path) -> None:
    records = [r for r in synthetic_records() if r.task == "sts" and r.layer == LAYERS[-1]]
    paths = render_report(records, tmp_path)
    markdown = paths.markdown.read_text()
    assert "## Semantic textual similarity" in markdown and "Efficiency" not in markdown
    assert [p.name for p in paths.figures] == ["sts-vs-dim.png", "sts-vs-bytes.png"]
    assert plot_sts_vs_dim(records, tmp_path / "cli.png").stat().st_size > 0


def test_report_has_every_table_and_references_every_figure(report: ReportPaths) -> None:
    markdown = report.markdown.read_text(encoding="utf-8")
    page = report.html.read_text(encoding="utf-8")
    for title in ("Semantic textual similarity", "Classification", "Retrieval", "Clustering"):
        assert f"## {title}" in markdown and f">{title}</h2>" in page
    for heading in ("spearman", "ndcg@10", "recall@100", "mrr@10", "nmi", "seconds"):
        assert f"### {heading} per data set" in markdown
    for dataset in ("encode", "transform", "search"):
        assert f"### {dataset}" in markdown
    assert "| layer |" in markdown and "queries_per_s" in markdown and "Pareto" in markdown
    names = {p.name for p in report.figures}
    for task in TASKS:
        kinds = {"vs-dim", "vs-bytes", "vs-search-speed"}
        if task in SEVERAL_LAYERS:
            kinds |= {"layer-heatmap", "vs-encode-speed"}
        assert {n for n in names if n.startswith(f"{task}-")} == {f"{task}-{k}.png" for k in kinds}
    referenced = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert sorted(referenced) == sorted(f"figures/{name}" for name in names)
    for relative in referenced:
        assert (report.markdown.parent / relative).read_bytes()[:4] == b"\x89PNG"
    assert page.count('<img src="data:image/png;base64,') == len(names)
    assert not re.search(r"""(src|href)=["'](?!data:|#)""", page), "external resource"
    assert "<script" not in page


def _browser_or_skip() -> tuple[str, str]:
    pytest.importorskip("selenium", reason="selenium is not installed (dev extra)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.skip(
            "chromium/chromedriver not installed (apt-get install chromium chromium-driver)"
        )
    return chromium, chromedriver


def test_html_page_renders_every_figure_in_chromium(report: ReportPaths, tmp_path: Path) -> None:
    chromium, chromedriver = _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,1600",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: selenium-manager must never try to download one.
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        driver.get(report.html.resolve().as_uri())
        assert driver.title == "toy report"
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.alt]);"
        )
        assert len(images) == len(report.figures)
        broken = [alt for complete, width, alt in images if not complete or width == 0]
        assert not broken, f"figures that did not render: {broken}"
        widths = driver.execute_script(
            "return Array.from(document.images).map(i => i.getBoundingClientRect().width);"
        )
        assert min(widths) > 100
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, f"browser console errors: {errors}"
    finally:
        driver.quit()


def test_matrix_heatmap_draws_a_matrix_and_refuses_a_misfit(tmp_path: Path) -> None:
    from demitasse.report.plots import plot_matrix_heatmap

    matrix = np.array([[80.0, 70.0], [np.nan, 75.0]])
    path = plot_matrix_heatmap(
        matrix, ["e1", "e2"], ["p1", "p2"], tmp_path / "swap.png",
        row_label="encoder", column_label="pooler", value_label="dev",
    )  # fmt: skip
    assert path.is_file() and path.stat().st_size > 1000
    with pytest.raises(DataError, match="2 × 3 matrix"):
        plot_matrix_heatmap(
            matrix, ["e1", "e2"], ["p1", "p2", "p3"], tmp_path / "bad.png",
            row_label="r", column_label="c", value_label="v",
        )  # fmt: skip
