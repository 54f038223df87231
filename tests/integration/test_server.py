"""The local Prefect server: start, reuse, status, stop, and the API URL ``ape run`` uses."""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prefect import context as prefect_context
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.utilities.urls import url_for

from ape import server, server_db
from ape.schemas.errors import ApeError
from tests.helpers.processes import free_port


@pytest.fixture
def ape_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated APE_HOME; a server a failing test leaves behind is killed afterwards."""
    home = tmp_path / "ape"
    monkeypatch.setenv("APE_HOME", str(home))
    monkeypatch.delenv("APE_SERVER_PORT", raising=False)
    monkeypatch.delenv("APE_SERVER_RETENTION_DAYS", raising=False)
    yield home
    # Kill whatever a failing test left running: the recorded server and every server
    # this process spawned.
    state = server._read_state(home / "server")
    pids = set(server._SPAWNED) | ({state.pid} if state is not None else set())
    for pid in pids:
        if server._alive(pid) and server._is_prefect_process(pid):
            os.killpg(pid, signal.SIGKILL)
            server._alive(pid)  # reaps our child


@pytest.fixture
def quiet_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No API URL configured, and Prefect's global settings restored after the test."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    original = prefect_context.GLOBAL_SETTINGS_CONTEXT
    monkeypatch.setattr(prefect_context, "GLOBAL_SETTINGS_CONTEXT", original)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        yield


def test_api_urls_reach_wildcard_hosts_through_loopback() -> None:
    assert server.api_url_for("127.0.0.1", 4300) == "http://127.0.0.1:4300/api"
    assert server.api_url_for("0.0.0.0", 4300) == "http://127.0.0.1:4300/api"
    assert server.api_url_for("::", 4300) == "http://[::1]:4300/api"


def test_flow_run_links_follow_the_configured_api() -> None:
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:4999/api"}):
        assert url_for("flow-run", obj_id="f00") == "http://127.0.0.1:4999/runs/flow-run/f00"
    cloud = "https://api.prefect.cloud/api/accounts/a1/workspaces/w1"
    with temporary_settings({PREFECT_API_URL: cloud}):
        assert url_for("flow-run", obj_id="f00") == (
            "https://app.prefect.cloud/account/a1/workspace/w1/runs/flow-run/f00"
        )


def test_home_follows_ape_home(ape_home: Path) -> None:
    assert server.server_home() == ape_home / "server"


def test_bad_port_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APE_SERVER_PORT", "forty-two")
    with pytest.raises(ApeError, match="APE_SERVER_PORT"):
        server.default_port()
    monkeypatch.setenv("APE_SERVER_PORT", "4321")
    assert server.default_port() == 4321


def test_configured_url_wins_and_starts_nothing(ape_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://prefect.example:4200/api")
    messages: list[str] = []
    assert server.ensure_api_url(on_status=messages.append) == "http://prefect.example:4200/api"
    assert messages == ["Using the Prefect API at http://prefect.example:4200/api"]
    assert not (ape_home / "server" / server.STATE_FILE).exists()


def test_stale_state_is_cleared(ape_home: Path) -> None:
    home = ape_home / "server"
    home.mkdir(parents=True)
    port = free_port()
    dead = server._State(pid=2**22 + 12345, host="127.0.0.1", port=port, started_at=0.0)
    server._write_state(home, dead)
    assert server._live_state(home) is None
    assert server.status(port) is None
    assert server.stop() is False
    assert not (home / server.STATE_FILE).exists()


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_stop_never_kills_a_process_that_is_not_prefect(ape_home: Path) -> None:
    """A recorded pid reused by another program (here a sleeper) is left alone."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{sleeper.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        home = ape_home / "server"
        home.mkdir(parents=True)
        stranger = server._State(pid=sleeper.pid, host="127.0.0.1", port=free_port(), started_at=0)
        server._write_state(home, stranger)
        assert server.stop() is False
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_port_taken_by_another_program(ape_home: Path) -> None:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(ApeError, match="not a Prefect server") as err:
            server.start(port=httpd.server_address[1], wait_s=5)
        assert "--port" in str(err.value)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not (ape_home / "server" / server.STATE_FILE).exists()


class _PrefectLike(http.server.BaseHTTPRequestHandler):
    """Answers Prefect's health check: someone else's Prefect server on the port."""

    def do_GET(self) -> None:
        body = b"true" if self.path == "/api/health" else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_prefect_server_this_home_did_not_start_is_not_reused(
    ape_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _PrefectLike)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    foreign = httpd.server_address[1]
    spawned: list[int] = []

    def spawn(home: Path, host: str, port: int) -> object:
        spawned.append(port)
        return type("Proc", (), {"pid": 4242})()

    monkeypatch.setattr(server, "_spawn", spawn)
    monkeypatch.setattr(
        server, "_wait_healthy", lambda home, host, port, pid, proc, wait_s: server._info(home, host, port, pid)
    )
    messages: list[str] = []
    try:
        info = server.start(port=foreign, on_status=messages.append)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert spawned and spawned[0] != foreign  # a server of its own, on another port
    assert info.api_url == f"http://127.0.0.1:{spawned[0]}/api" and info.pid == 4242
    assert messages[0] == (
        f"Port {foreign} has a Prefect server that {ape_home / 'server'} did not start; starting APE's own on "
        f"port {spawned[0]} (set PREFECT_API_URL=http://127.0.0.1:{foreign}/api to use that one)"
    )


