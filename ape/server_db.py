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


def _lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return []


__all__ = [
    "DATABASE_URL_KEY",
    "WARN_DAYS",
    "Growth",
    "database_path",
    "database_size",
    "days_to_fill",
    "flow_run_created",
    "free_disk",
    "growth",
    "oldest_run_start",
    "past_retention",
    "record_sample",
    "samples",
]
