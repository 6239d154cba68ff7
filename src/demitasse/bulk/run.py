"""Run a bulk job end to end: check the output folder, pick up where an interrupted run
stopped, run an engine, mark the output complete."""

from __future__ import annotations

import logging
from typing import Any

from demitasse.bulk.job import EMBED, BulkJob, load_model
from demitasse.bulk.local import run_local
from demitasse.bulk.manifest import Manifest, check_output_target, prepare_output
from demitasse.bulk.ray_engine import RayOptions, run_ray
from demitasse.bulk.sources import check_some_records
from demitasse.errors import DemitasseError, UnknownNameError
from demitasse.io_targets import check_not_input
from demitasse.model_files import model_inputs
from demitasse.progress import progress as show_progress

logger = logging.getLogger(__name__)

ENGINES = ("local", "ray")


def run_bulk(
    job: BulkJob,
    *,
    resume: bool = False,
    engine: str = "local",
    ray: RayOptions | None = None,
    threads: int | None = None,
    progress: bool = True,
) -> Manifest:
    """Write ``job``'s shards into ``job.out`` and return the final manifest.

    A folder that holds another model's output is refused (provenance), an unfinished or
    finished one is continued only with ``resume``. ``threads``: torch threads of the local
    engine (None leaves torch's setting). ``progress``: a bar on a terminal, a line every half
    minute elsewhere, and a last line with the rate (:mod:`demitasse.progress`).
    """
    if engine not in ENGINES:
        raise UnknownNameError(f"unknown engine {engine!r}; use local or ray")
    if job.on_error not in ("stop", "skip"):
        raise DemitasseError(f"--on-error must be stop or skip, got {job.on_error!r}")
    # The output is none of the inputs, inside or holding one (shards written into the folder
    # the input glob reads would be read back); it is resumed into, not read.
    check_not_input(job.out, [*model_inputs(job.model), *(source.path for source in job.inputs)])
    # Before anything is written (a fresh manifest, or a resumed one): nothing to convert.
    check_some_records(job.inputs, job.columns.values)
    check_output_target(job.out)  # before minutes of model loading
    model = load_model(job.model, job.command, threads if engine == "local" else None)
    fresh = Manifest(
        command=job.command,
        provenance=model.provenance(job.dim, job.precision),
        inputs=[source.record() for source in job.inputs],
        options=job.options(),
    )
    manifest = prepare_output(job.out, fresh, resume)
    if manifest.complete:
        logger.info("%s is already complete", job.out)
        return manifest
    with _progress_bar(job, progress) as bar:
        if engine == "local":
            run_local(job, model, manifest, bar)
        else:
            run_ray(job, model, manifest, bar, ray or RayOptions())
    manifest.complete = True
    manifest.save(job.out)
    return manifest


def _progress_bar(job: BulkJob, progress: bool) -> Any:
    unit = "texts" if job.command == EMBED else "vectors"
    return show_progress(job.command, unit=unit, enabled=progress)
