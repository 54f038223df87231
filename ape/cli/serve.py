"""``ape serve CONFIG``: the benchmark as a scheduled Prefect deployment, served by this process."""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ape import server
from ape.tasks.storage.config_file import load_config

NAME = "serve"
HELP = "serve the benchmark as a scheduled Prefect deployment"

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path)
    p.add_argument("--cron", default=None, help='schedule, e.g. "0 3 * * *" (none: manual runs)')
    p.add_argument("--timezone", default=None, help='IANA timezone of the schedule, e.g. "Europe/Berlin" (default UTC)')
    p.add_argument("--name", default=None, help="deployment name (default: the benchmark name)")
    p.add_argument(
        "--interval",
        type=float,
        default=None,
        help="schedule: a run every this many seconds (instead of, or besides, --cron)",
    )


def main(args: argparse.Namespace) -> int:
    return serve(args.config, args.cron, args.name, timezone=args.timezone, interval=args.interval)


def serve(
    config_path: Path, cron: str | None, name: str | None, *, timezone: str | None = None, interval: float | None = None
) -> int:
    # deferred: Prefect and the flows (CLI start-up)
    from ape.deployments.serve import cron_schedule, load_benchmark_flow, serve_config
    from ape.flows.preflight import canary

    config_path = config_path.resolve()
    config = load_config(config_path)  # fail fast on a bad config
    canary(config)  # and on a checker that cannot grade here (each run grades it again)
    if cron:
        cron_schedule(cron, timezone)  # and on a bad schedule, before any server starts
    configured = server.configured_api_url()
    api_url = server.ensure_api_url(on_status=log.info)
    if api_url:
        for line in run_hint(api_url, "benchmark", name or config.name, ape_server=not configured):
            log.info("%s", line)
    deployment = f"benchmark/{name or config.name}"
    serving_since = datetime.now(UTC)  # a stop by SIGTERM (not Ctrl-C) counts from here
    stopped_at: list[datetime] = []  # when Ctrl-C came (set by the handler)
    previous = _stop_gracefully_on_ctrl_c(stopped_at)
    try:
        serve_config(
            load_benchmark_flow(),
            config,
            cron,
            name or config.name,
            timezone=timezone,
            on_status=log.info,
            interval=interval,
        )
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
    log.info("%s", stopped_line(deployment, stopped_at[0] if stopped_at else serving_since))
    return 0


def stopped_line(deployment: str, stopped_at: datetime) -> str:
    """The one line ``ape serve`` ends with: what the stop did to a run in progress, as the
    server recorded it (a run is named only when one was in progress), and that the
    schedule waits for the next ``ape serve``."""
    from ape.deployments.serve import stop_outcome  # deferred: Prefect's client (CLI start-up)

    paused = "its schedule is paused until 'ape serve' runs again"
    try:
        outcome = stop_outcome(deployment, stopped_at)
    except Exception as exc:  # the server went away too: say that the runs are unknown, not fine
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return (
            f"stopped serving '{deployment}'; could not ask the server whether a run was in progress ({reason}): "
            f"if one was, it was cancelled and does not enter the history; {paused}"
        )
    parts = []
    if outcome.cancelled:
        names = ", ".join(f"'{run}'" for run in outcome.cancelled)
        parts.append(f"the run in progress ({names}) was cancelled and does not enter the history")
    if outcome.unfinished:
        names = ", ".join(f"'{run}'" for run in outcome.unfinished)
        parts.append(f"flow run(s) {names} did not stop and are still in progress (cancel them in the UI)")
    if not parts:
        parts.append("no run was in progress")
    return f"stopped serving '{deployment}': {'; '.join(parts)}; {paused}"


def run_hint(api_url: str, flow_name: str, name: str, *, ape_server: bool = False) -> list[str]:
    """How to trigger a served deployment from a new shell, which needs the API URL (and,
    for APE's own server, its credentials, which ``ape server env`` prints without showing
    them here): without it ``prefect deployment run`` looks for a temporary in-process
    server and times out."""
    target = shlex.quote(f"{flow_name}/{name}")
    point = 'eval "$(ape server env)"' if ape_server else server.env_line(api_url)
    return ["To start a run from another shell:", f"    {point}", f"    prefect deployment run {target}"]


def _stop_gracefully_on_ctrl_c(stopped_at: list[datetime]) -> Any:
    """Ctrl-C stops ``ape serve`` the way SIGTERM does: Prefect's runner then cancels the run
    in progress (state Cancelled, never half-counted in the history) and returns, instead of
    a KeyboardInterrupt traceback from deep inside its event loop. The moment of the first
    Ctrl-C goes to ``stopped_at``: the runs cancelled since are the stop's. Returns the old
    handler."""

    def as_sigterm(_signum: int, _frame: Any) -> None:
        if not stopped_at:
            stopped_at.append(datetime.now(UTC))
        signal.raise_signal(signal.SIGTERM)

    return signal.signal(signal.SIGINT, as_sigterm)
