"""What each Prefect server setting costs or saves per task-run event APE sends.

A session's task run reaches the Prefect server as ``prefect.task-run.*`` events; inside
the server, every event goes to each consumer of its message broker: the task-run
recorder (builds the task-run rows the UI's flow-run page draws), the event persister
(the events table: the UI's Events feed and a run's event list), the triggers service
(automations a user set up in the UI) and the stream-out (the UI's live event stream
over a websocket). APE needs the recorder; the others serve what a person may set up or
look at in the UI.

For each variant, a fresh local server is started the way ``ape run`` starts one
(``ape.server.start``; a setting in the environment wins over ``SERVER_SETTINGS``), a
flow in a child process records N task runs the way APE records a session
(``benchmarks/profile_task_runs.py --child recorded``), and the server's process-tree CPU
is measured from before the flow until the server is idle again. Every variant is
checked to hold all N task runs: a setting that loses them is not a saving.

    python benchmarks/server_settings.py               # N = 3,000 per variant, all variants
    python benchmarks/server_settings.py --n 1000 --variants ape,prefect
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
from typing import Any

from speed import tree_cpu, wait_until_idle  # benchmarks/speed.py, beside this script

HERE = Path(__file__).resolve().parent

# Prefect 3's own defaults for the settings APE changes, to measure a server without them
PREFECT_DEFAULTS = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "1",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "5",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "20",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "5",
    "PREFECT_SERVER_SERVICES_FOREMAN_ENABLED": "true",
    "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_ENABLED": "true",
}
NO_PERSISTER = {"PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false"}
NO_TRIGGERS = {"PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false"}
NO_STREAM_OUT = {"PREFECT_SERVER_EVENTS_STREAM_OUT_ENABLED": "false"}

VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "prefect": ("Prefect's defaults", PREFECT_DEFAULTS),
    "ape": ("APE's settings (what `ape run` starts)", {}),
    "no-persister": ("APE's, event persister off (no Events feed)", NO_PERSISTER),
    "no-triggers": ("APE's, triggers off (no automations)", NO_TRIGGERS),
    "no-stream-out": ("APE's, stream-out off (no live event stream)", NO_STREAM_OUT),
    "recorder-only": ("APE's, all three off", {**NO_PERSISTER, **NO_TRIGGERS, **NO_STREAM_OUT}),
    "slim-payload": ("APE's, events without the keys the recorder does not read", {}),
}
# the variants whose task runs are recorded another way (profile_task_runs.py's child modes)
CHILD_MODES = {"slim-payload": "recorded-slim"}


def count_task_runs(api_url: str, flow_run_id: str) -> int:
    from ape import server

    body = {"flow_runs": {"id": {"any_": [flow_run_id]}}}
    with server.api_session(api_url, auth=server.auth_string()) as session:
        return int(session.post("/task_runs/count", json=body).json())


def wait_for_task_runs(api_url: str, flow_run_id: str, n: int, limit_s: float = 120.0) -> int:
    """The task runs the server holds, once it holds ``n`` or ``limit_s`` has passed."""
    deadline = time.monotonic() + limit_s
    held = count_task_runs(api_url, flow_run_id)
    while held < n and time.monotonic() < deadline:
        time.sleep(0.5)
        held = count_task_runs(api_url, flow_run_id)
    return held


def start_server(overrides: dict[str, str], home: Path, port: int) -> Any:
    """Start APE's server in ``home`` with ``overrides`` in the environment it inherits, and
    put this process's environment back (``APE_HOME`` stays: the run that follows needs it)."""
    from ape import server

    saved = {key: os.environ.get(key) for key in overrides}
    os.environ.update(overrides)
    os.environ["APE_HOME"] = str(home)
    try:
        info = server.start(port=port)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert info.pid is not None
    return info


def measure(variant: str, n: int, work: Path, port: int) -> dict[str, float]:
    """Start a server with the variant's settings, record ``n`` task runs, stop it."""
    from ape import server

    info = start_server(VARIANTS[variant][1], work / variant, port)
    env = dict(os.environ, **server.client_env(info), PREFECT_LOGGING_LEVEL="WARNING")
    try:
        wait_until_idle(info.pid)
        before, started = tree_cpu(info.pid), time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(HERE / "profile_task_runs.py"), "--child", CHILD_MODES.get(variant, "recorded")]
            + ["--n", str(n)],
            env=env,
            capture_output=True,
            text=True,
        )
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
        result = json.loads(line[len("RESULT ") :])
        held = wait_for_task_runs(info.api_url, result["flow_run_id"], n)
        wait_until_idle(info.pid)
        return {
            "server_ms": (tree_cpu(info.pid) - before) / n * 1000,
            "held": held,
            "wall_s": time.perf_counter() - started,
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000, help="task runs recorded per variant")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the variants alternate within a round")
    parser.add_argument("--port", type=int, default=4253)
    args = parser.parse_args()
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    work = Path(tempfile.mkdtemp(prefix="ape-server-settings-"))
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_ in range(args.repeat):
        for name in names:
            rows[name].append(measure(name, args.n, work / f"r{round_}", args.port))
            print(f"round {round_ + 1} {name}: {rows[name][-1]}", file=sys.stderr, flush=True)
    base = min(r["server_ms"] for r in rows.get("ape", rows[names[0]]))
    print(f"N = {args.n} recorded task runs per variant, {args.repeat} round(s); server CPU per task run (best round)")
    print("| variant | server CPU ms | vs APE's settings | task runs held |")
    print("|---|---|---|---|")
    for name in names:
        best = min(r["server_ms"] for r in rows[name])
        held = min(int(r["held"]) for r in rows[name])
        print(f"| {VARIANTS[name][0]} | {best:.2f} | {best / base:.2f}x | {held} / {args.n} |")


if __name__ == "__main__":
    main()
