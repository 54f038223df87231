"""APE's own Prefect server dies mid-run and another process binds its port at once.

The impostor (:mod:`tests.helpers.impostor`) answers ``/api/health`` with ``true`` and
records every request with its headers. Before the fix the run's watchdog took that answer
for its server's, the run went on, and Prefect's clients retried their requests there with
the server's ``Authorization`` header (hundreds of them). Now the run sees its server's
process end (a pidfd), refuses every further request of Prefect's clients before it is
sent, and ends with exit 1 and one line; what it saved stays.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ape import server
from ape.tasks.common import ownership
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port
from tests.helpers.runner import make_benchmark

pytestmark = pytest.mark.skipif(not ownership.supported(), reason="needs Linux's /proc")


def saved_ids(path: Path) -> list[str]:
    """Item ids of the complete lines of a results file; every complete line must parse."""
    if not path.exists():
        return []
    return [json.loads(line)["item_id"] for line in path.read_text().split("\n")[:-1] if line.strip()]


def received(record: Path) -> list[dict]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def _ape(folder: Path, env: dict, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m ape ARGS`` in ``folder``, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "ape", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )


def assert_no_credentials(record: Path) -> None:
    """No request the impostor received carried the server's credentials."""
    requests = received(record)
    with_credentials = [r for r in requests if any(k.lower() == "authorization" for k in r["headers"])]
    assert with_credentials == [], f"{len(with_credentials)} of {len(requests)} requests carried credentials"


def _kill_and_take_port(
    kill_at_end: Callable[[subprocess.Popen], subprocess.Popen], server_pid: int, port: int, record: Path, env: dict
) -> subprocess.Popen:
    """Kill APE's server (its process group: the server and its workers, for real) while the
    impostor tries to bind its port every 10 ms, so it takes it as soon as it is free; the
    impostor, once it listens there."""
    spy = kill_at_end(
        subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.impostor", str(record), "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    )
    os.killpg(server_pid, signal.SIGKILL)
    assert spy.stdout is not None
    assert spy.stdout.readline() == f"listening {port}\n"
    return spy


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_dead_server_s_port_taken_by_an_impostor_gets_no_credentials(
    tmp_path: Path, kill_at_end: Callable[[subprocess.Popen], subprocess.Popen]
) -> None:
    home = tmp_path / "ape"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING")}
    env.update(APE_HOME=str(home), APE_SERVER_PORT=str(port), PYTHONPATH=str(REPO_ROOT))
    config = make_benchmark(
        tmp_path / "bench", n=40, model_args='behaviour = "arithmetic", latency_s = 1.0', run="solver_workers = 2"
    )
    results = tmp_path / "bench" / "out" / "results.jsonl"
    run = kill_at_end(
        subprocess.Popen(
            [sys.executable, "-m", "ape", "run", str(config), "--no-progress"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    )
    record = tmp_path / "received.jsonl"
    state = None
    try:
        deadline = time.monotonic() + 200
        while len(saved_ids(results)) < 6:  # the server started (by this run) and items are being saved
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the run saved too little in time"
            time.sleep(0.05)
        state = server._read_state(home / "server")
        assert state is not None and state.port == port
        saved_before = saved_ids(results)
        _kill_and_take_port(kill_at_end, state.pid, port, record, env)
        try:
            out, err = run.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            run.kill()
            out, err = run.communicate()
            pytest.fail(f"the run went on with the impostor: {len(received(record))} requests reached it")
    finally:
        if state is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(state.pid, signal.SIGKILL)
    assert_no_credentials(record)
    assert run.returncode == 1, out + err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert len(errors) == 1, err
    assert f"error: APE's Prefect server (pid {state.pid}) died mid-run; stopped, and nothing more" in errors[0]
    assert "rerun the same command to resume" in errors[0]
    assert "Traceback" not in out + err
    saved = saved_ids(results)
    assert saved[: len(saved_before)] == saved_before and len(saved) == len(set(saved)) < 40


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_catch_up_gives_an_impostor_on_its_dead_server_s_port_no_credentials(
    tmp_path: Path, kill_at_end: Callable[[subprocess.Popen], subprocess.Popen]
) -> None:
    """The background catch-up (a detached ``ape record``, which has the server's address and
    credentials in its environment) is sending when APE's server is killed and another
    process binds its port at once. Before the fix Prefect's client retried there, with the
    ``Authorization`` header, and went on sending to it. Now the catch-up sees its server's
    process end, sends nothing more, says so once in ``record.log`` and ``mirror.json``, and
    ends; once a server runs again ``ape record`` completes the mirror."""
    home = tmp_path / "ape"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING")}
    # room for only 20 task runs of lag: most sessions are left to the catch-up
    env.update(APE_HOME=str(home), APE_SERVER_PORT=str(port), PYTHONPATH=str(REPO_ROOT), APE_RECORD_MAX_LAG="20")
    n = 2000
    bench = tmp_path / "bench"
    out = bench / "out"
    make_benchmark(bench, n, model_args='behaviour = "arithmetic"', run="solver_workers = 16", id_prefix="gone")
    record = tmp_path / "received.jsonl"
    state = None
    try:
        done = _ape(bench, env, "run", "config.toml", "--no-progress", timeout=400)
        said = done.stdout + done.stderr
        assert done.returncode == 0, said[-3000:]
        found = re.search(r"follows in the background \(pid (\d+)\)", said)
        assert found, said[-3000:]
        catch_up = int(found.group(1))

        def sending() -> bool:
            try:
                mirror = json.loads((out / "mirror.json").read_text())
            except (OSError, ValueError):
                return False
            return mirror["state"] == "sending" and mirror["chains_done"] > 0

        deadline = time.monotonic() + 200
        while not sending():  # the catch-up is sending: the server holds some of its chains
            assert server.process_alive(catch_up), (out / "record.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the catch-up did not start sending"
            time.sleep(0.05)
        state = server._read_state(home / "server")
        assert state is not None and state.port == port
        spy = _kill_and_take_port(kill_at_end, state.pid, port, record, env)
        deadline = time.monotonic() + 300
        while server.process_alive(catch_up):
            assert time.monotonic() < deadline, (
                f"the catch-up went on: {len(received(record))} requests reached the port"
            )
            time.sleep(0.1)
        spy.kill()
        spy.wait()
    finally:
        if state is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(state.pid, signal.SIGKILL)
    assert_no_credentials(record)
    log = (out / "record.log").read_text()
    errors = [line for line in log.splitlines() if line.startswith("error")]
    assert len(errors) == 1, log[-3000:]
    assert f"error: APE's Prefect server (pid {state.pid}) died mid-run; the chains not yet recorded" in errors[0]
    assert json.loads((out / "mirror.json").read_text())["state"] == "server_gone"
    # the server back (the same database): `ape record` sends what the catch-up could not
    started = _ape(bench, env, "server", "start", timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        again = _ape(bench, env, "record", "out", timeout=600)
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
        status = _ape(bench, env, "status", "out", timeout=120)
        assert f"UI: all {n:,} session chains recorded (completed" in status.stdout, status.stdout + status.stderr
    finally:
        _ape(bench, env, "server", "stop", timeout=120)
