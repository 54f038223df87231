"""The same speed with a year behind it: a server whose database holds a year of history,
measured beside a fresh one.

The history is made of real APE rows: a small real run (``--seed-sessions`` instant-model
sessions) is recorded by a server APE starts, the server is stopped, and its flow runs, task
runs, states, logs and artifacts are copied by SQL (one ``INSERT ... SELECT`` per table, new
ids and dates) until the database holds ``--task-runs`` task runs spread over 365 days, with
the events of the last 7 days. Ids keep Prefect's form: the first 48 bits of each copy's ids
are its time (UUIDv7), the rest is the original id's.

Then two servers run side by side, both started the way ``ape run`` starts its server
(:func:`ape.server.start`; the history one with ``PREFECT_API_DATABASE_CONNECTION_URL``
pointing at the built file): a fresh one and the one with the history. Each round runs a
``--sessions`` instant-model run on each (the order alternates, so the machine's load hits
both), then times the UI's main API calls on each. Both keep every run (retention off, as a
team that keeps a year of history sets it). Printed: the run's wall time (the item
loop plus the wait until the server holds every task run, as ``ape run`` waits), the server
process tree's CPU per recorded task run (read from /proc), each UI call's median, and
history / fresh ratios.

    python benchmarks/server_history.py --task-runs 1000000 --keep      # build, measure, keep the file
    python benchmarks/server_history.py --db FILE                       # measure again on a kept file
    python benchmarks/server_history.py --db FILE --without-ape-index   # as Prefect alone would
    python benchmarks/server_history.py --task-runs 20000 --sessions 300 --rounds 1   # a smoke test

The database is about 2.4-2.7 GB per million task runs: check ``df`` first. ``--plans`` prints
SQLite's ``EXPLAIN QUERY PLAN`` of the task-run recorder's lookup and how long it takes on the
file, with and without APE's index (docs/server.md, "The same speed with a year behind it").
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from ape import prefect_sqlite, server, server_db  # noqa: E402

DAY_S = 86400
# The tables copied night by night, and the events copied for the last week only.
RUN_TABLES = ("flow_run", "flow_run_state", "task_run", "task_run_state", "log", "artifact")
EVENT_TABLES = ("events", "event_resources")
# Columns holding the id of a copied row: rewritten with the copy's id prefix.
ID_COLUMNS = frozenset({"id", "flow_run_id", "task_run_id", "state_id", "parent_task_run_id", "event_id"})
TIME_TYPES = ("TIMESTAMP", "DATETIME")


def _speed_module():
    """benchmarks/speed.py (the workload files, the APE child, the idle wait), by path."""
    spec = importlib.util.spec_from_file_location("ape_bench_speed", HERE / "speed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- servers


def start(home: Path, port: int, database: Path | None) -> server.ServerInfo:
    """A server started as ``ape run`` starts one, for APE home ``home``; ``database``: its
    SQLite file, through Prefect's own setting (None: the home's default file)."""
    os.environ["APE_HOME"] = str(home)
    if database is None:
        os.environ.pop(server_db.DATABASE_URL_KEY, None)
    else:
        os.environ[server_db.DATABASE_URL_KEY] = f"sqlite+aiosqlite:///{database}"
    try:
        return server.start(port=port, wait_s=600)
    finally:
        os.environ.pop(server_db.DATABASE_URL_KEY, None)


def stop(home: Path) -> None:
    os.environ["APE_HOME"] = str(home)
    server.stop(timeout_s=60)


def child_env(info: server.ServerInfo, work: Path) -> dict[str, str]:
    return dict(
        os.environ,
        **server.client_env(info),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PYTHONPATH=str(ROOT),
        PREFECT_LOCAL_STORAGE_PATH=str(work / "storage"),
    )


# --------------------------------------------------------------------------- the year


def _columns(con: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    return [(row[1], str(row[2]).upper()) for row in con.execute(f'PRAGMA table_info("{table}")')]


def _time_format(con: sqlite3.Connection) -> str:
    """strftime's format of the timestamps Prefect wrote (with or without microseconds)."""
    value = con.execute("SELECT created FROM task_run LIMIT 1").fetchone()[0]
    return "%Y-%m-%d %H:%M:%f" if "." in str(value) else "%Y-%m-%d %H:%M:%S"


def _select(con: sqlite3.Connection, table: str, time_format: str) -> tuple[str, str]:
    """The column list and the SELECT expressions that copy ``table``'s seed rows (alias ``t``)
    as copy ``c``: ids with the copy's prefix, times moved back by the copy's shift."""
    names, exprs = [], []
    for name, kind in _columns(con, table):
        names.append(f'"{name}"')
        if name in ID_COLUMNS:
            exprs.append(f'CASE WHEN t."{name}" IS NULL THEN NULL ELSE c.prefix || substr(t."{name}", 14) END')
        elif any(word in kind for word in TIME_TYPES):
            exprs.append(f"strftime('{time_format}', t.\"{name}\", c.shift)")
        elif name == "idempotency_key":
            exprs.append(f'CASE WHEN t."{name}" IS NULL THEN NULL ELSE t."{name}" || \'-\' || c.k END')
        else:
            exprs.append(f't."{name}"')
    return ", ".join(names), ", ".join(exprs)


