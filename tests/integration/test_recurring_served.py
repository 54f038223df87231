"""End to end: the benchmark served as a Prefect deployment with an interval schedule runs
at least three times on a real Prefect server; the mock model's accuracy drops between
runs; every run calls the model afresh; the history holds the runs; the drop is a
regression in report.json, a Prefect artifact and a Prefect event read back through the
API; and the CI gate (`ape run --new-run --fail-on-regression`) exits with its own code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import start_logged, stop_group
from tests.helpers.runner import make_benchmark, read_results

N = 40
INTERVAL_S = 6


def _history(out: Path) -> pd.DataFrame:
    path = out / "history" / "runs.parquet"
    if not path.is_file():
        return pd.DataFrame(columns=["run_id", "mean_score"])
    return pd.read_parquet(path)


def _finished(out: Path, runs: pd.DataFrame) -> bool:
    """The newest run in the history is done: ``latest`` moves after its history row is written."""
    latest = out / "latest"
    return latest.is_symlink() and latest.resolve().name == max(runs["run_id"])


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_served_schedule_runs_afresh_and_alerts_on_a_drop(prefect_server: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.events.filters import EventFilter, EventNameFilter

    accuracy = tmp_path / "accuracy.txt"
    accuracy.write_text("1.0")
    calls = tmp_path / "calls.jsonl"
    args = f'behaviour = "arithmetic", use_tools = false, accuracy_file = "{accuracy}", call_log = "{calls}"'
    # runs every few seconds stand for nightly ones: the monitor's thresholds for a nightly cadence
    config_path = make_benchmark(tmp_path, n=N, model_args=args, extra="[monitor]\nruns_per_year = 365").resolve()
    out = tmp_path / "out"
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PREFECT_RUNNER_POLL_FREQUENCY="1")
    command = [sys.executable, "-m", "ape", "serve", str(config_path), "--interval", str(INTERVAL_S)]
    proc = start_logged([*command, "--name", "every-few-seconds"], tmp_path / "serve.log", cwd=REPO_ROOT, env=env)
    dropped = False
    try:
        deadline = time.monotonic() + 360  # three runs; a busy two-core machine takes a minute each
        while time.monotonic() < deadline:
            runs = _history(out)
            if not dropped and len(runs) >= 1:
                accuracy.write_text("0.5")  # the endpoint's model got worse
                dropped = True
            if len(runs) >= 3 and (runs["mean_score"] < 0.8).sum() >= 2 and _finished(out, runs):
                break
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(1)
        else:
            pytest.fail("served runs did not finish in time\n" + (tmp_path / "serve.log").read_text()[-3000:])
    finally:
        stop_group(proc, 15)

    # the runs finished when the loop stopped; one the stop cut short may be in the history too
    runs = runs.sort_values("run_id").reset_index(drop=True)
    assert len(runs) >= 3
    run_ids = list(runs["run_id"])
    # every run is its own folder, and each one called the model for every item
    for run_id in run_ids:
        rows = read_results(out / "runs" / run_id / "results.jsonl")
        assert len(rows) == N and not any(s["cached"] for b in rows for s in b["sessions"])
    assert len(read_results(calls)) >= N * len(run_ids)
    # served runs belong to the deployment
    flow_run_ids = list(runs["flow_run_id"])
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("benchmark/every-few-seconds")
        assert all(client.read_flow_run(f).deployment_id == deployment.id for f in flow_run_ids)
    # the first run that saw the drop is a regression against the run before it
    assert runs["mean_score"].iloc[0] == 1.0
    first_drop = next(i for i, s in enumerate(runs["mean_score"]) if s < 0.8)
    assert runs["history_verdict"].iloc[first_drop] == "regressed"
    assert (runs["history_verdict"].iloc[first_drop + 1 :] != "regressed").all()
    regressed_run = run_ids[first_drop]
    report = json.loads((out / "runs" / regressed_run / "report.json").read_text())
    (row,) = report["regressions"]
    assert row["verdict"] == "regressed" and row["reference_run_id"] == run_ids[first_drop - 1]
    assert row["statistic"] < -row["threshold"] and row["mean_diff"] < -0.2 and row["ci_high"] < 0
    # ``latest`` names the newest finished run (checked when the loop stopped; a run the stop
    # let finish may have moved it on since, never back)
    latest = (out / "latest").resolve().name
    assert latest >= run_ids[-1] and latest in set(_history(out)["run_id"])
    # ... as an artifact and as an event carrying the benchmark and the model
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["t-history"])))
        # the stable key keeps a version per run; the one written by the regressed run shows it
        assert any(regressed_run in a.data and "▼ regressed" in a.data for a in artifacts)
        for _ in range(30):  # the server stores events a moment after receiving them
            page = client.read_events(
                filter=EventFilter(event=EventNameFilter(name=["ape.evaluation.regressed"])), limit=50
            )
            events = [e for e in page.events if e.payload.get("run_id") == regressed_run]
            if events:
                break
            time.sleep(1)
    assert len(events) == 1
    event = events[0]
    assert event.resource.id == "ape.evaluation.t.m"
    roles = {r.role: r.id for r in event.related}
    assert roles["benchmark"] == "ape.benchmark.t" and roles["model"] == "ape.model.m"

    # the CI gate: one more run by hand against this history, at the lower accuracy still,
    # then after a further drop
    accuracy.write_text("0.0")
    gate = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config_path), "--new-run", "--fail-on-regression", "--no-progress"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gate.returncode == 3, gate.stdout[-2000:] + gate.stderr[-2000:]
    assert "regression: m against its history" in gate.stderr
