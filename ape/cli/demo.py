"""``ape demo``: the mock adapters over the ten-task fixture (the eval demo)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ape import server
from ape.schemas.models import ModelAdapter
from ape.tasks.common.inert import terminal_safe
from ape.tasks.storage.file_modes import following

NAME = "demo"
HELP = "run the mock adapters over the ten-task fixture (the eval demo)"

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("output/demo"), help="output folder")
    p.add_argument("--sequential", action="store_true", help="run tasks in a fixed order")


def main(args: argparse.Namespace) -> int:
    with following(args.out):  # owner-only, unless the folder is shared with the group already
        return demo(args.out, parallel=not args.sequential)


def demo(out: Path, *, parallel: bool = True) -> int:
    """``ape demo``: run, print the markdown table, return the demo's exit code.

    Uses the local Prefect server like ``ape run`` (started or reused) unless the
    environment sets APE_NO_SERVER=1 or PREFECT_API_URL.
    """
    from ape.flows.demo import NO_SERVER_ENV  # deferred: Prefect and the flows (CLI start-up)

    if os.environ.get(NO_SERVER_ENV) != "1":
        server.ensure_api_url(on_status=log.info)
    return demo_exit(out, parallel=parallel)


def demo_exit(
    out: Path,
    parallel: bool = True,
    *,
    tasks_file: Path | None = None,
    adapters: Sequence[ModelAdapter] | None = None,
    outrank: tuple[str, str] = ("rule-based", "random"),
) -> int:
    """Run the demo against whatever Prefect API is configured, print the markdown table
    and the criteria check, and return the exit code (see :mod:`ape.flows.demo`)."""
    from ape.flows.demo import WALL_BUDGET_S, run_demo  # deferred, as above
    from ape.tasks.report.markdown import markdown_table

    result = run_demo(out, parallel, tasks_file=tasks_file, adapters=adapters, outrank=outrank)
    print(terminal_safe(markdown_table(result.envelope)))
    wall = result.envelope.summary.wall_seconds
    if wall is not None and wall > WALL_BUDGET_S:
        log.warning("the evaluation took %.1f s, over the %.0f s budget", wall, WALL_BUDGET_S)
    if result.breach is not None:
        print(
            f"error: demo criterion '{result.breach.criterion.value}' failed: "
            f"{result.breach.message} (exit code {result.exit_code}; details in {result.report})",
            file=sys.stderr,
        )
    else:
        log.info("clean run; report in %s", result.report)
    return result.exit_code
