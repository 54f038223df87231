"""Does the Prefect server hold the whole run when ``ape run`` returns? And what does an
idle server cost?

Two measurements, each against servers started for the purpose (state in a temp folder):

- ``--n N`` (default 20,000): ``python -m ape run`` of N instant-model items with 16
  solver workers against a server APE starts (its settings, ``ape.server.SERVER_SETTINGS``).
  Counts the task runs on the server twice: the moment the command returns (what the run
  sent while it ran), and when the background catch-up has ended (``record.log`` in the
  output folder; ``ape.tasks.recording.catch_up``): then every session's task run once, in
  a final state, every chain ``stage_chains.json`` says was recorded, none left out, none
  Pending or Running, and nothing doubled. Prints the run's wall time, items/s, how long
  after the run's end the mirror was complete, the events the server's broker dropped
  (its "Subscription queue is full" warnings), and, once the catch-up's process has ended,
  the task-run events the server stored (the UI's Events feed: at least one per task run
  when none was lost), the catch-up's wall time and the server's CPU over the run and the
  catch-up.
- ``--idle S``: the CPU a freshly started, idle server uses over S seconds (psutil, the
  server's process tree), with Prefect's defaults and with APE's settings, side by side.

    python benchmarks/recording.py                 # N = 20,000 (several minutes on 2 cores)
    python benchmarks/recording.py --n 4000
    python benchmarks/recording.py --idle 60 --n 0
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed import make_workload, tree_cpu  # benchmarks/speed.py, beside this script


def idle_percent(pid: int, seconds: float) -> float:
    before, started = tree_cpu(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (tree_cpu(pid) - before) / (time.monotonic() - started)


def count(api: str, name: str, types: list[str]) -> int:
    from ape import server

    body = {"task_runs": {"name": {"like_": name}, "state": {"type": {"any_": types}}}}
    with server.api_session(api, timeout=120, auth=server.auth_string()) as session:
        return int(session.post("/task_runs/count", json=body).json())


def server_counts(api: str) -> dict[str, int]:
    """Task runs on the server in a final state, per stage name, and those still open."""
    from ape.tasks.recording import server as recording

    final = list(recording.FINAL_TYPES)
    counts = {s: count(api, f"{s}[", final) for s in ("session", "render", "solve", "adapt", "check", "score")}
    counts["open"] = count(api, "[", list(recording.OPEN_TYPES))
    return counts


def wait_for_mirror(folder: Path, api: str, n: int, stall_s: float = 300.0) -> tuple[float, dict[str, int]]:
    """Seconds until the catch-up has left nothing out and the server holds every session and
    every recorded chain (polled every 2 s), and the counts then; raises when the server's
    counts stop growing for ``stall_s`` (a loaded machine only slows the catch-up down)."""
    from ape.tasks.storage.stage_chains import read_chains

    started = last_change = time.perf_counter()
    last: dict[str, int] = {}
    while time.perf_counter() - last_change < stall_s:
        said = read_chains(folder / "out")
        counts = server_counts(api)
        chains = said.chains_recorded if said else 0
        settled = counts["session"] >= n and counts["open"] == 0
        chains_held = all(counts[s] >= chains for s in ("render", "solve", "adapt", "check", "score"))
        if (said is None or said.chains_left_out == 0) and settled and chains_held:
            return time.perf_counter() - started, counts
        if counts != last:
            last, last_change = counts, time.perf_counter()
        time.sleep(2)
    raise RuntimeError(f"the mirror stopped growing for {stall_s:.0f} s: {last} (see {folder / 'out' / 'record.log'})")


def stored_events(api: str) -> int:
    """Task-run events in the server's events table (every flow run; a fresh server)."""
    from ape import server

    since = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 7 * 86400))
    body = {"filter": {"occurred": {"since": since}, "event": {"prefix": ["prefect.task-run."]}}, "limit": 1}
    with server.api_session(api, timeout=120, auth=server.auth_string()) as session:
        return int(session.post("/events/filter", json=body).json()["total"])


def catch_up_end(stderr: str, started: float) -> float | None:
    """Seconds from ``started`` until the run's background catch-up process ended (None: none)."""
    import psutil

    found = re.search(r"in the background \(pid (\d+)\)", stderr)
    if found is None:
        return None
    try:
        psutil.Process(int(found.group(1))).wait()
    except psutil.NoSuchProcess:
        pass
    return time.perf_counter() - started


