"""Another local user binds the port of the Prefect server APE starts, or reuses, before it does.

The impostor (:mod:`tests.helpers.impostor`) answers ``/api/health`` with ``true`` and
records every request. Before the fix APE took its health answer for its own server's and
sent it every request of the run with the owner's ``Authorization`` header (exit 0). Now
the socket on the port must be held by the process APE started: the start fails with exit 2
and one line naming the port and the impostor's pid, and the impostor receives nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ape import server
from ape.schemas.errors import ApeError
from ape.tasks.common import ownership
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port, wait_server
from tests.helpers.runner import make_benchmark

pytestmark = pytest.mark.skipif(not ownership.supported(), reason="needs Linux's /proc")


def impostor(record: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.impostor", str(record), *args],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def listening(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening "), line
    return int(line.split()[1])


def received(record: Path) -> list[dict]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_impostor_that_wins_the_port_race_gets_nothing_and_the_run_exits_2(
    tmp_path: Path, kill_at_end: Callable[[subprocess.Popen], subprocess.Popen]
) -> None:
    """The attack as reported: the impostor reads the port from ``prefect server start``'s
    command line (here: the one running in this APE home) and binds it while Prefect imports.
    The port is chosen the default way (4200, or the next free one above it)."""
    home = tmp_path / "ape"
    (home / "server").mkdir(parents=True)
    record = tmp_path / "received.jsonl"
    spy = kill_at_end(impostor(record, "--watch-cwd", str(home / "server")))
    config = make_benchmark(tmp_path / "bench", n=3)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "APE_SERVER_PORT")}
    env.update(APE_HOME=str(home), PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-progress", "--output", str(tmp_path / "out")],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    port = listening(spy)
    assert run.returncode == 2, run.stdout + run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, run.stderr
    assert f"port {port} is held by pid {spy.pid} (python" in errors[0], errors[0]
    assert "nothing was sent to it" in errors[0]
    # the impostor received nothing: no credentials, no flow run, not even a health check
    assert received(record) == []
    # and APE's own server, which lost the race, was stopped and forgotten
    assert server._read_state(home / "server") is None
    assert [pid for pid in _running_in(home / "server") if pid != spy.pid] == []


def _running_in(folder: Path) -> list[int]:
    """The processes whose working folder is ``folder`` (APE starts its server there)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(os.readlink(entry / "cwd")) == folder:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_reused_server_must_hold_its_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``server.json`` names a live process with "prefect" in its command line, but another
    process holds the port: before the fix APE said "Reusing the Prefect server" and its
    runs sent their credentials there. Now start, status and running_api_url refuse it."""
    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    monkeypatch.delenv("APE_SERVER_PORT", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(server, "configured_api_url", lambda: None)
    home = server._private_home()
    record = tmp_path / "received.jsonl"
    spy = impostor(record, "--port", str(free_port()))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "prefect"])
    try:
        port = listening(spy)
        server._write_state(home, server._State(pid=sleeper.pid, host="127.0.0.1", port=port, started_at=0))
        assert server._live_state(home) is not None  # alive and named like prefect: not enough
        messages: list[str] = []
        with pytest.raises(ApeError) as err:
            server.start(port=port, on_status=messages.append)
        assert f"port {port} is held by pid {spy.pid}" in str(err.value)
        assert f"not by the Prefect server this APE home started (pid {sleeper.pid})" in str(err.value)
        assert "\n" not in str(err.value) and messages == []
        with pytest.raises(ApeError, match=f"port {port} is held by pid {spy.pid}"):
            server.running_api_url()  # what ape.run reuses
        with pytest.raises(ApeError, match=f"port {port} is held by pid {spy.pid}"):
            server.ensure_api_url(port=port)
        assert received(record) == []
    finally:
        for proc in (spy, sleeper):
            proc.kill()
            proc.wait()


def test_a_lost_race_fails_fast_and_names_the_holder(tmp_path: Path) -> None:
    """The server a test fixture spawned (``prefect_server`` waits with :func:`wait_server`)
    cannot bind, "address already in use", because another process took the free port: the
    wait ends at once with one line naming it, instead of the tests running against that
    process and hanging in Prefect's client retries."""
    record = tmp_path / "received.jsonl"
    spy = impostor(record, "--port", str(free_port()))
    try:
        port = listening(spy)
        child = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started = time.monotonic()
        with pytest.raises(ApeError, match=f"port {port} is held by pid {spy.pid}") as err:
            wait_server(child, port, f"http://127.0.0.1:{port}/api/health", timeout=60)
        assert time.monotonic() - started < 5
        assert "uid" in str(err.value) and "nothing was sent to it" in str(err.value)
        child.kill()
        child.wait()
        assert received(record) == []
    finally:
        spy.kill()
        spy.wait()


def test_own_listener_is_accepted_and_a_child_process_counts(tmp_path: Path) -> None:
    """A server that listens in a child of the process APE started (uvicorn workers) is its own."""
    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-m', 'http.server', sys.argv[1], '--bind', '127.0.0.1'])\n"
        "child.wait()\n"
    )
    port = free_port()
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ownership.wait_owned(
            parent.pid, "127.0.0.1", port, exited=lambda: None, timeout_s=30, what="the test server", where="x"
        )
        check = ownership.check_port(parent.pid, "127.0.0.1", port)
        assert check.owned and check.stranger is None
        # a process that did not start it (a sibling) does not own it
        sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            other = ownership.check_port(sibling.pid, "127.0.0.1", port)
            assert not other.owned and other.stranger is not None and "uid" in other.stranger
        finally:
            sibling.kill()
            sibling.wait()
    finally:
        os.killpg(parent.pid, 9)
        parent.wait()
