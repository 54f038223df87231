"""Ctrl-C on ``ape serve`` during a run, as a terminal sends it (SIGINT to the whole process
group): one line, no traceback, the run in progress ends Cancelled and never enters the
history."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.prefect_api import PrefectApi
from tests.helpers.processes import start_logged, stop_group, wait_while_running
from tests.helpers.runner import make_benchmark


def serve(config: Path, prefect_server: str, log_path: Path, name: str, *schedule: str) -> subprocess.Popen:
    """`ape serve CONFIG --name NAME SCHEDULE...` as a real process group, logging to ``log_path``."""
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PREFECT_RUNNER_POLL_FREQUENCY="1")
    command = [sys.executable, "-m", "ape", "serve", str(config), "--name", name, *schedule]
    return start_logged(command, log_path, cwd=REPO_ROOT, env=env)


def start_a_run(api: PrefectApi, name: str, proc: subprocess.Popen, log_path: Path) -> httpx.Response:
    """Once the deployment ``benchmark/NAME`` exists, one flow run of it started by hand."""
    deployment = f"/deployments/name/benchmark/{name}"
    wait_while_running(lambda: api.get(deployment).status_code == 200, proc, log_path, timeout=120, poll=1)
    found = api.get(deployment)
    created = api.post(f"/deployments/{found.json()['id']}/create_flow_run", json={"parameters": {}})
    assert created.status_code == 201, created.text
    return created


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_stops_serving_with_one_line_and_cancels_the_run(prefect_server: str, tmp_path: Path) -> None:
    # a slow model, so the run is surely in progress when Ctrl-C comes
    config = make_benchmark(
        tmp_path, n=40, model_args='behaviour = "arithmetic", latency_s = 0.5', run="solver_workers = 1"
    )
    log_path = tmp_path / "serve.log"
    proc = serve(config, prefect_server, log_path, "stoppable", "--interval", "3600")
    api = PrefectApi(prefect_server)
    try:
        created = start_a_run(api, "stoppable", proc, log_path)
        results = tmp_path / "out" / "runs"
        # the run has saved an item
        wait_while_running(lambda: any(results.glob("*/results.jsonl")), proc, log_path, timeout=150)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        code = proc.wait(timeout=90)
    finally:
        stop_group(proc, 5)
        api.close()
    text = log_path.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    # the run in progress was cancelled, not left Running and not counted in the history
    with PrefectApi(prefect_server) as client:
        run = client.get(f"/flow_runs/{created.json()['id']}").json()
    assert run["state"]["type"] in ("CANCELLED", "CANCELLING"), run["state"]
    # and the last line says so, naming it
    assert (
        f"stopped serving 'benchmark/stoppable': the run in progress ('{run['name']}') was cancelled "
        "and does not enter the history; its schedule is paused until 'ape serve' runs again"
    ) in text, text[-3000:]
    assert not (tmp_path / "out" / "history" / "runs.parquet").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_between_runs_says_no_run_was_in_progress(prefect_server: str, tmp_path: Path) -> None:
    """Ctrl-C after a run finished and before the next: no run was cancelled, and the line
    says that (it used to say "a run in progress was cancelled" whatever happened)."""
    config = make_benchmark(tmp_path, n=3)
    log_path = tmp_path / "serve.log"
    # a schedule whose next run is far away (1 January), and one run started by hand
    proc = serve(config, prefect_server, log_path, "idle", "--cron", "0 0 1 1 *")
    api = PrefectApi(prefect_server)
    try:
        created = start_a_run(api, "idle", proc, log_path)
        run_url = f"/flow_runs/{created.json()['id']}"
        wait_while_running(lambda: api.get(run_url).json()["state"]["type"] == "COMPLETED", proc, log_path, timeout=150)
        time.sleep(2)  # between runs: the runner idles
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        code = proc.wait(timeout=90)
    finally:
        stop_group(proc, 5)
        api.close()
    text = log_path.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert (
        "stopped serving 'benchmark/idle': no run was in progress; its schedule is paused until 'ape serve' runs again"
    ) in text, text[-3000:]
    assert "cancelled" not in text.split("stopped serving", 1)[1], text[-3000:]
    # the finished run is in the history
    assert (tmp_path / "out" / "history" / "runs.parquet").exists()
