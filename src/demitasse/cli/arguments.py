"""Declared ranges for numeric command-line flags, checked by argparse before any work.

``type=positive_int`` makes ``--batch-size -3`` a one-line usage error (exit code 2) instead of
a run that fails later, or worse, succeeds with garbage.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from demitasse.compress import check_precision, compressor_choices, precision_help
from demitasse.encoders.base import BACKENDS
from demitasse.errors import CompressorError


def _integer(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def _number(minimum: float, *, inclusive: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if value < minimum or (value == minimum and not inclusive):
            relation = ">=" if inclusive else ">"
            raise argparse.ArgumentTypeError(f"must be a number {relation} {minimum}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


positive_int = _integer(1)
non_negative_int = _integer(0)
positive_float = _number(0.0, inclusive=False)
non_negative_float = _number(0.0, inclusive=True)


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, got {value}")
    return value


port_number.__name__ = "port"


def comma_list(text: str) -> str:
    """A comma-separated list flag's value (``--dims 64,32``, ``--tasks sts``), checked: a list
    with no item (``''``, ``' '``, ``','``) is a one-line usage error (exit code 2), never
    taken for the flag not given (which would run with its default). Blank items between
    commas are skipped by the parsers (:mod:`demitasse.cli.specs`)."""
    if not any(part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(
            f"is empty ({text!r}); give one value or more, separated by commas"
        )
    return text


comma_list.__name__ = "comma-separated list"


def non_blank(text: str) -> str:
    """A name or path (``serve --name``, ``--model``, ``--out``, a column) that must say
    something: empty or only spaces is a one-line usage error (exit code 2), never taken for
    the flag not given."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"is empty ({text!r}); give a name or path")
    return text


non_blank.__name__ = "name"


def backend_name(text: str) -> str:
    """``--backend``'s value, checked: a bad name is a one-line usage error (exit code 2)."""
    if text not in BACKENDS:
        raise argparse.ArgumentTypeError(f"unknown backend {text!r}; choose one of "
                                         f"{', '.join(BACKENDS)}")  # fmt: skip
    return text


backend_name.__name__ = "backend"


def precision_name(text: str) -> str:
    """``--precision``'s value, checked against the quantiser registry and made canonical
    (``pq08`` → ``pq8``): a bad name is a one-line usage error (exit code 2)."""
    try:
        return check_precision(text)
    except CompressorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


precision_name.__name__ = "precision"


def precision_help_text(what: str) -> str:
    """A ``--precision`` help text: ``what`` it sets, and the names it takes."""
    return f"{what}: {precision_help()}"


def compressor_help_text(what: str) -> str:
    """A help text for an option naming compressors: ``what`` it does, and the names."""
    return f"{what}: {', '.join(compressor_choices())}; options as pca:whiten=true:abtt=2"


def add_backend_argument(parser: argparse.ArgumentParser, *, saved: bool = True) -> None:
    """``--backend torch|onnx|onnx-int8`` for a command that encodes texts with a transformer.
    ``saved``: the command also takes a model directory, whose saved backend is the default."""
    default = "the model directory's, else torch" if saved else "torch"
    parser.add_argument(
        "--backend",
        type=backend_name,
        default=None,
        metavar="{" + ",".join(BACKENDS) + "}",
        help=f"what runs the transformer: torch, ONNX Runtime float32 (onnx) or with int8 "
        f"weights (onnx-int8); ONNX graphs are exported once and cached (default: {default})",
    )


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    """``--overwrite`` for a command that writes one file: without it an existing file under
    ``--out`` is refused (every such command, one rule)."""
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out if the file exists (it is never one of the "
                        "command's inputs)")  # fmt: skip


def add_text_column_argument(parser: Any, default: str = "text") -> None:
    """``--text-column`` on ``parser`` (a parser or an argument group): the column of table
    inputs that holds the texts. Unset, it is ``default``; given, it is refused for a text file
    (one text a line has no columns)."""
    parser.add_argument(
        "--text-column",
        default=None,
        type=non_blank,
        help=f"column of table inputs holding the texts (default: {default}); not for .txt",
    )
