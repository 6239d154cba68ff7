"""The evaluation harness: tasks score vectors and emit result records."""

from demitasse.evaluation.classification import ClassificationTask, ProbeSettings
from demitasse.evaluation.clustering import ClusteringTask, cluster_accuracy, kmeans_cluster
from demitasse.evaluation.efficiency import (
    EfficiencyTask,
    measure_encode_throughput,
    measure_transform_throughput,
)
from demitasse.evaluation.grid import (
    CompressorSpec,
    evaluate_grid,
    evaluate_model,
    evaluate_vectors,
    score_embedded,
)
from demitasse.evaluation.label_free import NeighbourhoodAgreement, neighbourhood_agreement
from demitasse.evaluation.ranking_metrics import evaluate_run
from demitasse.evaluation.records import (
    ResultRecord,
    machine_description,
    mean_over_seeds,
    read_records,
    write_records,
)
from demitasse.evaluation.retrieval import RetrievalTask
from demitasse.evaluation.sts import spearman_x100
from demitasse.evaluation.suites import TASK_NAMES, build_tasks
from demitasse.evaluation.tasks import EmbeddedTexts, Score, STSTask, Task, with_average
from demitasse.evaluation.translation import TranslationTask

__all__ = [
    "TASK_NAMES",
    "ClassificationTask",
    "ClusteringTask",
    "CompressorSpec",
    "EfficiencyTask",
    "EmbeddedTexts",
    "NeighbourhoodAgreement",
    "ProbeSettings",
    "ResultRecord",
    "RetrievalTask",
    "STSTask",
    "Score",
    "Task",
    "TranslationTask",
    "build_tasks",
    "cluster_accuracy",
    "evaluate_grid",
    "evaluate_model",
    "evaluate_run",
    "evaluate_vectors",
    "kmeans_cluster",
    "machine_description",
    "mean_over_seeds",
    "measure_encode_throughput",
    "measure_transform_throughput",
    "neighbourhood_agreement",
    "read_records",
    "score_embedded",
    "spearman_x100",
    "with_average",
    "write_records",
]
