"""Build the harness's tasks by name from a data folder in the published layouts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from demitasse.errors import DataError, DemitasseError
from demitasse.evaluation.tasks import STSTask, Task

if TYPE_CHECKING:
    from demitasse.data.beir import BeirDataset
    from demitasse.search import Rescoring

TASK_NAMES = ("sts", "classification", "retrieval", "clustering", "translation", "efficiency")
EFFICIENCY_QUERIES = 200


def parse_task_names(text: str) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(TASK_NAMES)
    unknown = [n for n in names if n not in TASK_NAMES]
    if unknown or not names:
        raise DemitasseError(
            f"unknown task {unknown[0] if unknown else text!r}; known: {', '.join(TASK_NAMES)}"
        )
    return list(dict.fromkeys(names))


def build_tasks(
    names: Sequence[str],
    data_dir: str | Path | None = None,
    *,
    sts_datasets: str = "all",
    limit: int | None = None,
    retrieval: Sequence[BeirDataset] | None = None,
    rescoring: Sequence[Rescoring] = (),
) -> list[Task]:
    """Tasks on the standard benchmark files; ``limit`` shortens each set for quick runs.

    Retrieval searches ``retrieval`` (any loaded sets; default SciFact test) with the given
    ``rescoring`` variants. Retrieval and efficiency search always use the whole corpus: a
    smaller corpus would change what the figures mean.
    """
    from demitasse.data import STS_SUITE, load_sts_set, resolve_data_dir

    # Retrieval on given sets is the one task that reads nothing from the data folder.
    root = Path() if retrieval and set(names) == {"retrieval"} else resolve_data_dir(data_dir)
    tasks: list[Task] = []
    for name in names:
        if name == "sts":
            wanted = STS_SUITE if sts_datasets == "all" else sts_datasets.split(",")
            suite = {}
            source: dict[str, str] = {}
            for item in (w.strip() for w in wanted if w.strip()):
                pairs = load_sts_set(item, root)
                if pairs.name in suite:
                    raise DataError(
                        f"two STS data sets are both named {pairs.name!r} ({source[pairs.name]} "
                        f"and {item}); rename one of the files"
                    )
                source[pairs.name] = item
                suite[pairs.name] = pairs.head(limit) if limit else pairs
            tasks.append(STSTask(suite))
        elif name == "classification":
            from demitasse.evaluation.classification import ClassificationTask

            tasks.append(ClassificationTask(root, limit=limit))
        elif name == "retrieval":
            tasks.append(_retrieval_task(root, retrieval, rescoring))
        elif name == "clustering":
            from demitasse.evaluation.clustering import ClusteringTask

            tasks.append(ClusteringTask.from_trec(root))
        elif name == "translation":
            from demitasse.data.parallel import load_multi30k
            from demitasse.evaluation.translation import TranslationTask

            tasks.append(TranslationTask(load_multi30k(root, "test_2016_flickr", limit=limit)))
        elif name == "efficiency":
            from demitasse.data.beir import load_beir
            from demitasse.evaluation.efficiency import EfficiencyTask

            scifact = load_beir(root / "beir" / "scifact", "test")
            tasks.append(
                EfficiencyTask(scifact.corpus_texts, scifact.query_texts[:EFFICIENCY_QUERIES])
            )
    return tasks


def _retrieval_task(
    root: Path, retrieval: Sequence[BeirDataset] | None, rescoring: Sequence[Rescoring]
) -> Task:
    from demitasse.data.beir import load_beir
    from demitasse.evaluation.retrieval import RetrievalTask

    datasets = retrieval or [load_beir(root / "beir" / "scifact", "test")]
    return RetrievalTask(datasets, rescoring=rescoring)
