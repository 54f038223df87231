"""The background catch-up: what the Prefect server has not taken in when a run ends is
sent after it, by a detached ``ape record`` for the run's output folder.

Why: a local server takes in a few hundred task runs a second on one core; a run that goes
faster must not wait for its monitor. The run leaves out what the server cannot take in
while it runs (``ape.tasks.recording.server``), waits a few seconds at its end
(:data:`~ape.tasks.recording.server.END_WAIT_S`) and, when more is left, starts this child
and ends. The child runs the code ``ape record`` runs (``ape.cli.record``: the sessions
left out rebuilt from the saved results, sent with their fixed ids, so nothing is sent
twice) and exits when the server holds them all, or when the server is gone. A killed
child, or a run killed before it started one, is completed by the next ``ape record``:
``stage_chains.json`` names what is left until it has been recorded.

The child is started by the process that ran the flow: ``ape run`` in a terminal, and the
serving process of ``ape serve`` and deployments after each run. It gets the run's API
address and credentials through its environment (never its command line, which other
users can read), writes only to ``record.log`` and ``mirror.json`` (its progress, for ``ape
status``: :mod:`ape.tasks.storage.mirror_status`) in the output folder (owner-only), and
starts a session of its own, so the run's end, a Ctrl-C in the terminal or the terminal's
closing does not stop it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from prefect.settings import get_current_settings

LOG_FILE = "record.log"


def catch_up_env() -> dict[str, str]:
    """The child's environment: this one, with the Prefect API the run reported to."""
    env = dict(os.environ)
    api = get_current_settings().api
    if api.url:
        env["PREFECT_API_URL"] = str(api.url)
    if api.auth_string is not None:
        env["PREFECT_API_AUTH_STRING"] = api.auth_string.get_secret_value()
    if api.key is not None:
        env["PREFECT_API_KEY"] = api.key.get_secret_value()
    return env


def start_catch_up(folder: Path) -> tuple[Path, int]:
    """Start ``ape record folder`` detached, logging to ``folder/record.log``; its log and pid."""
    log_path = folder / LOG_FILE
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = subprocess.Popen(  # noqa: S603 - this interpreter, our own module, no shell
            [sys.executable, "-m", "ape", "record", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            env=catch_up_env(),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(fd)
    # reaped when it exits: a serving process starts one per run and lives on
    threading.Thread(target=child.wait, name="ape-catch-up-reaper", daemon=True).start()
    return log_path, child.pid
