"""``demitasse`` commands. Each one parses options, calls the library and prints where results
went; each lives in its own module of :mod:`demitasse.cli`, and this one wires them together.

User mistakes end in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from demitasse.cli.cache_command import add_cache_parser, run_cache
from demitasse.cli.embed_command import add_bulk_parsers, run_bulk_command
from demitasse.cli.eval_command import (
    add_demo_parser,
    add_eval_parser,
    add_report_parser,
    run_demo,
    run_eval,
    run_report,
)
from demitasse.cli.model_commands import (
    add_model_commands,
    run_encode,
    run_export,
    run_fit,
    run_transform,
)
from demitasse.cli.serve_command import add_serve_parser, run_serve
from demitasse.cli.static_command import add_distill_static_parser, run_distill_static
from demitasse.cli.store_commands import add_store_commands, run_index, run_search
from demitasse.cli.train_command import add_train_parser, run_train
from demitasse.cli.tune_command import add_tune_parser, run_tune
from demitasse.errors import OPTIONAL_LIBRARIES, DemitasseError, missing_extra, single_line
from demitasse.io import handle_termination


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse quotes some arguments as typed ("unrecognized arguments: ..."): one line.
        self.exit(2, f"demitasse: error: {single_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="demitasse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # The order here is the order of the commands in ``demitasse --help``.
    add_eval_parser(commands)
    add_report_parser(commands)
    add_train_parser(commands)
    add_model_commands(commands)
    add_bulk_parsers(commands)
    add_tune_parser(commands)
    add_distill_static_parser(commands)
    add_serve_parser(commands)
    add_store_commands(commands)
    add_cache_parser(commands)
    add_demo_parser(commands)
    return parser


def _warn_in_one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    # Python's default shows the source file and line: noise for a command-line user.
    print(f"demitasse: warning: {single_line(str(message))}", file=file or sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; user mistakes and interruptions end in one line, never a traceback."""
    _configure_logging()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help (0) or a usage error (2), already printed
            return exc.code if isinstance(exc.code, int) else 2
        with warnings.catch_warnings():
            warnings.showwarning = _warn_in_one_line
            return _dispatch(args)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        print(
            f"demitasse: interrupted ({signal.Signals(signum).name}); earlier outputs are "
            "intact and unfinished ones were removed",
            file=sys.stderr,
        )
        return 128 + signum


def _configure_logging() -> None:
    """Library messages go to stderr as ``demitasse: …``: warnings always, progress notes
    (INFO) with DEMITASSE_VERBOSE=1."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("demitasse: %(message)s"))
    root = logging.getLogger("demitasse")
    root.handlers[:] = [handler]  # once, however often main() runs in one process
    root.setLevel(logging.INFO if os.environ.get("DEMITASSE_VERBOSE") else logging.WARNING)


def run() -> int:
    """The ``demitasse`` executable: SIGTERM and SIGHUP clean up as Ctrl-C does, and a signal
    that arrives once the work is done cannot turn a finished run into a traceback."""
    handle_termination()
    code: int | None = None
    try:
        try:
            code = main()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
    except KeyboardInterrupt as exc:
        # It came after main() was done: in the instant between its return and the line above
        # (the work is finished; keep its exit code), or while main() was reporting an earlier
        # interruption (that report is all there is to say).
        if code is None:
            code = 128 + getattr(exc, "signum", signal.SIGINT)
    assert code is not None  # main() returned
    if code >= 128:
        # Interrupted. A KeyboardInterrupt that passed through code run by PyRun_* (some
        # imports do) leaves CPython convinced it went unhandled, and it would then kill itself
        # with SIGINT at exit instead of returning our code: leave directly.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _dispatch(args: argparse.Namespace) -> int:
    try:
        runners = {
            "demo": run_demo,
            "eval": run_eval,
            "fit": run_fit,
            "tune": run_tune,
            "encode": run_encode,
            "transform": run_transform,
            "embed": run_bulk_command,
            "recompress": run_bulk_command,
            "report": run_report,
            "train": run_train,
            "export": run_export,
            "distill-static": run_distill_static,
            "serve": run_serve,
            "index": run_index,
            "search": run_search,
            "cache": run_cache,
        }
        return runners[args.command](args)
    except DemitasseError as exc:
        print(f"demitasse: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        message = f"{exc.strerror or exc}: {exc.filename or ''}"
        print(f"demitasse: error: {single_line(message)}", file=sys.stderr)
        return 2
    except ImportError as exc:
        # An optional library this command needs is not installed: name the extra.
        if (exc.name or "").partition(".")[0] not in OPTIONAL_LIBRARIES:
            raise
        print(
            f"demitasse: error: {missing_extra(exc, f'demitasse {args.command}')}", file=sys.stderr
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
