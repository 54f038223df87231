"""The command line: ``ape COMMAND``, one module per command, listed in :data:`COMMANDS`.

Each command module (``ape.cli.<command>``) holds ``NAME``, ``HELP``, ``add_arguments(parser)``
and ``main(args) -> int``; this module builds the parser from the list and dispatches to the
chosen one. Only the chosen command's module is imported (every one for ``ape --help``): the
reporting commands import pandas and SciPy, half a second a run would otherwise spend before
its first model call. argparse (the standard library) rather than the typer/cyclopts Prefect brings:
the exit codes and one-line errors below are APE's own, ``python -m ape config.toml``
needs the command inserted before parsing, and the docs' command reference is generated
from the same parser (``docs/hooks.py``).

Errors print one line naming the file and key (``--debug`` adds the traceback) and exit
non-zero: 2 for bad input, 1 for a run whose items failed, 3 for a regression under
``--fail-on-regression``, 4 for a run drained (``ape ctl drain``), 0 on success.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType

from ape.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSED
from ape.schemas.errors import ApeError
from ape.tasks.common.inert import TerminalSafeRecords, terminal_safe

__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "EXIT_REGRESSED", "build_parser", "main"]

# the commands, in the order `ape --help` lists them; each is the module ape.cli.<name>
COMMANDS = (
    "run",
    "status",
    "ctl",
    "validate",
    "plan",
    "report",
    "retry",
    "demo",
    "serve",
    "server",
    "schema",
    "history",
    "baseline",
    "items",
    "diff",
    "record",
    "prune",
    "benchmarks",
    "init",
)


def command_module(name: str) -> ModuleType:
    """The module of the command ``name`` (one of :data:`COMMANDS`), imported on first use."""
    return importlib.import_module(f"ape.cli.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` the one command a call names (the others'
    modules not imported; its parsing and help are the same)."""
    parser = argparse.ArgumentParser(
        prog="ape",
        description="APE: evaluate language models on your own benchmarks, orchestrated by Prefect. "
        "`python -m ape config.toml` is the same as `ape run config.toml`.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        command = command_module(name)
        p = sub.add_parser(command.NAME, help=command.HELP)
        command.add_arguments(p)
        p.set_defaults(handler=command.main)
        # --debug also after the command
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and debug logs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `python -m ape config.toml` is shorthand for `ape run config.toml`
    first = next((a for a in args_list if not a.startswith("-")), None)
    if first is not None and first not in COMMANDS:
        args_list.insert(args_list.index(first), "run")
        first = "run"
    before = args_list[: args_list.index(first)] if first is not None else args_list
    whole = first is None or {"-h", "--help"} & set(before)  # the top-level help lists every command
    parser = build_parser(None if whole else first)
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    _setup_logging(args.debug)
    try:
        return int(args.handler(args))
    except ApeError as exc:
        if args.debug:
            logging.getLogger("ape").exception("error")
        print(terminal_safe(f"error: {exc}"), file=sys.stderr)  # it may quote a data file
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(_interrupted_line(args.command), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if args.debug:
            raise
        line = f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)"
        print(terminal_safe(line), file=sys.stderr)
        return EXIT_FAILED


def _interrupted_line(command: str) -> str:
    """What Ctrl-C left behind: "finished items are saved" only once a run's flow had
    started; before that (config, canary, server start) nothing was saved or begun."""
    launch = sys.modules.get("ape.launch")  # imported only once a run got that far
    if launch is not None and launch.work_started():
        return "interrupted: finished items are saved; run the same command again to resume"
    if command in ("run", "retry"):
        return "interrupted before any item started; nothing was saved"
    return "interrupted"


class _Terminal(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (it may be replaced after set-up)."""

    @property
    def stream(self):  # noqa: D401
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _setup_logging(debug: bool) -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # and the client's: in a terminal, Prefect's first import in a new home prints a usage-data
    # notice (naming the server setting above, already off) and sends an event; DO_NOT_TRACK=0 keeps it
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # Prefect's own INFO chatter (one line per task run) would drown the progress bar and
    # costs CPU per task run; users can lower it again with PREFECT_LOGGING_LEVEL.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "DEBUG" if debug else "WARNING")
    logger = logging.getLogger("ape")
    if not any(isinstance(h, _Terminal) for h in logger.handlers):
        handler = _Terminal()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(lambda record: not getattr(record, "ape_console_skip", False))
        handler.addFilter(TerminalSafeRecords())  # error text of models and endpoints: no escapes
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    logger.propagate = False


if __name__ == "__main__":
    raise SystemExit(main())
