"""Speed and memory of the runner, against a real local Prefect server.

Each scenario runs the full benchmark flow (render -> solve -> adapt -> check ->
score, saving, transcripts, report) in a fresh child process, with the built-in
mock model that sleeps ``latency_s`` per call. The ideal wall time is
``N * runs_per_data * latency_s / solver_workers``; the script prints
``wall / ideal`` (the flow's item loop, start-up excluded and reported on its
own; the end's few seconds of waiting for the server included, as ``ape run`` has them;
what the server still lacks is sent by the background catch-up, timed apart), items/s
with an instant model, the cost of resuming a finished run, and peak memory at two
sizes. Ratios, not seconds, are what to compare: the machine is shared and noisy.

    python benchmarks/speed.py              # everything (about 5 minutes on 2 cores)
    python benchmarks/speed.py --quick      # smaller sizes, for a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_PID: int | None = None

SCHEMA = """from pydantic import BaseModel


class Item(BaseModel):
    id: str
    question: str
    answer: int
"""

CONFIG = """name = "speed"
[data]
file = "data.jsonl"
schema = "speedschema:Item"
[prompt]
template = "What is {{{{ question }}}}?"
[model]
name = "mock"
provider = "mock"
args = {{ behaviour = "arithmetic", latency_s = {latency}{call_log} }}
[adapter]
implementation = "last_number"
[checker]
implementation = "exact_match"
[run]
solver_workers = {workers}
output = "out"
[cli]
progress = false
"""


def make_workload(folder: Path, n: int, latency: float, workers: int, *, call_log: bool = True) -> Path:
    """N arithmetic items and a mock-model config in ``folder``; with ``call_log`` the model
    appends a line per call to calls.log (the first call's time, the call count)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "speedschema.py").write_text(SCHEMA)
    with (folder / "data.jsonl").open("w") as handle:
        for i in range(n):
            a, b = i % 97, (i * 7) % 89
            handle.write(json.dumps({"id": f"i{i}", "question": f"{a} + {b}", "answer": a + b}) + "\n")
    log = ', call_log = "{}"'.format(folder / "calls.log") if call_log else ""
    (folder / "config.toml").write_text(CONFIG.format(latency=latency, workers=workers, call_log=log))
    return folder / "config.toml"


def child(config: str) -> None:
    """Run one benchmark flow in this process and print its measurements as JSON."""
    started = time.perf_counter()
    from prefect import flow

    from ape.config import load_config
    from ape.flows.evaluate import Runner
    from ape.tasks.setup.model import make_setup

    cfg = load_config(config)
    imported = time.perf_counter()

    @flow(name="speed", persist_result=False)
    def speed_flow() -> dict:
        return Runner(make_setup(cfg, cfg.model[0])).run()

    cpu0 = _cpu()
    state = speed_flow(return_state=True)
    summary = state.result()
    # as `ape run` ends: a few seconds' wait for the server, then what it lacks goes to the
    # background catch-up (ape.tasks.recording.run.finish_recording); the results are done then
    results_done, mirror = finish_like_ape_run(str(state.state_details.flow_run_id), Path(config).parent / "out")
    done = time.perf_counter()
    cpu1 = _cpu()
    print(
        "RESULT "
        + json.dumps(
            {
                "summary": summary,
                "import_s": imported - started,
                "process_s": done - started,
                # the item loop plus the end's wait: the time to complete results and report
                "loop_s": summary["wall_seconds"] + (results_done - mirror["loop_end"]),
                "record_wait_s": results_done - mirror["loop_end"],
                # seconds after the results until the Prefect mirror held every task run
                "mirror_s": None if mirror["complete"] is None else mirror["complete"] - results_done,
                "recorded": mirror["recorded"],
                "flow_overhead_s": (done - imported) - summary["wall_seconds"],
                # CPU seconds of this process: the run (flow, item loop, end wait) and in all
                "cpu_loop_s": cpu1 - cpu0,
                "cpu_process_s": cpu1,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def finish_like_ape_run(flow_run_id: str, output: Path, limit_s: float = 3600.0) -> tuple[float, dict]:
    """The run's end as ``ape run`` has it, then the wait for the Prefect mirror: the
    perf_counter when the results were complete, and {loop_end, complete, recorded} (the
    mirror complete when no session waits to be sent, no task run of the flow run is open,
    and every task run sent live is final; ``recorded``: [final task runs, the same, open])."""
    from ape.tasks.recording import server as recording
    from ape.tasks.recording.run import finish_recording, left_out_sessions

    loop_end = time.perf_counter()
    expected = sum(recording.TASK_RUN_COUNTS.expected([flow_run_id]).values())  # sent live
    finish_recording([flow_run_id], output, on_progress=lambda _line: None)
    results_done = time.perf_counter()
    import psutil

    if os.environ.get("APE_BENCH_MIRROR_WAIT") == "0":  # a memory row: end the catch-up instead
        for catch_up in psutil.Process().children():
            catch_up.terminate()
        limit_s = 0.0
    # The background catch-up ends when it has sent what was left out: wait on its exit (an
    # event, not a poll), then ask the server until it holds every task run. Polling the
    # chains file and the server every half second while the catch-up runs took a sixth of
    # this process's CPU at N=4,000 and queried the server it measures.
    catch_ups = psutil.Process().children()
    if catch_ups and limit_s:
        psutil.wait_procs(catch_ups, timeout=limit_s)
    while time.perf_counter() - results_done < limit_s:
        left = left_out_sessions(output, [flow_run_id])
        still_open = recording.count_task_runs([flow_run_id], recording.OPEN_TYPES)
        if left == 0 and still_open == 0:
            if recording.count_task_runs([flow_run_id], recording.FINAL_TYPES) >= expected:
                break
        time.sleep(0.5)
    complete = time.perf_counter() if limit_s else None
    for catch_up in psutil.Process().children():  # its CPU counts as this run's (os.times' children)
        try:
            catch_up.wait(timeout=120)
        except psutil.Error:
            pass
    final = recording.count_task_runs([flow_run_id], recording.FINAL_TYPES)
    return results_done, {"loop_end": loop_end, "complete": complete, "recorded": [final, final, 0]}


def _cpu() -> float:
    """User + system CPU seconds of this process so far, and of its children that ended (the
    background catch-up a run starts)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (a Prefect server's process tree)."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def wait_until_idle(pid: int | None, limit_s: float = 120.0) -> float:
    """Let the server finish ingesting the previous scenario's events, so scenarios don't
    pay for each other's backlog. Returns the seconds waited."""
    if pid is None:
        return 0.0
    import psutil

    started = time.perf_counter()
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    while time.perf_counter() - started < limit_s:
        busy = 0.0
        for proc in procs:
            try:
                busy += proc.cpu_percent(interval=None)
            except psutil.Error:
                pass
        time.sleep(0.5)
        busy = sum(p.cpu_percent(interval=None) for p in procs if p.is_running())
        if busy < 10.0:
            break
    return time.perf_counter() - started


def run_child(config: Path, env: dict, *, idle_first: bool = True) -> dict:
    """One scenario in a fresh child process; ``idle_first``: after the server has gone idle
    (a caller that has just waited for it, to read the server's CPU from there, says False)."""
    if idle_first:
        wait_until_idle(SERVER_PID)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(config)], env=env, capture_output=True, text=True, cwd=ROOT
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"scenario failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def calls(folder: Path) -> int:
    log = folder / "calls.log"
    return sum(1 for _ in log.open()) if log.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--only", default="", help="comma list of: latency16,latency64,throughput,resume,memory")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    sys.path.insert(0, str(ROOT))
    from ape import server

    work = Path(tempfile.mkdtemp(prefix="ape-speed-"))
    os.environ["APE_HOME"] = str(work / "ape-home")
    t0 = time.perf_counter()
    port = 4250
    info = server.start(port=port)
    global SERVER_PID
    SERVER_PID = info.pid
    print(f"prefect server start-up: {time.perf_counter() - t0:.1f} s ({info.api_url})")
    env = dict(
        os.environ,
        **server.client_env(info),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PYTHONPATH=str(ROOT),
        PREFECT_LOCAL_STORAGE_PATH=str(work / "storage"),
    )
    only = set(filter(None, args.only.split(",")))
    q = args.quick
    rows = []
    try:
        if not only or "latency16" in only:
            n, lat, w = (64, 0.5, 16) if q else (200, 0.5, 16)
            r = run_child(make_workload(work / "l16", n, lat, w), env)
            ideal = n * lat / w
            rows.append(("wall/ideal", f"N={n}, {lat} s, {w} workers", f"{r['loop_s'] / ideal:.3f}", "<= 1.10", r))
        if not only or "latency64" in only:
            n, lat, w = (192, 0.5, 64) if q else (640, 0.5, 64)
            r = run_child(make_workload(work / "l64", n, lat, w), env)
            ideal = n * lat / w
            rows.append(("wall/ideal", f"N={n}, {lat} s, {w} workers", f"{r['loop_s'] / ideal:.3f}", "<= 1.25", r))
        if not only or {"throughput", "resume"} & only:
            n = 500 if q else 2000
            folder = work / "tp"
            r = run_child(make_workload(folder, n, 0.0, 16), env)
            rows.append(("items/s", f"N={n}, instant model, 16 workers", f"{n / r['loop_s']:.0f}", ">= 150", r))
            first_calls = calls(folder)
            again = run_child(folder / "config.toml", env)
            rows.append(
                ("resume/first (loop)", f"N={n}, finished run", f"{again['loop_s'] / r['loop_s']:.3f}", "< 0.05", again)
            )
            rows.append(
                (
                    "resume/first (process)",
                    f"N={n}, finished run",
                    f"{again['process_s'] / r['process_s']:.3f}",
                    "",
                    again,
                )
            )
            rows.append(("model calls on resume", f"N={n}", str(calls(folder) - first_calls), "0", again))
        if not only or "memory" in only:
            small, big = (500, 5000) if q else (2000, 20000)
            a = run_child(make_workload(work / "m1", small, 0.0, 16), env)
            b = run_child(make_workload(work / "m2", big, 0.0, 16), env)
            rows.append(
                (
                    "peak RSS ratio",
                    f"N={big} vs N={small}",
                    f"{b['peak_rss_mb'] / a['peak_rss_mb']:.2f} ({b['peak_rss_mb']:.0f} / {a['peak_rss_mb']:.0f} MB)",
                    "<= 1.5",
                    b,
                )
            )
    finally:
        server.stop()
    print()
    print(f"{'measure':<24} {'workload':<34} {'value':<22} goal")
    for name, workload, value, goal, r in rows:
        print(
            f"{name:<24} {workload:<34} {value:<22} {goal}   "
            f"(loop {r['loop_s']:.2f} s, process {r['process_s']:.1f} s, imports {r['import_s']:.1f} s)"
        )


if __name__ == "__main__":
    main()
