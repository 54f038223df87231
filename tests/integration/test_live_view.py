"""The live view on a real Prefect server (ape.flows.live.view, ``ape status``).

One real ``ape run`` of two models against a real ``prefect server start``: a mock model
that takes its time and cuts some answers (truncations), and a plugin model whose endpoint
fails on some items (errors). While it goes, ``ape status OUTPUT --json`` (another process,
as a user would run it) shows the items done rising; at the end, each model's live view
(live.json, and the markdown artifact of its flow run on the server) has the final report's
numbers: items done, sessions, pass rate and its interval, errors, check errors, truncations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.paths import REPO_ROOT
from tests.helpers.prefect_api import PrefectApi
from tests.helpers.processes import stop_group
from tests.helpers.runner import make_benchmark

ITEMS = 120
MODELS = """[[model]]
name = "slow"
provider = "mock"
args = { behaviour = "arithmetic", latency_s = 0.15, truncate = 0.3, seed = 3 }

[[model]]
name = "flaky"
class = "benchschema:Flaky"
max_retries = 0
args = { fail_marker = "7 +" }
"""


def _env(api: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, PREFECT_API_URL=api)


def _status(out: Path, api: str) -> tuple[int, list[dict]]:
    done = subprocess.run(
        [sys.executable, "-m", "ape", "status", str(out), "--json"],
        env=_env(api),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else [])


def test_the_live_view_rises_while_a_run_goes_and_ends_on_the_reports_numbers(
    prefect_server: str, tmp_path: Path
) -> None:
    config = make_benchmark(
        tmp_path, n=ITEMS, models=MODELS, run="runs_per_data = 2\nsolver_workers = 4\nfail_on_error = 0.5\n"
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server"],
        cwd=tmp_path,
        env=_env(prefect_server),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[int] = []  # the slow model's items done, as `ape status` showed them while it ran
    try:
        deadline = time.monotonic() + 400
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the run did not end"
            code, statuses = _status(out, prefect_server)
            slow = [s for s in statuses if s["model"] == "slow" and s["state"] == "running"]
            if slow:
                seen.append(slow[0]["done"])
            time.sleep(0.5)
        output = proc.communicate(timeout=60)[0]
    finally:
        stop_group(proc, 5)
    assert proc.returncode == 0, output
    assert len(set(seen)) >= 2 and seen == sorted(seen), f"ape status while running showed {seen}"
    assert seen[0] < ITEMS

    code, statuses = _status(out, prefect_server)
    assert code == 0 and {s["model"] for s in statuses} == {"slow", "flaky"}
    report = json.loads((out / "report.json").read_text())
    rows = {row["model_id"]: row for row in report["leaderboard"] + report.get("unranked", [])}
    for live in statuses:
        row = rows[live["model"]]
        assert live["state"] == "finished" and live["done"] == live["total"] == row["n_items"] == ITEMS
        assert live["sessions"] == row["n_sessions"]
        assert abs(live["pass_rate"] - row["pass_rate"]) < 1e-12
        assert abs(live["pass_rate_low"] - row["pass_rate_low"]) < 1e-9
        assert abs(live["pass_rate_high"] - row["pass_rate_high"]) < 1e-9
        assert live["errors"] == row["outcomes"]["ERROR"]
        assert live["truncated"] == row["outcomes"]["TRUNCATED"]
        assert live["check_errors"] == row["check_errors"]
        assert live["eta_s"] == 0.0 and live["requests_in_flight"] == 0
        folder = out / live["model"]
        assert (folder / "live.json").stat().st_mode & 0o777 == 0o600  # owner-only, as every output
    by_model = {s["model"]: s for s in statuses}
    assert by_model["slow"]["truncated"] > 0 and by_model["flaky"]["errors"] > 0  # the numbers are not all 0
    assert by_model["slow"]["requests_per_minute"] and by_model["slow"]["tokens_per_minute"]

    # the flow runs' artifacts on the server show the same end
    with PrefectApi(prefect_server) as api:
        for live in statuses:
            found = api.post(
                "/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [live["flow_run_id"]]}}}
            ).json()
            kinds = {a["type"]: a for a in found}
            assert set(kinds) == {"progress", "markdown"}, found  # each updated in place, not created anew
            assert kinds["progress"]["data"] == 100.0
            assert kinds["markdown"]["key"] == f"t-live-{live['model']}"
            text = kinds["markdown"]["data"]
            assert f"| items | {ITEMS} of {ITEMS} done (100.0%)" in text
            assert f"{live['errors']} sessions errored, {live['check_errors']} checks errored" in text
            assert f"| truncated | {live['truncated']} sessions |" in text
            assert f"{live['passed']} of {live['sessions']} sessions" in text
