"""Is a deployment's next run held back by the run before it? Scheduled start to first model call.

A team serves its benchmark (``ape serve``) on APE's local Prefect server and also runs big
evaluations by hand on it. The Prefect server records each run from the events its clients
send; if a 4,000-item run left a backlog of events behind, the next scheduled run would wait
behind it (its own flow-run and task-run events queue after the backlog). This script
measures what a user sees, on the defaults a user runs (the runner's own poll interval, APE's
server settings):

1. ``ape serve`` a small benchmark (20 items, an instant mock model) with no schedule;
2. a flow run of it scheduled 15 s ahead on a quiet server: the time from its scheduled
   start to its first model call (the mock's call log);
3. ``ape run`` of 4,000 instant-model items on the same server, and the moment it returns,
   another flow run scheduled 15 s ahead: the same time.

Both runs are scheduled ahead, as a deployment's schedule creates its runs ahead of time,
so the runner has fetched each before it is due (it looks ``PREFECT_RUNNER_PREFETCH_SECONDS``
ahead, 10 s by default) and the two times differ only by what the server and the machine
still carry of the run before.

Rounds alternate and repeat (``--rounds``); the table gives each round's two times and the
last line their medians. The time includes the flow-run process's start-up (the runner
starts a process per run) and the run's checks before its first call, so compare the two
columns, not the seconds with other tools.

    python benchmarks/next_run.py             # about 3 minutes a round on 2 cores
    python benchmarks/next_run.py --rounds 3 --items 4000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from speed import make_workload  # benchmarks/speed.py, beside this script

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def call_times(call_log: Path) -> list[float]:
    """The epoch time of every model call in a mock's call log (one JSON line per call)."""
    if not call_log.exists():
        return []
    times = []
    for line in call_log.read_text().splitlines():
        try:
            times.append(float(json.loads(line)["time"]))
        except (ValueError, KeyError):
            continue
    return times


def schedule_run(client: Any, deployment_id: str, at: float) -> str:
    """A flow run of the deployment scheduled to start at ``at`` (epoch seconds); its id."""
    when = datetime.fromtimestamp(at, tz=UTC).isoformat()
    body = {"state": {"type": "SCHEDULED", "name": "Scheduled", "state_details": {"scheduled_time": when}}}
    response = client.post(f"/deployments/{deployment_id}/create_flow_run", json=body)
    response.raise_for_status()
    return str(response.json()["id"])


def wait_first_call(client: Any, flow_run_id: str, call_log: Path, after: float, limit_s: float = 300) -> float:
    """The time of the first model call at or after ``after``, once the flow run has ended."""
    deadline = time.monotonic() + limit_s
    first: float | None = None
    while time.monotonic() < deadline:
        if first is None:
            first = next((t for t in call_times(call_log) if t >= after), None)
        state = client.get(f"/flow_runs/{flow_run_id}").json()["state"]["type"]
        if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            if state != "COMPLETED":
                raise RuntimeError(f"the served run ended {state}")
            if first is not None:
                return first
        time.sleep(0.2)
    raise RuntimeError(f"no model call or no end within {limit_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--items", type=int, default=4000, help="items of the big run by hand")
    parser.add_argument("--ahead", type=float, default=15.0, help="each run is scheduled this far ahead (s)")
    args = parser.parse_args()

    from ape import server

    work = Path(tempfile.mkdtemp(prefix="ape-next-run-"))
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = server.start(port=4253)
    env = dict(os.environ, **server.client_env(info), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("PREFECT_RUNNER_POLL_FREQUENCY", None)  # the runner's default, as users run it
    served = make_workload(work / "served", 20, 0.0, 4)
    big = make_workload(work / "big", args.items, 0.0, 16, call_log=False)
    serve_log = work / "serve.log"
    command = [sys.executable, "-m", "ape", "serve", str(served), "--name", "next-run"]
    with open(serve_log, "wb") as log:
        serving = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    rows: list[tuple[float, float, float]] = []
    try:
        with server.api_session(info.api_url, auth=env[server.CLIENT_AUTH_KEY]) as client:
            deadline = time.monotonic() + 120
            while (found := client.get("/deployments/name/benchmark/next-run")).status_code != 200:
                if serving.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("ape serve did not register its deployment:\n" + serve_log.read_text()[-2000:])
                time.sleep(1)
            deployment_id = found.json()["id"]
            calls = served.parent / "calls.log"
            for index in range(args.rounds):
                at = time.time() + args.ahead
                quiet = wait_first_call(client, schedule_run(client, deployment_id, at), calls, at) - at
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "ape", "run", str(big), "--new-run", "--no-progress"],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                )
                if done.returncode != 0:
                    raise RuntimeError("the big run failed:\n" + (done.stdout + done.stderr)[-3000:])
                big_s = time.perf_counter() - started
                at = time.time() + args.ahead
                after = wait_first_call(client, schedule_run(client, deployment_id, at), calls, at) - at
                rows.append((quiet, after, big_s))
                print(f"round {index + 1}: quiet {quiet:.1f} s, after the big run {after:.1f} s", flush=True)
    finally:
        serving.terminate()
        try:
            serving.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serving.kill()
        server.stop()
    print()
    print(f"| round | scheduled start to first call, quiet server | right after a {args.items:,}-item run | that run |")
    print("|---|---|---|---|")
    for index, (quiet, after, big_s) in enumerate(rows, 1):
        print(f"| {index} | {quiet:.1f} s | {after:.1f} s | {big_s:.0f} s |")
    quiet_m = statistics.median(r[0] for r in rows)
    after_m = statistics.median(r[1] for r in rows)
    print(f"median: quiet {quiet_m:.1f} s, after {after_m:.1f} s ({after_m / quiet_m:.2f}x)")


if __name__ == "__main__":
    main()
