"""Where a Prefect task run's cost goes: client CPU and server CPU, live versus recorded.

Against a real local Prefect server, a flow in a child process makes N task runs in
each of three ways, the way APE's solver workers make them (called on the thread, in a
copy of the flow's context):

- ``live``: a trivial ``@task`` called N times (Prefect's task engine: context, state
  transitions, events);
- ``recorded``: N stage runs recorded after the fact (``ape.tasks.recording.stage_runs``), one
  ``prefect.task-run.*`` event each (real start/end times and final state), sent by
  Prefect's background events worker;
- ``none``: the same loop without Prefect, the baseline.

Client CPU is the child's process CPU time (flow plus sending every queued event); server CPU
is the server's process-tree CPU time from the flow's start until the server is idle again (events ingested). Both are
printed per task run, and the recorded runs are checked to have reached the server.

    python benchmarks/profile_task_runs.py [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed import tree_cpu  # benchmarks/speed.py, beside this script

HERE = Path(__file__).resolve().parent


def slim_event(event: dict) -> dict:
    """A task-run event without the payload keys Prefect's task-run recorder does not read
    (``intended``, ``initial_state``) and without the fields whose value is the server's own
    default (None, empty, ""): the server builds the same task run from it."""
    payload = event["payload"]
    state = {k: v for k, v in payload["validated_state"].items() if v not in (None, {}, "")}
    run = {k: v for k, v in payload["task_run"].items() if v not in (None, {}, [], "")}
    resource = {k: v for k, v in event["resource"].items() if v != ""}
    return dict(event, resource=resource, payload={"validated_state": state, "task_run": run})


def child(mode: str, n: int) -> None:
    import contextvars
    from concurrent.futures import ThreadPoolExecutor

    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    from ape.tasks.recording.stage_runs import StageMark, record_stage_runs
    from ape.tasks.storage.prefect_api import current_flow_run_id

    @task(name="trivial", cache_policy=NO_CACHE, persist_result=False)
    def trivial(i: int) -> int:
        return i

    def one(i: int) -> None:
        if mode == "live":
            trivial(i)
        elif mode in ("recorded", "recorded-slim"):
            now = time.time()
            record_stage_runs(str(current_flow_run_id()), f"i{i}", 0, [StageMark("solve", now, now)])

    if mode == "recorded-slim":  # the same task runs from events without what the server fills in
        from ape.tasks.recording import stage_runs

        full = stage_runs.task_run_event
        stage_runs.task_run_event = lambda *a, **k: slim_event(full(*a, **k))  # type: ignore[assignment]

    @flow(name=f"profile-{mode}", persist_result=False)
    def profile_flow() -> tuple[float, float, str | None]:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = [pool.submit(contextvars.copy_context().run, one, i) for i in range(n)]
            for future in futures:
                future.result()
        return time.process_time() - cpu0, time.perf_counter() - wall0, str(current_flow_run_id())

    cpu0 = time.process_time()
    _, wall, flow_run_id = profile_flow()
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all()  # the events still queued are part of the client's cost
    cpu = time.process_time() - cpu0
    print("RESULT " + json.dumps({"cpu_s": cpu, "wall_s": wall, "flow_run_id": flow_run_id}))


def count_task_runs(api_url: str, flow_run_id: str) -> int:
    body = {"flow_runs": {"id": {"any_": [flow_run_id]}}}
    from ape import server

    with server.api_session(api_url, auth=server.auth_string()) as session:
        return int(session.post("/task_runs/count", json=body).json())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.n)
        return
    import importlib.util

    spec = importlib.util.spec_from_file_location("ape_bench_speed", HERE / "speed.py")
    assert spec is not None and spec.loader is not None
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    from ape import server

    work = Path(tempfile.mkdtemp(prefix="ape-profile-"))
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = server.start(port=4252)
    assert info.pid is not None
    env = dict(
        os.environ,
        **server.client_env(info),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    rows = []
    try:
        for mode in ("none", "live", "recorded"):
            speed.wait_until_idle(info.pid)
            before = tree_cpu(info.pid)
            proc = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--n", str(args.n)], env=env, capture_output=True, text=True
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
            result = json.loads(line[len("RESULT ") :])
            speed.wait_until_idle(info.pid)
            result["server_s"] = tree_cpu(info.pid) - before
            result["task_runs"] = count_task_runs(info.api_url, result["flow_run_id"])
            rows.append((mode, result))
    finally:
        server.stop()
    base = rows[0][1]
    print(f"N = {args.n} per mode; per task run (minus the no-Prefect loop's client CPU):")
    print("| mode | client CPU ms | server CPU ms | task runs on server | loop wall s |")
    print("|---|---|---|---|---|")
    for mode, r in rows:
        client = (r["cpu_s"] - (base["cpu_s"] if mode != "none" else 0)) / args.n * 1000
        print(f"| {mode} | {client:.2f} | {r['server_s'] / args.n * 1000:.2f} | {r['task_runs']} | {r['wall_s']:.2f} |")


if __name__ == "__main__":
    main()