def build_year(database: Path, task_runs: int, days: float = 365.0, event_days: float = 7.0) -> dict[str, int]:
    """Copy the seed run's rows in ``database`` until it holds about ``task_runs`` task runs
    spread over ``days``, events over the last ``event_days``. Returns rows per table."""
    con = sqlite3.connect(database, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-200000")
    seed = con.execute("SELECT count(*) FROM task_run").fetchone()[0]
    if seed == 0:
        raise SystemExit(f"{database}: the seed run left no task runs")
    copies = max(0, math.ceil(task_runs / seed) - 1)
    now_ms = int(time.time() * 1000)
    step_s = days * DAY_S / max(copies, 1)
    rows = []
    for k in range(1, copies + 1):
        shift_s = k * step_s
        ms = now_ms - int(shift_s * 1000)
        prefix = f"{ms >> 16:08x}-{ms & 0xFFFF:04x}"
        rows.append((k, prefix, f"-{shift_s:.3f} seconds", shift_s))
    con.execute("CREATE TEMP TABLE copies (k INTEGER PRIMARY KEY, prefix TEXT, shift TEXT, shift_s REAL)")
    con.executemany("INSERT INTO copies VALUES (?, ?, ?, ?)", rows)
    time_format = _time_format(con)
    for table in (*RUN_TABLES, *EVENT_TABLES):
        if not _columns(con, table):
            continue
        started = time.perf_counter()
        names, exprs = _select(con, table, time_format)
        con.execute(f'CREATE TEMP TABLE seed AS SELECT * FROM "{table}"')
        where = f"WHERE c.shift_s <= {event_days * DAY_S}" if table in EVENT_TABLES else ""
        con.execute("BEGIN")
        # copy by copy (SQLite keeps a CROSS JOIN's order): each copy's ids share a prefix, so
        # the indexes grow at one end instead of everywhere
        con.execute(f'INSERT INTO "{table}" ({names}) SELECT {exprs} FROM copies AS c CROSS JOIN seed AS t {where}')
        con.execute("COMMIT")
        con.execute("DROP TABLE seed")
        count = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        print(f"  {table}: {count:,} rows ({time.perf_counter() - started:.0f} s)", flush=True)
    counts = {table: con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] for table in RUN_TABLES}
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return counts


def seed_and_build(speed, database: Path, work: Path, port: int, task_runs: int, seed_sessions: int) -> None:
    """A real run recorded by a server APE starts on ``database``, then a year of copies."""
    home = work / "seed-home"
    info = start(home, port, database)
    speed.SERVER_PID = info.pid
    try:
        result = speed.run_child(speed.make_workload(work / "seed", seed_sessions, 0.0, 16), child_env(info, work))
        print(f"seed run: {seed_sessions} sessions, recorded {result['recorded']}", flush=True)
        speed.wait_until_idle(info.pid)
    finally:
        stop(home)
    started = time.perf_counter()
    counts = build_year(database, task_runs)
    size = server_db.database_size(database)
    print(
        f"built {database}: {counts['task_run']:,} task runs, {counts['flow_run']:,} flow runs, "
        f"{size / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s",
        flush=True,
    )


# --------------------------------------------------------------------------- the UI's calls


def ui_calls(api_url: str, auth: str, repeat: int = 3) -> dict[str, float]:
    """Median seconds of the calls the UI makes for its runs list, a flow run's task runs and
    the dashboard's counts (Prefect 3.9's UI; bodies as it sends them)."""
    now = datetime.now(UTC)
    day_ago = (now - timedelta(days=1)).isoformat()
    week_ago = (now - timedelta(days=7)).isoformat()
    times: dict[str, list[float]] = {}
    with server.api_session(api_url, timeout=300, auth=auth) as client:
        latest = client.post("/flow_runs/filter", json={"sort": "START_TIME_DESC", "limit": 1}).json()
        flow_run_id = latest[0]["id"]
        recent = {"flow_runs": {"start_time": {"after_": week_ago}}}
        calls = {
            "runs list": ("/flow_runs/paginate", {"page": 1, "limit": 10, "sort": "START_TIME_DESC", **recent}),
            "runs count": ("/flow_runs/count", recent),
            "flow run's task runs": (
                "/task_runs/paginate",
                {
                    "page": 1,
                    "limit": 10,
                    "sort": "EXPECTED_START_TIME_DESC",
                    "flow_runs": {"id": {"any_": [flow_run_id]}},
                },
            ),
            "flow run's task-run count": ("/ui/flow_runs/count-task-runs", {"flow_run_ids": [flow_run_id]}),
            "dashboard task-run counts": (
                "/ui/task_runs/dashboard/counts",
                {"task_runs": {"start_time": {"after_": day_ago}}},
            ),
            "dashboard task runs by state": ("/ui/task_runs/count", {"task_runs": {"start_time": {"after_": day_ago}}}),
            "dashboard flow-run history": (
                "/ui/flow_runs/history",
                {"history_start": day_ago, "history_end": now.isoformat(), "history_interval_seconds": 3600},
            ),
        }
        for _ in range(repeat):
            for name, (path, body) in calls.items():
                started = time.perf_counter()
                response = client.post(path, json=body)
                times.setdefault(name, []).append(time.perf_counter() - started)
                if response.status_code >= 400:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
    return {name: statistics.median(values) for name, values in times.items()}


