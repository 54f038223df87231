"""What one session of an ``ape run`` costs the Prefect server APE starts, and what the
settings APE starts it with change in that cost.

For each variant, a fresh local server is started the way ``ape run`` starts one
(``ape.server.start``; a setting in the environment wins over ``SERVER_SETTINGS``), then
``python -m ape run`` runs N instant mock-model sessions against it (16 workers,
``benchmarks/speed.py``'s workload) and the background catch-up is waited for until the
server holds every session's task run and every recorded chain (``recording.py``'s check).
Measured per variant, once the server is idle again:

- the server's process-tree CPU (``/proc`` through psutil) from before the run until idle,
  per session and per task run;
- what its SQLite database holds per session: rows and bytes of each table Prefect writes
  (``dbstat``), events and event resources included.

The variants alternate within a round, so each is measured beside the unchanged settings
(``ape``) in the same invocation; the table prints each variant's ratio to ``ape``.

    python benchmarks/server_cost.py                      # N = 2,000, all variants, 1 round
    python benchmarks/server_cost.py --n 2000 --repeat 2 --variants ape,quiet-log
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recording import server_counts, wait_for_mirror  # benchmarks/recording.py, beside this script
from server_settings import start_server  # benchmarks/server_settings.py
from speed import make_workload, tree_cpu, wait_until_idle  # benchmarks/speed.py

# the server's variants: environment settings on top of APE's (``ape.server.SERVER_SETTINGS``)
SERVER_VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "ape": ("APE's settings (what `ape run` starts)", {}),
    "quiet-log": (
        "server log at WARNING",
        {"PREFECT_SERVER_LOGGING_LEVEL": "WARNING", "PREFECT_LOGGING_LEVEL": "WARNING"},
    ),
    "batch-2000": (
        "recorder and persister batches of 2,000, flushed every 2 s",
        {
            "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "2000",
            "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "2",
            "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "2000",
            "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "2",
        },
    ),
    "no-triggers": ("triggers off (no automations)", {"PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false"}),
    "no-persister": (
        "event persister off (no Events feed)",
        {"PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false"},
    ),
}
# the run's variants: environment of `ape run` itself (the client side)
CLIENT_VARIANTS: dict[str, dict[str, str]] = {
    "no-api-logs": {"PREFECT_LOGGING_TO_API_ENABLED": "false"},
}
LABELS = {**{k: v[0] for k, v in SERVER_VARIANTS.items()}, "no-api-logs": "the run sends no logs to the API"}
TABLES = ("task_run", "task_run_state", "events", "event_resources", "log", "artifact", "flow_run", "flow_run_state")


def database_use(db: Path) -> dict[str, tuple[int, int]]:
    """Rows and bytes (pages of the table and its indexes, ``dbstat``) of each of TABLES."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        sizes: dict[str, int] = {}
        for table, size in conn.execute(
            "SELECT m.tbl_name, SUM(s.pgsize) FROM dbstat s JOIN sqlite_master m ON m.name = s.name GROUP BY s.name"
        ):
            sizes[table] = sizes.get(table, 0) + int(size)
        return {t: (int(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]), sizes.get(t, 0)) for t in TABLES}


def task_run_events(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM events WHERE event LIKE 'prefect.task-run.%'").fetchone()[0])


def settle(pid: int, db: Path, limit_s: float = 900.0) -> None:
    """Wait until the server has done with the run: its event persister writes behind its
    task-run recorder (on a loaded machine by tens of seconds), so the mirror being complete
    is not enough. Settled: two looks 3 s apart with the same task-run events in the database
    and the server's tree under a tenth of a core."""
    deadline = time.monotonic() + limit_s
    last, cpu, calm = -1, tree_cpu(pid), 0
    while time.monotonic() < deadline and calm < 2:
        time.sleep(3)
        held, now = task_run_events(db), tree_cpu(pid)
        calm = calm + 1 if held == last and now - cpu < 0.3 else 0
        last, cpu = held, now


def measure(variant: str, n: int, work: Path, port: int) -> dict[str, float]:
    """Start a server with the variant's settings, run ``n`` instant sessions, wait for the
    mirror and an idle server, and return the server's CPU and database use per session."""
    from ape import server

    home = work / variant
    info = start_server(SERVER_VARIANTS.get(variant, ("", {}))[1], home, port)
    env = dict(os.environ, **server.client_env(info), PREFECT_LOGGING_LEVEL="WARNING")
    env.update(CLIENT_VARIANTS.get(variant, {}))
    folder = work / f"run-{variant}"
    make_workload(folder, n, 0.0, 16, call_log=False)
    try:
        wait_until_idle(info.pid)
        before = tree_cpu(info.pid)
        done = subprocess.run(
            [sys.executable, "-m", "ape", "run", "config.toml"], cwd=folder, env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
        wait_for_mirror(folder, info.api_url, n)
        db = home / "server" / "prefect" / "prefect.db"
        settle(info.pid, db)
        cpu = tree_cpu(info.pid) - before
        counts = server_counts(info.api_url)
        task_runs = sum(counts[s] for s in ("session", "render", "solve", "adapt", "check", "score"))
        use = database_use(db)
        events_held = task_run_events(db)
    finally:
        server.stop()
    row = {"server_ms": cpu / n * 1000, "task_runs": task_runs, "ms_per_task_run": cpu / task_runs * 1000}
    row["events_held"] = events_held / task_runs  # the Events feed: a task run's event in the events table
    for table, (rows, size) in use.items():
        row[f"{table}_rows"] = rows / n
        row[f"{table}_bytes"] = size / n
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="instant sessions per variant")
    variants = [*SERVER_VARIANTS, *CLIENT_VARIANTS]
    parser.add_argument("--variants", default=",".join(variants), help=f"comma-separated, of {', '.join(variants)}")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the variants alternate within a round")
    parser.add_argument("--port", type=int, default=4255)
    args = parser.parse_args()
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = [name for name in names if name not in variants]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(variants)}")
    if "ape" not in names:
        names.insert(0, "ape")  # every ratio is to APE's settings, measured in the same run
    work = Path(tempfile.mkdtemp(prefix="ape-server-cost-"))
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_ in range(args.repeat):
        for name in names:
            rows[name].append(measure(name, args.n, work / f"r{round_}", args.port))
            print(f"round {round_ + 1} {name}: {rows[name][-1]}", file=sys.stderr, flush=True)
    print(f"N = {args.n} instant sessions per variant, {args.repeat} round(s), best round; per session:")
    base = min(r["server_ms"] for r in rows["ape"])
    print(
        "| variant | server CPU ms | vs APE's | ms per task run | task runs | events | event bytes | task-run bytes"
        " | logs | task runs with their event |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        best = min(rows[name], key=lambda r: r["server_ms"])
        event_bytes = best["events_bytes"] + best["event_resources_bytes"]
        run_bytes = best["task_run_bytes"] + best["task_run_state_bytes"]
        print(
            f"| {LABELS[name]} | {best['server_ms']:.2f} | {best['server_ms'] / base:.2f}x"
            f" | {best['ms_per_task_run']:.2f}"
            f" | {best['task_run_rows']:.2f} | {best['events_rows']:.2f} | {event_bytes:,.0f} | {run_bytes:,.0f}"
            f" | {best['log_rows']:.2f} | {best['events_held']:.0%} |"
        )
    print(f"(state in {work}; at {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
