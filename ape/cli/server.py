"""``ape server start|stop|status|env``: the local Prefect server (UI) runs use by default."""

from __future__ import annotations

import argparse
import logging
import sys

from ape import server as srv

NAME = "server"
HELP = "manage the local Prefect server (UI) that runs use by default"

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("start", "stop", "status", "env"),
        help="env: print the PREFECT_API_URL export line for a new shell",
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
    running = srv.status(port=port)
    if running is None:
        print("not running")
        return 1
    mine = (
        f" ({srv.password_hint()})"
        if running.pid is not None
        else f" (not started by APE for {srv.server_home()}: APE runs will not use it)"
    )
    print(f"running: UI {running.ui_url}  API {running.api_url}{mine}")
    return 0


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
