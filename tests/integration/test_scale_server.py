"""``ape run`` against Prefect's scale path: a server on PostgreSQL with the Redis broker,
its API and its services in separate processes (``docs/server.md``, "A server of its
own"). The run ends Completed, its results are saved, and the server holds every task
run of it: what the UI shows of a run on such a server.

Skips with the reason where PostgreSQL, redis-server or prefect-redis is missing; fails
instead where ``APE_REQUIRE_SCALE`` is set, as ``.ci/run`` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ape.config import load_config
from ape.tasks.storage.stage_chains import read_chains
from tests.helpers.paths import REPO_ROOT
from tests.helpers.prefect_api import PrefectApi
from tests.helpers.runner import make_benchmark, read_results
from tests.helpers.scale_server import missing, scale_server

pytestmark = pytest.mark.slow


@pytest.mark.timeout(420)
def test_ape_run_on_postgres_with_the_redis_broker_and_split_services(tmp_path: Path) -> None:
    reason = missing()
    if reason and os.environ.get("APE_REQUIRE_SCALE"):
        pytest.fail(f"APE_REQUIRE_SCALE is set but the scale path {reason}")
    if reason:
        pytest.skip(reason)
    n = 30
    config = make_benchmark(tmp_path / "bench", n=n, model_args='behaviour = "arithmetic", accuracy = 0.8')
    with scale_server(tmp_path / "server") as api_url:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env |= {"PREFECT_API_URL": api_url, "APE_HOME": str(tmp_path / "ape-home")}
        proc = subprocess.run(
            [sys.executable, "-m", "ape", "run", str(config), "--no-progress"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert f"Using the Prefect API at {api_url}" in proc.stderr + proc.stdout  # not a server of its own
        out = load_config(config).run.output
        sessions = [s for batch in read_results(out / "results.jsonl") for s in batch["sessions"]]
        assert len(sessions) == n and all(s["outcome"] == "SOLVED" for s in sessions)
        with PrefectApi(api_url) as api:

            def runs_of(flow: str) -> list[dict]:
                found = api.post("/flow_runs/filter", json={"flows": {"name": {"any_": [flow]}}})
                assert found.status_code == 200, found.text
                return found.json()

            (benchmark,), (evaluate,) = runs_of("benchmark"), runs_of("evaluate")
            assert benchmark["state"]["type"] == evaluate["state"]["type"] == "COMPLETED"
            assert evaluate["parent_task_run_id"] is not None  # the model's subflow of the benchmark run
            # every session's task run, and five stages for each chain the run says it recorded
            chains = read_chains(out)
            assert chains is not None and chains.chains_recorded + chains.chains_left_out == n
            expected = n + 5 * chains.chains_recorded
            deadline = time.monotonic() + 60
            while True:
                count = api.post("/task_runs/count", json={"flow_runs": {"id": {"any_": [evaluate["id"]]}}}).json()
                if count >= expected or time.monotonic() > deadline:
                    break
                time.sleep(1)
            assert count == expected, (count, chains)