def measure_run(n: int, work: Path, env: dict[str, str], api: str, log_file: Path, pid: int | None = None) -> None:
    from ape.tasks.storage.stage_chains import read_chains

    folder = work / f"run-{n}"
    make_workload(folder, n, 0.0, 16, call_log=False)
    cpu_before = tree_cpu(pid) if pid is not None else 0.0
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ape", "run", "config.toml"], cwd=folder, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    at_end = server_counts(api)
    said = read_chains(folder / "out")  # what the run says it recorded and left out
    left_at_end = said.chains_left_out if said else 0
    after, final = wait_for_mirror(folder, api, n)
    catch_up_s = catch_up_end(done.stderr, started + wall)
    events = stored_events(api)
    cpu = tree_cpu(pid) - cpu_before if pid is not None else 0.0
    said = read_chains(folder / "out")
    chains = said.chains_recorded if said else 0
    drops = log_file.read_text(errors="replace").count("Subscription queue is full")
    print(f"N = {n}: ape run returned after {wall:.1f} s ({n / wall:.0f} items/s)")
    print(f"the mirror was complete {after:.1f} s after the run returned")
    print("| task runs on the server | when `ape run` returned | after the catch-up | expected |")
    print("|---|---|---|---|")
    print(f"| session (final state) | {at_end['session']} | {final['session']} | {n} |")
    for stage in ("render", "solve", "adapt", "check", "score"):
        print(f"| {stage} (recorded chain) | {at_end[stage]} | {final[stage]} | {chains} |")
    print(f"| any still Pending/Running | {at_end['open']} | {final['open']} | 0 |")
    print(f"stage chains left out when the run returned: {left_at_end}; after the catch-up: 0")
    print(f"events the server's broker dropped (all consumers): {drops}")
    if catch_up_s is not None:
        print(f"the catch-up's process ended {catch_up_s:.1f} s after the run returned")
    task_runs = final["session"] + sum(final[s] for s in ("render", "solve", "adapt", "check", "score"))
    print(f"task-run events stored then: {events} for {task_runs} task runs (at least one each when none was lost)")
    print(f"server CPU over the run and the catch-up: {cpu:.1f} s ({1000 * cpu / max(1, task_runs):.2f} ms a task run)")
    lost_or_doubled = final["session"] != n or any(
        final[s] != chains for s in ("render", "solve", "adapt", "check", "score")
    )
    print("nothing lost, nothing doubled" if not lost_or_doubled else "MISMATCH: a session or chain lost or doubled")
    for line in done.stderr.splitlines()[-4:]:
        print("  ape:", line.strip())
    if lost_or_doubled:
        raise SystemExit(1)


def measure_idle(seconds: float, work: Path) -> None:
    from ape import server

    rows = []
    for label, settings in (("Prefect defaults", False), ("APE's settings", True)):
        home = work / f"idle-{settings}"
        os.environ["APE_HOME"] = str(home)
        saved = dict(server.SERVER_SETTINGS)
        if not settings:  # a server like `prefect server start`: APE's settings off
            server.SERVER_SETTINGS.clear()
        try:
            info = server.start(port=4254)
            assert info.pid is not None
            time.sleep(15)  # let start-up settle
            rows.append((label, idle_percent(info.pid, seconds)))
        finally:
            server.stop()
            server.SERVER_SETTINGS.update(saved)
    print(f"idle Prefect server, CPU over {seconds:g} s (% of one core, process tree):")
    print("| server | idle CPU |")
    print("|---|---|")
    for label, percent in rows:
        print(f"| {label} | {percent:.2f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000, help="items of the run (0: no run)")
    parser.add_argument("--idle", type=float, default=0.0, help="measure idle CPU over this many seconds")
    parser.add_argument("--port", type=int, default=4253, help="the port of the run's server")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ape-recording-"))
    if args.idle:
        measure_idle(args.idle, work)
    if args.n:
        from ape import server

        os.environ["APE_HOME"] = str(work / "ape-home")
        info = server.start(port=args.port)
        env = dict(os.environ, APE_SERVER_PORT=str(args.port), PREFECT_SERVER_ANALYTICS_ENABLED="false")
        env.pop("PREFECT_API_URL", None)
        try:
            measure_run(args.n, work, env, info.api_url, info.log_file, info.pid)
            if args.idle and info.pid is not None:
                time.sleep(15)
                print(f"the same server, idle after the run: {idle_percent(info.pid, args.idle):.2f}% of a core")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
