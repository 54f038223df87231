"""Ctrl-C on ``ape serve`` during a run, as a terminal sends it (SIGINT to the whole process
group): one line, no traceback, the run in progress ends Cancelled and never enters the
history."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.prefect_api import PrefectApi
from tests.helpers.processes import start_logged, stop_group
from tests.helpers.runner import make_benchmark


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_stops_serving_with_one_line_and_cancels_the_run(prefect_server: str, tmp_path: Path) -> None:
    # a slow model, so the run is surely in progress when Ctrl-C comes
    config = make_benchmark(
        tmp_path, n=40, model_args='behaviour = "arithmetic", latency_s = 0.5', run="solver_workers = 1"
    )
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PREFECT_RUNNER_POLL_FREQUENCY="1")
    log_path = tmp_path / "serve.log"
    command = [sys.executable, "-m", "ape", "serve", str(config), "--name", "stoppable", "--interval", "3600"]
    proc = start_logged(command, log_path, cwd=REPO_ROOT, env=env)
    api = PrefectApi(prefect_server)
    try:
        deadline = time.monotonic() + 120
        while (found := api.get("/deployments/name/benchmark/stoppable")).status_code != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(1)
        created = api.post(f"/deployments/{found.json()['id']}/create_flow_run", json={"parameters": {}})
        assert created.status_code == 201, created.text
        results = tmp_path / "out" / "runs"
        deadline = time.monotonic() + 150
        while not any(results.glob("*/results.jsonl")):  # the run has saved an item
            assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        code = proc.wait(timeout=90)
    finally:
        stop_group(proc, 5)
        api.close()
    text = log_path.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert "stopped serving 'benchmark/stoppable'" in text
    # the run in progress was cancelled, not left Running and not counted in the history
    with PrefectApi(prefect_server) as client:
        run = client.get(f"/flow_runs/{created.json()['id']}").json()
    assert run["state"]["type"] in ("CANCELLED", "CANCELLING"), run["state"]
    assert not (tmp_path / "out" / "history" / "runs.parquet").exists()
