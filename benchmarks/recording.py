"""Does the Prefect server hold the whole run when ``ape run`` returns? And what does an
idle server cost?

Two measurements, each against servers started for the purpose (state in a temp folder):

- ``--n N`` (default 20,000): ``python -m ape run`` of N instant-model items with 16
  solver workers against a server APE starts (its settings, ``ape.server.SERVER_SETTINGS``).
  The moment the command returns, counts the task runs on the server: every session's
  live task run in a final state, the recorded stage chains (as many as the run's
  ``stage_chains.json`` says it recorded: every chain while the server kept within
  ``APE_CHAIN_MAX_LAG`` task runs, and every unusual one), none Pending or Running; prints
  the wall time, items/s, the chains left out and the events the server's broker dropped
  (its "Subscription queue is full" warnings).
- ``--idle S``: the CPU a freshly started, idle server uses over S seconds (psutil, the
  server's process tree), with Prefect's defaults and with APE's settings, side by side.

    python benchmarks/recording.py                 # N = 20,000 (several minutes on 2 cores)
    python benchmarks/recording.py --n 4000
    python benchmarks/recording.py --idle 60 --n 0
"""

from __future__ import annotations

import argparse
import os
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


def measure_run(n: int, work: Path, env: dict[str, str], api: str, log_file: Path) -> None:
    from ape.tasks.recording import server as recording
    from ape.tasks.storage.stage_chains import read_chains

    folder = work / f"run-{n}"
    make_workload(folder, n, 0.0, 16, call_log=False)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ape", "run", "config.toml"], cwd=folder, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    final, opened = list(recording.FINAL_TYPES), list(recording.OPEN_TYPES)
    sessions = count(api, "session[", final)
    said = read_chains(folder / "out")  # what the run says it recorded and left out
    chains, left_out = (said.chains_recorded, said.chains_left_out) if said else (0, 0)
    stages = {s: count(api, f"{s}[", final) for s in ("render", "solve", "adapt", "check", "score")}
    still_open = count(api, "[", opened)
    drops = log_file.read_text(errors="replace").count("Subscription queue is full")
    waited = [line for line in done.stderr.splitlines() if "recording the run" in line or "not recorded" in line]
    print(f"N = {n}: ape run returned after {wall:.1f} s ({n / wall:.0f} items/s, server wait included)")
    print("| task runs on the server when `ape run` returned | held | expected |")
    print("|---|---|---|")
    print(f"| session (final state) | {sessions} | {n} |")
    for stage, held in stages.items():
        print(f"| {stage} (recorded chain) | {held} | {chains} |")
    print(f"| any still Pending/Running | {still_open} | 0 |")
    print(f"stage chains left out (stage_chains.json; `ape record` records them): {left_out}")
    print(f"events the server's broker dropped (all consumers): {drops}")
    for line in waited[-3:]:
        print("  ape:", line.strip()[-160:])


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
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ape-recording-"))
    if args.idle:
        measure_idle(args.idle, work)
    if args.n:
        from ape import server

        os.environ["APE_HOME"] = str(work / "ape-home")
        info = server.start(port=4253)
        env = dict(os.environ, APE_SERVER_PORT="4253", PREFECT_SERVER_ANALYTICS_ENABLED="false")
        env.pop("PREFECT_API_URL", None)
        try:
            measure_run(args.n, work, env, info.api_url, info.log_file)
            if args.idle and info.pid is not None:
                time.sleep(15)
                print(f"the same server, idle after the run: {idle_percent(info.pid, args.idle):.2f}% of a core")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