# --------------------------------------------------------------------------- the query plan


def recorder_lookup(con: sqlite3.Connection, rows: int = 24) -> tuple[str, float]:
    """SQLite's plan of the task-run recorder's lookup of existing task runs (Prefect 3.9.1,
    services/task_run_recorder.py: ids, or (flow_run_id, task_key, dynamic_key) in VALUES), for
    ``rows`` new task runs, and the seconds it takes on this file."""
    keys = [(str(uuid.uuid4()), f"k{i}", "0") for i in range(rows)]
    ids = [str(uuid.uuid4()) for _ in range(rows)]
    values = ", ".join("(?, ?, ?)" for _ in keys)
    sql = (
        "SELECT task_run.id, task_run.flow_run_id, task_run.task_key, task_run.dynamic_key FROM task_run "
        f"WHERE task_run.id IN ({', '.join('?' for _ in ids)}) "
        f"OR (task_run.flow_run_id, task_run.task_key, task_run.dynamic_key) IN (VALUES {values})"
    )
    params = [*ids, *(part for key in keys for part in key)]
    plan = " / ".join(row[-1] for row in con.execute("EXPLAIN QUERY PLAN " + sql, params))
    started = time.perf_counter()
    con.execute(sql, params).fetchall()
    return plan, time.perf_counter() - started


def show_plans(database: Path) -> None:
    """The lookup's plan and time with APE's index and without it (on a copy of nothing: the
    index is dropped and made again in this file)."""
    con = sqlite3.connect(database, isolation_level=None)
    had = server_db.recorder_index_present(con)
    con.execute(f"DROP INDEX IF EXISTS {server_db.RECORDER_INDEX}")
    for label in ("without APE's index", "with APE's index"):
        if label.startswith("with "):
            started = time.perf_counter()
            server_db.ensure_recorder_index(con)
            print(f"  CREATE INDEX: {time.perf_counter() - started:.1f} s")
        recorder_lookup(con)  # warm the page cache as a running server's would be
        plan, seconds = recorder_lookup(con)
        print(f"  {label}: {seconds * 1000:.0f} ms per lookup of 24 new task runs; plan: {plan}")
    if not had:
        con.execute(f"DROP INDEX IF EXISTS {server_db.RECORDER_INDEX}")
    con.close()


# --------------------------------------------------------------------------- the runs


def one_run(speed, info: server.ServerInfo, work: Path, label: str, sessions: int) -> dict[str, float]:
    """A ``sessions`` instant-model run on server ``info``: its wall, the end's wait, and the
    server's CPU per recorded task run (after the server has gone idle again)."""
    speed.wait_until_idle(info.pid)
    assert info.pid is not None
    held0 = task_runs_held(info)
    cpu0 = speed.tree_cpu(info.pid)
    config = speed.make_workload(work / label, sessions, 0.0, 16, call_log=False)
    result = speed.run_child(config, child_env(info, work), idle_first=False)
    speed.wait_until_idle(info.pid, limit_s=900)  # a server behind records the rest meanwhile
    cpu = speed.tree_cpu(info.pid) - cpu0
    recorded = task_runs_held(info) - held0
    held = result["recorded"] or [0, 0, 0]
    return {
        "wall_s": result["loop_s"],
        "end_wait_s": result["record_wait_s"],
        "held_at_end": held[0],  # task runs the server held when the run ended
        "expected": held[1],
        "recorded": recorded,  # ... and once the server was idle again
        "server_ms_per_task_run": 1000 * cpu / max(recorded, 1),
    }


def task_runs_held(info: server.ServerInfo) -> int:
    """Task runs in the server's database."""
    with server.api_session(info.api_url, timeout=600, auth=server.auth_string(info.home)) as client:
        response = client.post("/task_runs/count", json={})
        response.raise_for_status()
        return int(response.json())


