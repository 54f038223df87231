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
        # the impostor tries to bind the port every 10 ms, so it takes it as soon as it is free
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
        saved_before = saved_ids(results)
        os.killpg(state.pid, signal.SIGKILL)  # the server and its workers, for real
        assert spy.stdout is not None
        assert spy.stdout.readline() == f"listening {port}\n"
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
    requests = received(record)
    with_credentials = [r for r in requests if any(k.lower() == "authorization" for k in r["headers"])]
    assert with_credentials == [], f"{len(with_credentials)} of {len(requests)} requests carried credentials"
    assert run.returncode == 1, out + err
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert len(errors) == 1, err
    assert f"error: APE's Prefect server (pid {state.pid}) died mid-run; stopped, and nothing more" in errors[0]
    assert "rerun the same command to resume" in errors[0]
    assert "Traceback" not in out + err
    saved = saved_ids(results)
    assert saved[: len(saved_before)] == saved_before and len(saved) == len(set(saved)) < 40
