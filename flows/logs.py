"""Where the 'ape' logger writes during a flow run: run.log and the Prefect UI.

The terminal handler is set up by the command line; a flow adds its run's log
file and Prefect's API handler for as long as it runs, so the same lines land in
``run.log`` and under the flow run in the UI. Prefect's own per-task-run INFO
lines stay off (the CLI sets PREFECT_LOGGING_LEVEL=WARNING by default): at
thousands of task runs they cost more than they tell.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prefect.logging.configuration import PROCESS_LOGGING_CONFIG, setup_logging
from prefect.logging.handlers import APILogHandler, PrefectConsoleHandler

from ape.tasks.common.console import CONSOLE_SKIP
from ape.tasks.common.inert import TerminalSafeRecords

__all__ = ["CONSOLE_SKIP", "LOGGER", "quiet_prefect_console", "run_logs"]

LOGGER = "ape"
# CONSOLE_SKIP: a record with this attribute set goes to run.log and the UI but not to the
# terminal (for messages the command line prints itself, and repeats of a line)


@contextmanager
def run_logs(folder: Path | None) -> Iterator[logging.Logger]:
    logger = logging.getLogger(LOGGER)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    handlers: list[logging.Handler] = []
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(folder / "run.log", encoding="utf-8")
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        handlers.append(file_handler)
    try:
        # a subflow inherits its parent's handler, which follows the current run context
        if not any(isinstance(h, APILogHandler) for h in logger.handlers):
            api = APILogHandler()
            api.setLevel(logging.INFO)
            handlers.append(api)
    except Exception:  # logging to the UI is a convenience, never a reason to fail
        pass
    for handler in handlers:
        handler.addFilter(TerminalSafeRecords())  # model and endpoint text: no escape sequences
        logger.addHandler(handler)
    try:
        yield logger
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            if isinstance(handler, logging.FileHandler):
                handler.close()


class _OneLine(logging.Formatter):
    """Wraps a console formatter: the first line of the message, no traceback (``--debug``
    shows them). Leaves the record itself untouched, so run.log and the UI keep everything."""

    def __init__(self, inner: logging.Formatter | None):
        super().__init__()
        self.inner = inner or logging.Formatter("%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            text = self.inner.format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved
        first = text.split("\n", 1)[0]
        return first if len(first) <= 400 else first[:400] + " ..."


# Prefect's loggers for flow and task runs (its "Crash detected!" lines come from these)
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class CtrlCCrashes(logging.Filter):
    """Drops, from the terminal only, the ERROR lines Prefect's engine logs for each run a
    Ctrl-C ended ("Crash detected! Execution was aborted by an interrupt signal.", one per
    flow and subflow): the command line says in one line what Ctrl-C left behind
    (``ape.cli``), and before it these read as a failure of the run. Told apart by the
    exception being handled while they are logged (the engine logs them in its ``except``
    clause), not by their wording; a crash from any other exception still shows, and the flow
    run's logs in the UI keep these lines too (its state there is Crashed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not record.name.startswith(RUN_LOGGERS):
            return True
        return not isinstance(sys.exc_info()[1], KeyboardInterrupt)


def quiet_prefect_console() -> None:
    """Prefect's terminal output as one line per record, without tracebacks: a failed
    task or a failed cache write must not print pages of Prefect internals (the run
    reports what the user should act on itself). Its console and API handlers also drop
    escape sequences: a failed task's exception quotes the endpoint's error text. Its
    console leaves out the crash lines of a Ctrl-C (:class:`CtrlCCrashes`). Call after
    Prefect is imported."""

    if not PROCESS_LOGGING_CONFIG:
        setup_logging()  # later set-ups are incremental: they keep the formatters set here
    for name in ["", *logging.root.manager.loggerDict]:
        logger = logging.getLogger(name)
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, PrefectConsoleHandler) and not isinstance(handler.formatter, _OneLine):
                handler.setFormatter(_OneLine(handler.formatter))
            if isinstance(handler, PrefectConsoleHandler) and not any(
                isinstance(f, CtrlCCrashes) for f in handler.filters
            ):
                handler.addFilter(CtrlCCrashes())
            if isinstance(handler, PrefectConsoleHandler | APILogHandler) and not any(
                isinstance(f, TerminalSafeRecords) for f in handler.filters
            ):
                handler.addFilter(TerminalSafeRecords())
