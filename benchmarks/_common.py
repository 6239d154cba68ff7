"""What the benchmark scripts share: their grids, templates and log, and the post-hoc
compression run (the model, STS-B train fit data, the grid)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from demitasse.cli.specs import parse_compressor_specs
from demitasse.data import STSB_FIT_DATA, stsb_fit_sentences
from demitasse.encoders import TransformerEncoder
from demitasse.errors import DataError
from demitasse.evaluation import ResultRecord, Task, evaluate_grid, machine_description
from demitasse.loading import load_encoder
from lab import load_grid
from lab.templates import SectionTemplate

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"
T = TypeVar("T")


def page_head(title: str, command: str, machine: str, wall: float, note: str = "") -> list[str]:
    """The first lines of a generated page: its title, the exact command (and ``note`` after
    it), the machine, the wall time and the load the run ended under."""
    return [
        title,
        "",
        f"Command: `{command}`{note}",
        "",
        f"Machine: {machine}; wall time {wall:.0f} s; 1-minute load average at the end "
        f"{os.getloadavg()[0]:.1f}.",
        "",
    ]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def log_progress() -> None:
    """Show the progress notes of ``lab`` (fits, timings) on stderr, as the
    scripts' own lines are; the rest of the library stays at warnings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    progress = logging.getLogger("lab")
    progress.handlers[:] = [handler]
    progress.setLevel(logging.INFO)
    progress.propagate = False


def grid(name: str, schema: type[T]) -> T:
    """``benchmarks/grids/<name>.toml`` read into ``schema``."""
    with _exit_on_data_error():
        return load_grid(HERE / "grids" / f"{name}.toml", schema)


def template(name: str) -> SectionTemplate:
    """``benchmarks/templates/<name>.md``, the prose of the RESULTS.md section ``name``."""
    with _exit_on_data_error():
        return SectionTemplate.load(HERE / "templates" / f"{name}.md")


@contextlib.contextmanager
def _exit_on_data_error() -> Iterator[None]:
    """A bad grid or template ends the script with one line on stderr and exit code 2."""
    try:
        yield
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run_posthoc_grid(
    tasks: Sequence[Task],
    *,
    model: str,
    data_dir: str | Path | None,
    compressors: str,
    dims: Sequence[int],
    precisions: Sequence[str],
) -> tuple[TransformerEncoder, list[ResultRecord], float]:
    """Score ``tasks`` for the model's last layer with compressors and int8 ranges fitted on the
    STS-B train sentences that are in no STS test or dev split (most of the others are STS12–16
    test sentences); returns the wall time too."""
    started = time.perf_counter()
    encoder = load_encoder(model)
    records = evaluate_grid(
        encoder,
        tasks,
        specs=parse_compressor_specs(compressors),
        dims=dims,
        precisions=precisions,
        fit_texts=stsb_fit_sentences(data_dir),
        fit_data=STSB_FIT_DATA,
    )
    return encoder, records, time.perf_counter() - started


def posthoc_facts(encoder: TransformerEncoder, elapsed: float) -> dict[str, object]:
    """What the sections of the post-hoc runs open with: the machine, the wall time, the model."""
    return {
        "machine": machine_description(),
        "wall_seconds": f"{elapsed:.0f}",
        "model": encoder.name,
        "pooling": encoder.pooling,
    }
