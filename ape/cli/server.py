"""``ape server start|stop|status|env|compact``: the local Prefect server (UI) runs use by default."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import UTC, datetime

import httpx

from ape import server as srv
from ape import server_db
from ape.tasks.common.words import human_size

NAME = "server"
HELP = "manage the local Prefect server (UI) that runs use by default"

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("start", "stop", "status", "env", "compact"),
        help="env: print the PREFECT_API_URL export line for a new shell; "
        "compact: give the disk back that deleted runs left in the stopped server's SQLite database",
    )
    p.add_argument("--port", type=int, default=None, help="port (default 4200)")


def main(args: argparse.Namespace) -> int:
    return server(args.action, args.port)


def server(action: str, port: int | None) -> int:
    if action == "start":
        info = srv.start(port=port, on_status=log.info)
        print(f"Prefect server running: UI {info.ui_url}  API {info.api_url}  (log: {info.log_file})")
        if info.pid is not None:
            srv.auth_string()  # created now, so the file exists for the user to read
            print(f"The UI asks for a password once per browser: the line in {srv.server_home() / srv.AUTH_FILE}")
        return 0
    if action == "stop":
        print("stopped" if srv.stop() else "no APE-managed server running")
        return 0
    if action == "env":
        return server_env(port)
    if action == "compact":
        return compact()
    running = srv.status(port=port)
    if running is None:
        print("not running")
        database_lines(None)
        return 1
    mine = (
        f" ({srv.password_hint()})"
        if running.pid is not None
        else f" (not started by APE for {srv.server_home()}: APE runs will not use it)"
    )
    print(f"running: UI {running.ui_url}  API {running.api_url}{mine}")
    if running.pid is not None:
        database_lines(running)
    return 0


def compact() -> int:
    """``VACUUM`` the stopped server's SQLite database and print its size before and after."""
    from ape.server_compact import compact as run_compact  # deferred: only this action needs it

    done = run_compact()
    print(
        f"compacted {done.path}: {human_size(done.before)} -> {human_size(done.after)} "
        f"({human_size(done.before - done.after)} given back)"
    )
    return 0


def database_lines(running: srv.ServerInfo | None) -> None:
    """The database's size, oldest run kept, retention, free disk and growth: one line each,
    with a warning when the disk would fill within a month at the recent rate."""
    home = srv.server_home()
    path = server_db.database_path(home)
    if path is None:
        print(f"database: not SQLite ({server_db.DATABASE_URL_KEY}); its size is the database server's to watch")
        return
    if not path.is_file():
        print(f"database: {path} (not made yet)")
        return
    now = datetime.now(UTC)
    size = server_db.database_size(path)
    rate = server_db.growth(server_db.samples(home), size, now)
    server_db.record_sample(home, size, now)
    print(f"database: {path} {human_size(size)}")
    if running is not None:
        print(f"oldest run kept: {_oldest(running, now)}")
        print(f"retention: {srv.describe_retention(running.retention_days)}")
    else:
        print(f"retention: the next start {srv.describe_retention(srv.retention_days())}")
    free = server_db.free_disk(path)
    print(f"free disk: {human_size(free)}")
    if rate.per_day is None:
        print("growth: not measured yet (a size at least an hour old is needed; each status and start keeps one)")
        return
    print(f"growth: {human_size(rate.per_day)} a day over the last {rate.span_days:.1f} days")
    days = server_db.days_to_fill(free, rate)
    if days is not None and days < server_db.WARN_DAYS:
        log.warning(
            "warning: at this rate the disk of %s fills in %.0f days: shorten %s, move to PostgreSQL or free disk "
            "(docs/server.md, 'How long the server keeps runs')",
            path,
            days,
            srv.RETENTION_ENV,
        )


def _oldest(running: srv.ServerInfo, now: datetime) -> str:
    try:
        with srv.api_session(running.api_url, timeout=10.0, auth=srv.auth_string(running.home)) as client:
            oldest = server_db.oldest_run_start(client)
    except (httpx.HTTPError, ValueError) as exc:
        return f"not known (the server did not answer: {exc})"
    if oldest is None:
        return "none"
    return f"{oldest:%Y-%m-%d %H:%M} UTC ({(now - oldest).total_seconds() / 86400:.1f} days ago)"


def server_env(port: int | None) -> int:
    """Print the line that points a new shell's ``prefect`` commands at the server APE uses.

    ``eval "$(ape server env)"`` then makes ``prefect deployment run ...`` reach it instead
    of timing out on Prefect's temporary in-process server.
    """
    api_url = srv.configured_api_url() if port is None else None
    if not api_url:
        info = srv.status(port=port)
        if info is None:
            print("no Prefect server running; start one with 'ape server start'", file=sys.stderr)
            return 1
        if info.pid is None:  # someone else's server on the port: never point prefect at it unasked
            print(
                f"error: the Prefect server at {info.ui_url} was not started by APE for {srv.server_home()}; "
                "start APE's own with 'ape server start', or export PREFECT_API_URL yourself to use that one",
                file=sys.stderr,
            )
            return 1
        api_url = info.api_url
        print(srv.env_line(api_url, srv.auth_string()))
        return 0
    print(srv.env_line(api_url))
    return 0
