"""The watchdog of a run's Prefect API (ape.watchdog), against real processes on free ports:
the server APE started is watched as a process and its port proven on every probe; a busy
server that is alive and holds its port gets more patience than a dead one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ape import server
from ape.server import OwnServer
from ape.tasks.common import ownership
from ape.tasks.common.exits import ProcessExit
from ape.tasks.storage import prefect_internals
from ape.watchdog import ApiWatchdog
from tests.helpers.processes import free_port

linux = pytest.mark.skipif(not ownership.supported(), reason="needs Linux's /proc")


class Watched(ApiWatchdog):
    """The watchdog, with its end recorded instead of ending the test process."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.probes = 0
        self.ended: str | None = None
        self.probes_at_end = 0
        self.done = threading.Event()

    def _probe(self) -> int:
        self.probes += 1
        return super()._probe()

    def _end(self, reason: str) -> None:
        self.ended, self.probes_at_end = reason, self.probes
        self.done.set()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    prefect_internals._GUARD.clear()


def serve(processes: list[subprocess.Popen[bytes]], port: int, script: str) -> subprocess.Popen[bytes]:
    """A process listening on ``port`` (``script`` gets the port as argv[1]), once it listens."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(port)])
    processes.append(proc)
    ownership.wait_owned(proc.pid, "127.0.0.1", port, exited=lambda: None, timeout_s=60, what="it", where="test")
    return proc


HEALTHY = (
    "import sys, http.server\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.send_header('Content-Length', '4'); self.end_headers()\n"
    "        self.wfile.write(b'true')\n"
    "    def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
)
# listens but never accepts: a connection waits in the backlog and its request is never answered
BUSY = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(64)\n"
    "time.sleep(600)\n"
)


def watchdog(port: int, owner: int | None, **kwargs: object) -> Watched:
    own = OwnServer(pid=owner, host="127.0.0.1", port=port) if owner is not None else None
    options: dict[str, object] = {"interval_s": 0.05, "failures": 2, "owned_failures": 8, "probe_timeout_s": 0.3}
    options.update(kwargs)
    return Watched(f"http://127.0.0.1:{port}/api", Path("out"), owner=own, **options)


def test_process_exit_is_seen_at_once() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        seen = ProcessExit(proc.pid, server.process_alive)
        assert seen.pidfd == hasattr(os, "pidfd_open")
        assert not seen.exited() and not seen.wait(0.1)
        started = time.monotonic()
        proc.kill()  # not reaped: a zombie has exited too
        assert seen.wait(30)
        assert time.monotonic() - started < 5 and seen.exited()
    finally:
        proc.kill()
        proc.wait()


def test_without_pidfd_liveness_is_polled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    alive = {"now": True}
    seen = ProcessExit(123, lambda pid: alive["now"], poll_s=0.01)
    assert not seen.pidfd and not seen.wait(0.05)
    alive["now"] = False
    assert seen.wait(5) and seen.exited()


@linux
def test_the_server_s_death_stops_every_request_and_ends_the_run(processes: list) -> None:
    port = free_port()
    own = serve(processes, port, HEALTHY)
    dog = watchdog(port, own.pid, interval_s=30.0)  # a probe every 30 s: only the pidfd can be this fast
    with dog:
        assert dog.gone() is None and prefect_internals._GUARD
        time.sleep(0.1)
        own.kill()
        assert dog.done.wait(20)
        assert dog.ended == f"APE's Prefect server (pid {own.pid}) died mid-run"
        assert dog.gone() == dog.ended  # what the guard asks before every request
        assert dog.probes_at_end == 0


@linux
def test_a_port_held_by_another_process_ends_the_run_naming_it(processes: list) -> None:
    port = free_port()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    processes.append(sleeper)
    stranger = serve(processes, port, HEALTHY)  # answers /health with true
    dog = watchdog(port, sleeper.pid)
    with dog:
        assert dog.done.wait(20)
    assert dog.ended is not None and dog.ended.startswith(
        f"port {port} of APE's Prefect server (pid {sleeper.pid}) is held by pid {stranger.pid} (python"
    )
    assert "uid" in dog.ended and dog.probes_at_end == 1


@linux
def test_a_busy_server_that_holds_its_port_gets_more_patience(processes: list) -> None:
    port = free_port()
    busy = serve(processes, port, BUSY)
    owned = watchdog(port, busy.pid)
    with owned:
        assert owned.done.wait(60)
    assert owned.ended == f"lost the Prefect API (http://127.0.0.1:{port}/api) mid-run"
    assert owned.probes_at_end == 8  # owned_failures, not failures
    # the same silence from a server APE did not start: today's patience
    plain = watchdog(port, None)
    with plain:
        assert plain.done.wait(60)
    assert plain.probes_at_end == 2


def test_own_server_is_only_the_one_this_home_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    home = server._private_home()
    port = free_port()  # recorded, never bound
    assert server.own_server(f"http://127.0.0.1:{port}/api") is None
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "prefect"])
    try:
        server._write_state(home, server._State(pid=sleeper.pid, host="0.0.0.0", port=port, started_at=0))
        assert server.own_server(f"http://127.0.0.1:{port}/api/") == OwnServer(
            pid=sleeper.pid, host="127.0.0.1", port=port
        )
        assert server.own_server(f"http://127.0.0.1:{port + 1}/api") is None  # a user's own server
    finally:
        sleeper.kill()
        sleeper.wait()
    assert server.own_server(f"http://127.0.0.1:{port}/api") is None  # it ended: nothing to watch


@linux
def test_an_address_of_this_home_s_server_is_proven_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: list
) -> None:
    """``prove_api``: the address the background catch-up gets in its environment is that of
    the server this APE home started; it must be that process, alive and holding its port."""
    from ape.schemas.errors import ApeError

    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    home = server._private_home()
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    assert server.prove_api(url) is None  # nothing recorded: a user's own API, nothing to prove
    own = subprocess.Popen([sys.executable, "-c", HEALTHY, str(port), "prefect"])
    processes.append(own)
    ownership.wait_owned(own.pid, "127.0.0.1", port, exited=lambda: None, timeout_s=60, what="it", where="test")
    server._write_state(home, server._State(pid=own.pid, host="127.0.0.1", port=port, started_at=0))
    assert server.prove_api(url + "/") == OwnServer(pid=own.pid, host="127.0.0.1", port=port)
    assert server.prove_api(f"http://127.0.0.1:{port + 1}/api") is None  # another server
    own.kill()
    own.wait()
    with pytest.raises(ApeError, match=rf"APE's Prefect server at {url} \(pid {own.pid}\) is not running"):
        server.prove_api(url)
    monkeypatch.setenv("PREFECT_API_URL", url)  # as `ape server env` set it, or the catch-up has it
    for connect in (server.ensure_api_url, server.existing_api_url):
        with pytest.raises(ApeError, match="is not running; nothing was sent to its port"):
            connect()
    stranger = serve(processes, port, HEALTHY)  # the dead server's port, taken by another process
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "prefect"])
    processes.append(sleeper)
    server._write_state(home, server._State(pid=sleeper.pid, host="127.0.0.1", port=port, started_at=0))
    with pytest.raises(ApeError, match=rf"port {port} is held by pid {stranger.pid}"):
        server.prove_api(url)
    stranger.kill()
    stranger.wait()
    with pytest.raises(ApeError, match=rf"pid {sleeper.pid}\) does not listen on port {port}"):
        server.prove_api(url)


LAST_WORDS = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from ape.server import OwnServer\n"
    "from ape.watchdog import ApiWatchdog\n"
    "port, pid = int(sys.argv[1]), int(sys.argv[2])\n"
    "said = lambda reason: sys.stderr.write('last words: ' + reason + '\\n')\n"
    "dog = ApiWatchdog(f'http://127.0.0.1:{port}/api', Path('out'),\n"
    "                  owner=OwnServer(pid=pid, host='127.0.0.1', port=port), last_words=said)\n"
    "with dog:\n"
    "    print('watching', flush=True)\n"
    "    time.sleep(120)\n"
)


@linux
def test_a_command_s_own_last_words_replace_the_run_s_line(processes: list) -> None:
    """``ape record`` ends through the watchdog with its own line (what it left listed):
    the watchdog tells it why, prints nothing of its own and ends the process with exit 1."""
    port = free_port()
    own = serve(processes, port, HEALTHY)
    dog = subprocess.Popen(
        [sys.executable, "-c", LAST_WORDS, str(port), str(own.pid)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(dog)  # type: ignore[arg-type]
    assert dog.stdout is not None and dog.stdout.readline() == "watching\n"
    own.kill()
    _, err = dog.communicate(timeout=60)
    assert dog.returncode == 1, err
    assert err.strip() == f"last words: APE's Prefect server (pid {own.pid}) died mid-run", err


@linux
def test_a_zombie_server_is_not_alive() -> None:
    """A killed server that is no child of this process waits as a zombie until init reaps it;
    ``ape server start`` took it for a running server and failed waiting for it to answer."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{proc.pid}/stat")
    try:
        assert server.process_alive(proc.pid) or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":  # exited, not reaped: a zombie
            time.sleep(0.01)
        assert not server.process_alive(proc.pid)
    finally:
        proc.wait()
    assert not server.process_alive(proc.pid)
