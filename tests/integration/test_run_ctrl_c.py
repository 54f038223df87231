"""Ctrl-C on a real ``ape run`` mid-run, as a terminal sends it (SIGINT to the process group):
APE's own line is the only word about it. Prefect's engine used to log two ERROR lines
"Crash detected! Execution was aborted by an interrupt signal." (the flow and its subflow)
before it, which read as a failed run; the flow run's logs in the UI keep them."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.prefect_api import PrefectApi
from tests.helpers.processes import start_logged, stop_group, wait_while_running
from tests.helpers.runner import make_benchmark


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_of_ape_run_prints_only_apes_line(prefect_server: str, tmp_path: Path) -> None:
    # a slow model, so the run is surely in progress when Ctrl-C comes
    config = make_benchmark(
        tmp_path, n=200, model_args='behaviour = "arithmetic", latency_s = 0.5', run="solver_workers = 1"
    )
    env = dict(os.environ, PREFECT_API_URL=prefect_server)
    log_path = tmp_path / "run.log"
    command = [sys.executable, "-m", "ape", "run", str(config), "--no-progress"]
    proc = start_logged(command, log_path, cwd=REPO_ROOT, env=env)
    results = tmp_path / "out" / "results.jsonl"
    try:
        # items are being saved
        saving = lambda: results.exists() and results.read_text().count("\n") >= 2  # noqa: E731
        wait_while_running(saving, proc, log_path, timeout=150)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        code = proc.wait(timeout=90)
    finally:
        stop_group(proc, 5)
    text = log_path.read_text(errors="replace")
    assert code == 130, text[-3000:]
    assert "Crash detected" not in text, text[-3000:]
    assert "ERROR" not in text and "Traceback" not in text, text[-3000:]
    assert text.rstrip().splitlines()[-1] == (
        "interrupted: finished items are saved; run the same command again to resume"
    ), text[-3000:]
    # the UI keeps the engine's account: the flow run's logs hold its crash line
    flow_run_id = re.search(r"runs/flow-run/([0-9a-f-]{36})", text).group(1)
    with PrefectApi(prefect_server) as api:
        deadline = time.monotonic() + 30
        while True:
            logs = api.post("/logs/filter", json={"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200})
            messages = [entry["message"] for entry in logs.json()]
            if any(m.startswith("Crash detected!") for m in messages) or time.monotonic() > deadline:
                break
            time.sleep(1)
        state = api.get(f"/flow_runs/{flow_run_id}").json()["state"]
    assert any(m.startswith("Crash detected!") for m in messages), messages[-10:]
    assert state["type"] == "CRASHED", state
