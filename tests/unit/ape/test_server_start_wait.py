"""A local server start waits while the server's log grows, and names APE_SERVER_START_TIMEOUT.

A real child process stands in for ``prefect server start``: it writes to the server log
for longer than the wait, then listens and answers the health check. On a busy machine a
server that is still importing and migrating used to be killed after a fixed 90 s, with no
way named to give it longer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ape import server
from ape.schemas.errors import ApeError
from tests.helpers.processes import free_port

SLOW_SERVER = """
import http.server, sys, time
log, port, chatty_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
started = time.monotonic()
while time.monotonic() - started < chatty_s:  # importing, migrating: the log grows
    with open(log, "a") as handle:
        handle.write("starting...\\n")
    time.sleep(0.2)
if chatty_s < 0:
    time.sleep(3600)  # hangs without a word

class Health(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "4")
        self.end_headers()
        self.wfile.write(b"true")

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def spawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    started: list[subprocess.Popen[bytes]] = []

    def run(chatty_s: float) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_SERVER, str(tmp_path / server.LOG_FILE), str(port), str(chatty_s)],
            start_new_session=True,
        )
        monkeypatch.setitem(server._SPAWNED, proc.pid, proc)
        started.append(proc)
        return proc, port

    yield run
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_a_start_whose_log_grows_is_waited_for_past_the_timeout(tmp_path: Path, spawn) -> None:
    proc, port = spawn(3.0)  # three seconds of log lines before it listens; the wait is one
    info = server._wait_healthy(tmp_path, "127.0.0.1", port, proc.pid, proc, wait_s=1.0)
    assert info.api_url == server.api_url_for("127.0.0.1", port) and proc.poll() is None


def test_a_silent_start_stops_after_the_wait_naming_the_setting(tmp_path: Path, spawn) -> None:
    proc, port = spawn(-1.0)  # writes nothing, never listens
    with pytest.raises(ApeError) as raised:
        server._wait_healthy(tmp_path, "127.0.0.1", port, proc.pid, proc, wait_s=1.0)
    assert "APE_SERVER_START_TIMEOUT=300" in str(raised.value)
    proc.wait(timeout=30)  # it was stopped


def test_the_wait_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(server.START_TIMEOUT_ENV, raising=False)
    assert server.start_wait_s() == server.DEFAULT_START_WAIT_S
    monkeypatch.setenv(server.START_TIMEOUT_ENV, "240")
    assert server.start_wait_s() == 240.0
    monkeypatch.setenv(server.START_TIMEOUT_ENV, "soon")
    with pytest.raises(ApeError, match="APE_SERVER_START_TIMEOUT='soon' is not a number of seconds"):
        server.start_wait_s()