def test_server_env_and_status_never_point_at_a_server_ape_did_not_start(
    ape_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ape.cli import server as commands

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr(server, "configured_api_url", lambda: None)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _PrefectLike)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    try:
        assert commands.server_env(port) == 1
        printed = capsys.readouterr()
        assert f"http://127.0.0.1:{port} was not started by APE" in printed.err and printed.out == ""
        assert commands.server("status", port) == 0
        assert "(not started by APE for" in capsys.readouterr().out
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_failed_start_points_to_its_log(ape_home: Path) -> None:
    port = free_port()
    messages: list[str] = []
    with pytest.raises(ApeError, match="failed to start") as err:
        server.start(port=port, host="256.0.0.1", wait_s=60, on_status=messages.append)
    assert messages and messages[0].startswith("Starting a Prefect server")
    log_file = ape_home / "server" / server.LOG_FILE
    assert str(log_file) in str(err.value)
    assert "Invalid host" in log_file.read_text()
    assert server._read_state(ape_home / "server") is None


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_start_reuse_status_stop(ape_home: Path, quiet_settings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("APE_SERVER_PORT", str(port))
    assert server.status(port) is None

    # A server that is still booting (another `ape run` just started it) is waited for,
    # not started twice.
    home = server.server_home()
    home.mkdir(parents=True)
    booting = server._spawn(home, "127.0.0.1", port)
    messages: list[str] = []
    api_url = server.ensure_api_url(on_status=messages.append)
    info = server.status()
    assert info is not None, messages
    assert info.pid == booting.pid, (server._read_state(home), server._alive(booting.pid))
    assert api_url == info.api_url == f"http://127.0.0.1:{port}/api"
    assert info.ui_url == f"http://127.0.0.1:{port}"
    assert info.log_file == ape_home / "server" / "server.log"
    assert messages == [f"Waiting for the Prefect server (pid {booting.pid}) to answer"]
    # Flows in this process (and its subprocesses) now report to the local server.
    assert os.environ["PREFECT_API_URL"] == api_url
    assert prefect_context.GLOBAL_SETTINGS_CONTEXT.settings.api.url == api_url
    # Its database lives in APE_HOME, not in the user's Prefect home, with APE's index for the
    # task-run recorder made once Prefect's migrations have run.
    assert (ape_home / "server" / "prefect").is_dir()
    with contextlib.closing(sqlite3.connect(ape_home / "server" / "prefect" / "prefect.db")) as con:
        assert server_db.recorder_index_present(con)

    again: list[str] = []
    reused = server.start(port=port, on_status=again.append)
    assert reused.pid == info.pid
    auth_file = ape_home / "server" / "auth"
    assert again == [
        f"Reusing the Prefect server at http://127.0.0.1:{port} (the UI's password is the line in {auth_file}); "
        "retention: keeps flow runs 30 days after they end"
    ]
    # this process reports to APE's own server: its links name that file, and open the UI
    # the server's front page opens (Prefect's V2), where a fresh browser gets the login form
    from ape.flows.ui_links import flow_run_link

    assert server.ui_password_file() == auth_file
    with temporary_settings({PREFECT_API_URL: api_url}):  # as a flow run of this process sees it
        assert flow_run_link("f00") == f"http://127.0.0.1:{port}/v2/runs/flow-run/f00"

    # Without APE_SERVER_PORT, later runs find the server ape runs, whatever its port.
    monkeypatch.delenv("APE_SERVER_PORT")
    monkeypatch.delenv("PREFECT_API_URL")
    assert server.preferred_port() == port
    assert server.running_api_url() == api_url
    # ape.run reuses it (and never starts one): its flows report there
    from ape.launch import connect

    connect("reuse")
    assert os.environ["PREFECT_API_URL"] == api_url
    monkeypatch.delenv("PREFECT_API_URL")
    assert server.ensure_api_url() == api_url
    # ape manages one server: a second one on another port is refused, not orphaned.
    with pytest.raises(ApeError, match=f"already runs a Prefect server on port {port}"):
        server.start(port=free_port())

    assert server.stop() is True
    assert server.status(port) is None
    assert server.running_api_url() is None
    assert not server._alive(info.pid)
    assert server.stop() is False


def test_ui_api_url_and_env_line() -> None:
    # the UI calls the API where the server listens; bound to every interface, it calls
    # the API relative to the page, so any name the browser used works
    assert server.ui_api_url_for("127.0.0.1", 4311) == "http://127.0.0.1:4311/api"
    assert server.ui_api_url_for("0.0.0.0", 4311) == "/api"
    assert server.env_line("http://127.0.0.1:4311/api") == "export PREFECT_API_URL=http://127.0.0.1:4311/api"
    assert server.env_line("http://h/a b") == "export PREFECT_API_URL='http://h/a b'"


def test_serve_hint_names_the_api_url() -> None:
    from ape.cli.serve import run_hint

    lines = run_hint("http://127.0.0.1:4311/api", "benchmark", "my bench")
    assert lines[1].strip() == "export PREFECT_API_URL=http://127.0.0.1:4311/api"
    assert lines[2].strip() == "prefect deployment run 'benchmark/my bench'"
    # for APE's own server the hint never prints its credentials: `ape server env` does
    ours = run_hint("http://127.0.0.1:4311/api", "benchmark", "my bench", ape_server=True)
    assert ours[1].strip() == 'eval "$(ape server env)"'


def test_credentials_are_made_once_and_kept_private(ape_home: Path) -> None:
    first = server.auth_string()
    assert first.startswith("ape:") and len(first) > 20
    assert server.auth_string() == first  # one value per APE home
    path = ape_home / "server" / server.AUTH_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert (ape_home / "server").stat().st_mode & 0o777 == 0o700
    assert ape_home.stat().st_mode & 0o777 == 0o700
    # a file another user could read is narrowed again
    path.chmod(0o644)
    assert server.auth_string() == first and path.stat().st_mode & 0o777 == 0o600
    assert server.env_line("http://h/api", first).splitlines()[1] == f"export PREFECT_API_AUTH_STRING={first}"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ape_server_requires_credentials_and_refuses_foreign_origins(
    ape_home: Path, quiet_settings: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ape.cli import server as commands

    port = free_port()
    monkeypatch.setenv("APE_SERVER_PORT", str(port))
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)
    api_url = server.ensure_api_url()
    try:
        # anyone without the credentials, as another local user would call it: reads get 401,
        # writes are stopped even earlier by the CSRF check (403), whose token needs the credentials
        for path in ("/deployments/filter", "/flow_runs/filter", "/artifacts/filter", "/logs/filter"):
            anonymous = httpx.post(f"{api_url}{path}", json={}, timeout=10, trust_env=False)
            assert anonymous.status_code in (401, 403), (path, anonymous.text)
            assert "parameters" not in anonymous.text
        assert httpx.get(f"{api_url}/csrf-token?client=x", timeout=10, trust_env=False).status_code == 401
        assert httpx.get(f"{api_url}/admin/settings", timeout=10, trust_env=False).status_code == 401
        wrong = httpx.get(f"{api_url}/admin/settings", auth=("ape", "guess"), timeout=10, trust_env=False)
        assert wrong.status_code == 401
        # a page on another origin gets no CORS grant; the UI's own origin does
        preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
        evil = httpx.options(
            f"{api_url}/flow_runs/filter", headers={"Origin": "http://evil.example", **preflight}, trust_env=False
        )
        assert evil.headers.get("access-control-allow-origin") not in ("*", "http://evil.example")
        own = httpx.options(
            f"{api_url}/flow_runs/filter", headers={"Origin": f"http://127.0.0.1:{port}", **preflight}, trust_env=False
        )
        assert own.headers.get("access-control-allow-origin") == f"http://127.0.0.1:{port}"
        # APE's own clients were handed the credentials: a process it starts (a Dask worker,
        # a flow-run process) inherits them, and its flow run reaches the server
        assert os.environ["PREFECT_API_AUTH_STRING"] == server.auth_string()
        script = (
            "from prefect import flow\n"
            "@flow(name='ape-auth-probe', persist_result=False)\n"
            "def probe():\n    return 7\n"
            "print(probe(return_state=True).state_details.flow_run_id)\n"
        )
        child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr[-2000:]
        flow_run_id = child.stdout.strip().splitlines()[-1]
        headers = server.auth_headers()
        run = httpx.get(f"{api_url}/flow_runs/{flow_run_id}", headers=headers, timeout=10, trust_env=False)
        assert run.status_code == 200 and run.json()["state"]["type"] == "COMPLETED"
        assert httpx.get(f"{api_url}/flow_runs/{flow_run_id}", timeout=10, trust_env=False).status_code == 401
        # a new shell gets both lines
        monkeypatch.delenv("PREFECT_API_URL")
        assert commands.server_env(port) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert lines == [f"export PREFECT_API_URL={api_url}", f"export PREFECT_API_AUTH_STRING={server.auth_string()}"]
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_server_on_another_port_serves_a_ui_that_calls_it(
    ape_home: Path, quiet_settings: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ape.cli import server as commands

    port = free_port()
    info = server.start(port=port)
    try:
        settings = httpx.get(f"{info.ui_url}/ui-settings", timeout=10, trust_env=False).json()
        assert settings["api_url"] == f"http://127.0.0.1:{port}/api"
        monkeypatch.delenv("PREFECT_API_URL", raising=False)  # `ape server env` finds it by port
        assert commands.server_env(port) == 0
        assert capsys.readouterr().out.strip().splitlines()[0] == f"export PREFECT_API_URL=http://127.0.0.1:{port}/api"
    finally:
        server.stop()
    assert commands.server_env(port) == 1
