"""A run killed with SIGKILL becomes Crashed in the Prefect UI, by Prefect's own heartbeats.

Before: after ``kill -9`` of ``ape run`` its flow run and its model's flow run stayed
RUNNING on the server for good. Now every flow run sends heartbeats and the server APE
starts holds an automation that marks a flow run Crashed when they stop
(:mod:`ape.crash_marking`); this test kills a real run on a real server APE started and
waits, on the server's own answer, for both flow runs to turn Crashed within the bound the
docs give.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from ape import crash_marking, server
from ape.tasks.storage.live_files import interrupted_flow_run
from tests.helpers.processes import free_port, start_ape
from tests.helpers.runner import make_benchmark

pytestmark = pytest.mark.slow


def _saved(results: Path) -> int:
    if not results.exists():
        return 0
    return sum(1 for line in results.read_text().split("\n")[:-1] if line.strip())


def _flow_run_states(client: httpx.Client) -> dict[str, str]:
    response = client.post("/flow_runs/filter", json={"limit": 50})
    response.raise_for_status()
    return {row["id"]: row["state_type"] for row in response.json()}


@pytest.mark.timeout(420)
def test_a_killed_run_and_its_model_flow_become_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_at_end: Callable[[subprocess.Popen], subprocess.Popen]
) -> None:
    home = tmp_path / "ape-home"
    monkeypatch.setenv("APE_HOME", str(home))  # for server.stop() at the end
    config = make_benchmark(tmp_path / "bench", n=400, model_args='behaviour = "arithmetic", latency_s = 0.3')
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", crash_marking.HEARTBEAT_ENV)}
    env.update(APE_HOME=str(home), APE_SERVER_PORT=str(free_port()))
    results = tmp_path / "out" / "results.jsonl"
    with contextlib.ExitStack() as stack:
        stack.callback(server.stop)
        run = kill_at_end(start_ape(config, "--no-progress", "--output", str(tmp_path / "out"), env=env))
        deadline = time.monotonic() + 240
        while _saved(results) < 3:  # the flows are running and have sent their first heartbeats
            assert run.poll() is None, run.stdout.read() if run.stdout else ""
            assert time.monotonic() < deadline, "the run saved nothing in time"
            time.sleep(0.2)
        state = json.loads((home / "server" / "server.json").read_text())
        api = server.api_url_for(state["host"], state["port"])
        client = stack.enter_context(server.api_session(api, auth=server.auth_string(home / "server")))
        assert all(kind == "RUNNING" for kind in _flow_run_states(client).values())
        automations = client.post("/automations/filter", json={}).json()
        assert [a["name"] for a in automations] == [crash_marking.AUTOMATION_NAME]

        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        killed = time.monotonic()
        states: dict[str, str] = {}
        while time.monotonic() - killed < crash_marking.SILENCE_S + crash_marking.HEARTBEAT_S + 90:
            states = _flow_run_states(client)
            if len(states) >= 2 and all(kind == "CRASHED" for kind in states.values()):
                break
            time.sleep(2)
        took = time.monotonic() - killed
        assert len(states) >= 2, states  # the benchmark flow and the model's flow
        assert all(kind == "CRASHED" for kind in states.values()), (states, took)
        # the documented bound: the silence after the last heartbeat plus the trigger's pass
        assert took <= crash_marking.SILENCE_S + 45, took
        # the next run of the same command names the model's flow run it continues
        assert interrupted_flow_run(tmp_path / "out") in states
