"""What ``ape run`` and ``ape retry`` share: their options, and how a finished run is told."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ape.cli.exit_codes import EXIT_DRAINED, EXIT_FAILED, EXIT_OK, EXIT_REGRESSED
from ape.schemas.config import ApeConfig
from ape.tasks.common.inert import terminal_safe

log = logging.getLogger("ape")


def add_run_options(p: argparse.ArgumentParser, *, output: bool = True) -> None:
    if output:
        p.add_argument("--output", type=Path, default=None, help="output folder (overrides [run] output)")
    p.add_argument("--workers", type=int, default=None, help="solver workers (overrides [run] solver_workers)")
    p.add_argument(
        "--no-load-save", action="store_true", help="start afresh instead of resuming from the saved results"
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--no-server",
        action="store_true",
        help="do not start a local Prefect server; use PREFECT_API_URL or Prefect's "
        "temporary server (which keeps no history)",
    )


def overrides(args: argparse.Namespace) -> dict[str, str | int | bool]:
    """The dotted config keys the command-line flags set (``--output`` -> ``run.output``)."""
    out: dict[str, str | int | bool] = {}
    if getattr(args, "output", None) is not None:
        out["run.output"] = str(args.output.resolve())
    if getattr(args, "workers", None) is not None:
        out["run.solver_workers"] = args.workers
    if getattr(args, "no_load_save", False):
        out["run.load_save"] = False
    if getattr(args, "no_progress", False):
        out["cli.progress"] = False
    return out


def finish(
    config: ApeConfig,
    state: Any,
    *,
    new_run: bool,
    fail_on_regression: bool = False,
    run_folder: Path | None = None,
) -> int:
    """Print what a finished benchmark flow run left (the leaderboard, the outcome, the
    regressions) and return the command's exit code. ``run_folder``: the run folder a retry
    continued (an earlier flow run made it, so it is not found by this flow run's id)."""
    # deferred: these import Prefect and the flows, which `ape --help` never needs
    from ape.flows.benchmark import ResultsSuspect
    from ape.flows.evaluate import Drained
    from ape.flows.states import items_failed
    from ape.tasks.storage.save import SaveFailed

    output = run_folder or _run_output(config, state, new_run)
    report = output / "leaderboard.md"
    if report.exists():
        print(terminal_safe(report.read_text(encoding="utf-8")))
    try:
        failed = items_failed(state)
    except SaveFailed as exc:  # the disk filled up: what was saved stays, one line
        print(terminal_safe(f"error: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    if failed is None:
        log.info("outputs in %s (report.json, leaderboard.parquet, summary.png, sessions.jsonl, ...)", output)
        return regression_exit(state.result(), fail_on_regression)
    if isinstance(failed, Drained):  # asked for: not an error, and resumable
        print(terminal_safe(f"drained: {failed}"), file=sys.stderr)
        return EXIT_DRAINED
    print(terminal_safe(f"error: {failed}"), file=sys.stderr)  # it may quote a model's answer
    if not isinstance(failed, ResultsSuspect):
        print("       `ape retry " + str(output) + "` redoes only the failed items", file=sys.stderr)
    return EXIT_FAILED


def _run_output(config: ApeConfig, state: Any, new_run: bool) -> Path:
    """The folder this run wrote: the output folder, or its run folder for a new run."""
    if not new_run:
        return config.run.output
    from ape.tasks.storage.runs import find_by_flow_run  # deferred with the flows (above)

    return find_by_flow_run(config.run.output, str(state.state_details.flow_run_id)) or config.run.output


def regression_exit(result: Any, fail_on_regression: bool) -> int:
    """Print each regression in one line; exit 3 for them under ``--fail-on-regression``."""
    regressed = [r for r in (result or {}).get("regressions") or [] if r["verdict"] == "regressed"]
    for row in regressed:
        if row["against"] == "history":
            where = f"its history ({row['reference_runs']} runs up to {row['reference_run_id']})"
            evidence = row.get("evidence") or ""
        else:
            where = f"its {row['against']} run {row['reference_run_id']}"
            evidence = f"p={row['p_value']:.3g}"
        print(
            f"regression: {row['model_id']} against {where}: score {row['mean_diff']:+.3f}, {evidence}", file=sys.stderr
        )
    return EXIT_REGRESSED if regressed and fail_on_regression else EXIT_OK
