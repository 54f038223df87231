"""The database of the server APE starts: where it is, how big, how fast it grows, its oldest run.

Why: a server that runs every night for a year grows by a few hundred megabytes to gigabytes
(docs/server.md, "How long the server keeps runs"), and a full disk stops every run at once.
``ape server status`` says the database's size, the free disk, and warns when the disk would
fill within :data:`WARN_DAYS` at the recent rate.

The rate is measured simply: every ``ape server status`` and every server start appends the
database's size to ``server/db_sizes.jsonl`` (``{"at": ISO time, "bytes": n}``, the last
:data:`KEEP_SAMPLES` kept); the rate is the growth since the oldest sample of the last
:data:`RATE_WINDOW_DAYS` days that is at least :data:`MIN_SPAN_HOURS` old, per day. With
retention on, the database stops growing once it holds a whole window (SQLite reuses the
pages deleted runs leave), and the rate falls to about zero.

The database is SQLite in ``server/prefect/prefect.db`` unless the user set
``PREFECT_API_DATABASE_CONNECTION_URL``: a PostgreSQL one is the database server's to size.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import httpx

DATABASE_URL_KEY = "PREFECT_API_DATABASE_CONNECTION_URL"
SAMPLES_FILE = "db_sizes.jsonl"
KEEP_SAMPLES = 500
RATE_WINDOW_DAYS = 7.0
MIN_SPAN_HOURS = 1.0
WARN_DAYS = 30.0
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")
# APE's index on the SQLite database of the server it starts (see ensure_recorder_index).
RECORDER_INDEX = "ape_ix_task_run__recorder_lookup"
RECORDER_INDEX_COLUMNS = ("flow_run_id", "task_key", "dynamic_key", "id")
INDEX_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Growth:
    """The database's recent growth: bytes a day over ``span_days``; None when not measured yet."""

    per_day: float | None
    span_days: float


def database_path(home: Path, env: dict[str, str] | None = None) -> Path | None:
    """The SQLite file of the server APE starts in ``home``; None when ``env`` (default: this
    process's) names another database (PostgreSQL)."""
    url = (env if env is not None else os.environ).get(DATABASE_URL_KEY, "").strip()
    if not url:
        return home / "prefect" / "prefect.db"
    scheme, _, rest = url.partition("://")
    if not scheme.startswith("sqlite") or not rest.startswith("/"):
        return None
    return Path(unquote(rest[1:].split("?", 1)[0]))


def database_size(path: Path) -> int:
    """Bytes of the SQLite database and its write-ahead log, shared memory and journal files."""
    total = 0
    for suffix in SQLITE_SUFFIXES:
        try:
            total += Path(f"{path}{suffix}").stat().st_size
        except OSError:
            continue
    return total


def free_disk(path: Path) -> int:
    """Bytes free on the file system that holds ``path`` (or its nearest existing folder)."""
    current = Path(path)
    while not current.exists() and current.parent != current:
        current = current.parent
    return shutil.disk_usage(current).free


