"""Shared fixtures: an isolated Prefect home and, for tests that need one, a real Prefect server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from llm_server import llama_server  # noqa: F401 - a fixture for the tests of the real LLM

ROOT = Path(__file__).resolve().parent.parent

# Keep tests away from the user's ~/.prefect and from the network.
_HOME = Path(tempfile.mkdtemp(prefix="ape-test-prefect-"))
os.environ.setdefault("PREFECT_HOME", str(_HOME))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


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


@pytest.fixture(scope="session")
def prefect_server():
    """A real ``prefect server start`` on a free loopback port; yields its API URL.

    Also sets PREFECT_API_URL for the test process, so flows run against it.
    """
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="ape-test-server-"))
    env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api"
    try:
        wait_http(f"{api}/health")
    except RuntimeError:
        proc.kill()
        raise
    old = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = api
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api}):
        yield api
    if old is None:
        os.environ.pop("PREFECT_API_URL", None)
    else:
        os.environ["PREFECT_API_URL"] = old
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    shutil.rmtree(home, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Tests that start a real Prefect server are slow: `pytest -m "not slow"` is the quick loop."""
    for item in items:
        if "prefect_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