def measure(speed, servers: dict[str, server.ServerInfo], work: Path, rounds: int, sessions: int) -> None:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    calls: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    order = list(servers)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            row = one_run(speed, servers[name], work, f"{name}-{r}", sessions)
            runs[name].append(row)
            print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
            calls[name].append(ui_calls(servers[name].api_url, server.auth_string(servers[name].home)))
            print(f"round {r + 1} {name} UI: " + ", ".join(f"{k} {v:.3f} s" for k, v in calls[name][-1].items()))
    print()
    print(f"{'measure':<34} {'fresh':>10} {'history':>10} {'history/fresh':>14}")
    for key in ("wall_s", "end_wait_s", "held_at_end", "recorded", "server_ms_per_task_run"):
        fresh = statistics.median(row[key] for row in runs["fresh"])
        hist = statistics.median(row[key] for row in runs["history"])
        print(f"{key:<34} {fresh:>10.2f} {hist:>10.2f} {hist / max(fresh, 1e-9):>14.2f}")
    for key in calls["fresh"][0]:
        fresh = statistics.median(row[key] for row in calls["fresh"])
        hist = statistics.median(row[key] for row in calls["history"])
        print(f"{key + ' (s)':<34} {fresh:>10.3f} {hist:>10.3f} {hist / max(fresh, 1e-9):>14.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task-runs", type=int, default=1_000_000, help="task runs the history holds")
    parser.add_argument("--db", type=Path, help="the history's SQLite file: reused when it exists, else built there")
    parser.add_argument("--keep", action="store_true", help="keep the built file (printed at the end)")
    parser.add_argument("--seed-sessions", type=int, default=200, help="sessions of the real run that is copied")
    parser.add_argument("--sessions", type=int, default=2000, help="sessions of each measured run")
    parser.add_argument("--rounds", type=int, default=2, help="measured runs on each server, alternating")
    parser.add_argument("--port", type=int, default=4600, help="first of the three ports it uses")
    parser.add_argument("--without-ape-index", action="store_true", help="drop APE's recorder index after start")
    parser.add_argument(
        "--system-sqlite", action="store_true", help="servers on Python's own SQLite (APE_SERVER_SQLITE=system)"
    )
    parser.add_argument("--plans", action="store_true", help="print the recorder lookup's query plans and stop")
    parser.add_argument("--build-only", action="store_true", help="build the history and stop")
    args = parser.parse_args()
    speed = _speed_module()
    # a server that keeps the year: with APE's default retention (30 days) the history server's
    # db_vacuum would delete most of the history while it is measured
    os.environ[server.RETENTION_ENV] = "0"
    work = Path(tempfile.mkdtemp(prefix="ape-history-bench-"))
    kept_at = Path(tempfile.gettempdir()) / f"ape-history-{args.task_runs}.db"
    database = (args.db or (kept_at if args.keep or args.build_only else work / "history.db")).resolve()
    if not database.exists():
        database.parent.mkdir(parents=True, exist_ok=True)
        print(f"free disk: {server_db.free_disk(database.parent) / 1e9:.0f} GB", flush=True)
        seed_and_build(speed, database, work, args.port + 2, args.task_runs, args.seed_sessions)
    con = sqlite3.connect(database)
    held = con.execute("SELECT count(*) FROM task_run").fetchone()[0]
    con.close()
    print(f"history: {held:,} task runs, {server_db.database_size(database) / 1e9:.2f} GB ({database})", flush=True)
    if args.plans:
        show_plans(database)
    if args.plans or args.build_only:
        shutil.rmtree(work, ignore_errors=True)  # the seed run's folders; the database is kept
        return
    load = os.getloadavg()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    if args.system_sqlite:
        os.environ["APE_SERVER_SQLITE"] = "system"
    newer = prefect_sqlite.newer_sqlite()
    in_use = newer.sqlite_version if newer is not None else sqlite3.sqlite_version
    index = "dropped" if args.without_ape_index else "made at start"
    print(f"servers on SQLite {in_use}; APE's recorder index {index}", flush=True)
    servers: dict[str, server.ServerInfo] = {}
    try:
        servers["fresh"] = start(work / "fresh-home", args.port, None)
        servers["history"] = start(work / "history-home", args.port + 1, database)
        if args.without_ape_index:
            con = sqlite3.connect(database, isolation_level=None, timeout=60)
            con.execute(f"DROP INDEX IF EXISTS {server_db.RECORDER_INDEX}")
            con.close()
        measure(speed, servers, work, args.rounds, args.sessions)
    finally:
        for name in servers:
            stop(servers[name].home.parent)  # ServerInfo.home is the APE home's server folder
        if args.keep or args.db:
            print(f"kept {database}")
        else:
            for suffix in server_db.SQLITE_SUFFIXES:
                Path(f"{database}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


if __name__ == "__main__":
    main()
