"""Processes and ports for the tests that start servers: a free port, waiting for HTTP, stopping a group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
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
