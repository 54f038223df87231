"""Processes and ports for the tests that start servers: a free port, waiting for HTTP, stopping a group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ape.tasks.common import ownership


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped (what a kill -9 leaves named in a file)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def free_port() -> int:
    """A port nothing listens on now. Another process may take it before the server the test
    starts binds it: start that server with :func:`wait_server`, which notices."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def wait_server(proc: subprocess.Popen, port: int, url: str, *, log: Path | None = None, timeout: float = 90.0) -> None:
    """Wait until the server ``proc`` started (or a child of it) listens on 127.0.0.1:``port``,
    then until ``url`` answers 200.

    A server that lost its port to another process ("address already in use" under load)
    fails here at once, naming what holds the port, instead of the test talking to that
    process's server and hanging in its client's retries. Without /proc, the HTTP wait alone.
    """
    if ownership.supported():
        ownership.wait_owned(
            proc.pid,
            "127.0.0.1",
            port,
            exited=lambda: None if proc.poll() is None else f"exited with code {proc.returncode}",
            timeout_s=timeout,
            what=f"the test's server (pid {proc.pid})",
            where=str(log) if log is not None else "test server",
            log_line=lambda: _last_line(log),
            hint="another process took the free port first; run the tests again",
        )
    wait_http(url, timeout)


def _last_line(log: Path | None) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines() if log is not None else []
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def stop_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM a process started in its own session and its group (children such as flow-run
    processes included), then SIGKILL what lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what it left running in its group
    proc.wait()


def start_logged(command: list[str], log_path: Path, *, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start ``command`` in a session of its own (so :func:`stop_group` reaches its children),
    its output in ``log_path`` and no stdin: how the tests run ``ape serve`` in the background."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_while_running(
    done: Callable[[], object], proc: subprocess.Popen, log_path: Path, *, timeout: float, poll: float = 0.5
) -> None:
    """Poll ``done`` until it is true; fail with the log's tail when ``proc`` exits first or
    ``timeout`` seconds pass (a command under test that dies must not leave a test waiting)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
        time.sleep(poll)


def start_ape(config: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``ape run CONFIG ARGS`` as a real child in its own session, from the config's folder,
    stdout and stderr in one pipe: a run the test watches, controls, or kills with its group."""
    return subprocess.Popen(
        [sys.executable, "-m", "ape", "run", str(config), *args],
        cwd=config.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
