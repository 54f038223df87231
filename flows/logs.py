"""Where the 'ape' logger writes during a flow run: run.log and the Prefect UI.

The terminal handler is set up by the command line; a flow adds its run's log
file and Prefect's API handler for as long as it runs, so the same lines land in
``run.log`` and under the flow run in the UI. Prefect's own per-task-run INFO
lines stay off (the CLI sets PREFECT_LOGGING_LEVEL=WARNING by default): at
thousands of task runs they cost more than they tell.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOGGER = "ape"
# A record with this attribute set goes to run.log and the UI but not to the terminal
# (for messages the command line prints itself).
CONSOLE_SKIP = "ape_console_skip"


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
        from prefect.logging.handlers import APILogHandler

        # a subflow inherits its parent's handler, which follows the current run context
        if not any(isinstance(h, APILogHandler) for h in logger.handlers):
            api = APILogHandler()
            api.setLevel(logging.INFO)
            handlers.append(api)
    except Exception:  # logging to the UI is a convenience, never a reason to fail
        pass
    for handler in handlers:
        logger.addHandler(handler)
    try:
        yield logger
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            if isinstance(handler, logging.FileHandler):
                handler.close()