def record_sample(home: Path, size: int, now: datetime | None = None) -> None:
    """Append the database's size now to the samples the growth rate is read from."""
    path = home / SAMPLES_FILE
    lines = _lines(path)[-(KEEP_SAMPLES - 1) :]
    lines.append(json.dumps({"at": (now or datetime.now(UTC)).isoformat(timespec="seconds"), "bytes": size}))
    temporary = path.with_name(f".{SAMPLES_FILE}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(temporary, path)


def samples(home: Path) -> list[tuple[datetime, int]]:
    """(time, bytes) of every readable sample, oldest first; a damaged line is skipped."""
    found = []
    for line in _lines(home / SAMPLES_FILE):
        try:
            row = json.loads(line)
            found.append((datetime.fromisoformat(row["at"]), int(row["bytes"])))
        except (ValueError, KeyError, TypeError):
            continue
    return sorted(found)


def growth(points: list[tuple[datetime, int]], size: int, now: datetime) -> Growth:
    """The growth from the oldest sample of the last :data:`RATE_WINDOW_DAYS` days that is at
    least :data:`MIN_SPAN_HOURS` old to ``size`` now, per day."""
    window = [
        (at, bytes_)
        for at, bytes_ in points
        if timedelta(hours=MIN_SPAN_HOURS) <= now - at <= timedelta(days=RATE_WINDOW_DAYS)
    ]
    if not window:
        return Growth(None, 0.0)
    at, then = window[0]
    span = (now - at).total_seconds() / 86400
    return Growth((size - then) / span, span)


def days_to_fill(free: int, rate: Growth) -> float | None:
    """Days until ``free`` bytes are used at ``rate``; None when the database does not grow."""
    if rate.per_day is None or rate.per_day <= 0:
        return None
    return free / rate.per_day


def oldest_run_start(client: httpx.Client) -> datetime | None:
    """The start time of the oldest flow run the server ``client`` calls keeps (None: no run).
    Raises :class:`httpx.HTTPError` when the server does not answer."""
    body = {"sort": "START_TIME_ASC", "limit": 1, "flow_runs": {"start_time": {"is_null_": False}}}
    response = client.post("/flow_runs/filter", json=body)
    response.raise_for_status()
    rows = response.json()
    if not rows or not rows[0].get("start_time"):
        return None
    return datetime.fromisoformat(str(rows[0]["start_time"]).replace("Z", "+00:00"))


def flow_run_created(flow_run_id: str) -> datetime | None:
    """When a flow run was created, read from its id: Prefect's flow run ids are UUIDv7, whose
    first 48 bits are the creation time in milliseconds; None for another kind of id."""
    try:
        value = uuid.UUID(str(flow_run_id))
    except ValueError:
        return None
    if value.version != 7:
        return None
    return datetime.fromtimestamp((value.int >> 80) / 1000, UTC)


def past_retention(
    created: datetime | None, oldest_kept: datetime | None, retention_days: float | None, now: datetime
) -> bool:
    """Whether a flow run the server does not know was forgotten by it (its retention), rather
    than never sent to it: older than the retention in force, or older than the oldest run the
    server still keeps."""
    if created is None:
        return False
    if retention_days and now - created > timedelta(days=retention_days):
        return True
    return oldest_kept is not None and oldest_kept > created


def ensure_recorder_index(con: sqlite3.Connection) -> bool:
    """Give the ``task_run`` table APE's covering index of the task-run recorder's lookup, once;
    True when it was made now.

    Why: Prefect's task-run recorder (3.9) looks up the task runs it is about to write by
    ``(flow_run_id, task_key, dynamic_key) IN (VALUES ...)``, once per flush and once per chunk of
    about 30 rows. SQLite 3.40 plans that as a scan, whatever indexes exist: of the whole table,
    about 2.6 KB a row, without this index; of this index, with it (``SCAN task_run USING
    COVERING INDEX``): half the time at a million task runs, still a scan. A current SQLite
    (:mod:`ape.prefect_sqlite`) searches Prefect's unique index instead and leaves this one
    unused. docs/server.md, "The same speed with a year behind it", has the figures.

    Safe to call on every start: nothing is done when the index (or an index of the same columns,
    should Prefect ship one) exists, or when the file has no ``task_run`` table (not a Prefect
    database); a migration of Prefect's that rebuilds the table drops it, and the next start
    makes it again. Its name is APE's, so it never collides with one of Prefect's.
    """
    if not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'task_run'").fetchone():
        return False
    if recorder_index_present(con):
        return False
    columns = ", ".join(RECORDER_INDEX_COLUMNS)
    con.execute(f"CREATE INDEX IF NOT EXISTS {RECORDER_INDEX} ON task_run ({columns})")
    con.commit()
    return True


def recorder_index_present(con: sqlite3.Connection) -> bool:
    """Whether ``task_run`` has an index of :data:`RECORDER_INDEX_COLUMNS`, APE's or another."""
    for row in con.execute("PRAGMA index_list('task_run')").fetchall():
        name = str(row[1])
        columns = tuple(str(info[2]) for info in con.execute(f"PRAGMA index_info('{name}')").fetchall())
        if columns == RECORDER_INDEX_COLUMNS:
            return True
    return False


def index_database(path: Path) -> bool:
    """:func:`ensure_recorder_index` on the SQLite file ``path`` while its server runs (SQLite
    lets one writer wait for another); True when the index was made now. Raises
    :class:`sqlite3.Error` when the file cannot be changed."""
    con = sqlite3.connect(path, timeout=INDEX_TIMEOUT_S)
    try:
        return ensure_recorder_index(con)
    finally:
        con.close()


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return []


__all__ = [
    "DATABASE_URL_KEY",
    "RECORDER_INDEX",
    "RECORDER_INDEX_COLUMNS",
    "WARN_DAYS",
    "Growth",
    "database_path",
    "database_size",
    "days_to_fill",
    "flow_run_created",
    "free_disk",
    "ensure_recorder_index",
    "growth",
    "index_database",
    "oldest_run_start",
    "past_retention",
    "record_sample",
    "recorder_index_present",
    "samples",
]
