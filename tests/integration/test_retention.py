"""A year of nightly runs on one server: the server APE starts forgets old flow runs (Prefect's
db_vacuum, on by default), while `ape history` and `ape diff` still answer for them from the
output folder and `ape record` says the run is past the server's retention; `ape server status`
says the database's size, oldest run, retention, free disk and growth; `ape server compact`
refuses a running server and compacts a stopped one.

Every command runs as a user runs it (``python -m ape`` in a child process) against a real
server started by APE's own code, with a retention of one day (Prefect's minimum is an hour)
and, in this test only, a vacuum pass every second. The first run is made three days old in
the server's database, as three nights would."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from ape import server
from ape.tasks.storage.run_files import metadata_near
from ape.tasks.storage.runs import read_info
from ape.tasks.storage.stage_chains import CHAINS_FILE, LeftOut, read_chains, write_chains
from tests.helpers.cli import run_ape
from tests.helpers.processes import free_port
from tests.helpers.runner import make_benchmark

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An APE home whose server keeps flow runs one day and looks for old ones every second;
    the server is stopped at the end, killed if it lingers."""
    ape_home = tmp_path / "ape"
    monkeypatch.setenv("APE_HOME", str(ape_home))
    monkeypatch.setenv("APE_SERVER_PORT", str(free_port()))
    monkeypatch.setenv("APE_SERVER_RETENTION_DAYS", "1")
    monkeypatch.setenv("PREFECT_SERVER_SERVICES_DB_VACUUM_LOOP_SECONDS", "1")
    for key in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", server.VACUUM_ENABLED_KEY, server.VACUUM_RETENTION_KEY):
        monkeypatch.delenv(key, raising=False)
    yield ape_home
    run_ape("server", "stop", cwd=tmp_path)
    state = server._read_state(ape_home / "server")
    if state is not None and server._alive(state.pid) and server._is_prefect_process(state.pid):
        os.killpg(state.pid, signal.SIGKILL)


def _ok(*args: str, cwd: Path) -> str:
    done = run_ape(*args, cwd=cwd)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done.stdout


def _flow_run_ids(db: Path, top: str) -> list[str]:
    """The run's flow run and its subflows (one per model), as the server holds them."""
    with sqlite3.connect(db, timeout=60) as connection:
        rows = connection.execute(
            "SELECT id FROM flow_run WHERE id = ? OR parent_task_run_id IN (SELECT id FROM task_run WHERE flow_run_id = ?)",
            (top, top),
        ).fetchall()
    return [str(row[0]) for row in rows]


def test_the_server_forgets_an_old_run_and_the_output_folder_still_answers(tmp_path: Path, home: Path) -> None:
    path = make_benchmark(tmp_path / "bench", n=3)
    cwd = tmp_path / "bench"
    started = _ok("server", "start", cwd=cwd)
    assert "Prefect server running" in started
    for _ in range(2):
        done = run_ape("run", str(path), "--new-run", "--no-progress", cwd=cwd)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        assert (
            "retention: keeps flow runs 1 day after they end" in done.stderr + done.stdout
        )  # the reused server says it
    top = cwd / "out"
    first, second = sorted(p.name for p in (top / "runs").iterdir())
    info = read_info(top / "runs" / first)
    assert info is not None and info.flow_run_id

    # three nights later: the first run's flow runs ended three days ago
    db = home / "server" / "prefect" / "prefect.db"
    ids = _flow_run_ids(db, info.flow_run_id)
    assert info.flow_run_id in ids and len(ids) >= 2, ids
    three_days_ago = (datetime.now(UTC) - timedelta(days=3)).strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(db, timeout=60) as connection:
        for flow_run_id in ids:
            connection.execute("UPDATE flow_run SET end_time = ? WHERE id = ?", (three_days_ago, flow_run_id))

    # the vacuum deletes them (a subflow may go in a later pass, once its parent is gone)
    headers = server.auth_headers(server.auth_string(home / "server"))
    api = server.api_url_for("127.0.0.1", int(os.environ["APE_SERVER_PORT"]))
    deadline = time.monotonic() + 180
    left = ids
    while left and time.monotonic() < deadline:
        left = [i for i in ids if httpx.get(f"{api}/flow_runs/{i}", headers=headers, timeout=30).status_code != 404]
        time.sleep(1)
    assert not left, f"the server still holds {left} (log: {home / 'server' / 'server.log'})"
    second_info = read_info(top / "runs" / second)
    assert second_info is not None and second_info.flow_run_id
    kept = httpx.get(f"{api}/flow_runs/{second_info.flow_run_id}", headers=headers, timeout=30)
    assert kept.status_code == 200  # the recent run stays

    # the output folder still answers for the forgotten run
    assert first in _ok("history", str(top), "--no-chart", cwd=cwd)
    assert "0 went from pass to fail" in _ok("diff", str(top), first, second, cwd=cwd)

    # `ape record` on it: past the server's retention, not "another server"
    model = next(
        meta.parent for meta, _ in metadata_near(top / "runs" / first) if (meta.parent / CHAINS_FILE).is_file()
    )
    chains = read_chains(model)
    assert chains is not None and chains.flow_runs
    chains.flow_runs[-1].left_out = [LeftOut(item_id="i0", run_index=0)]  # as if the server had been behind
    write_chains(model, chains)
    record = run_ape("record", str(top / "runs" / first), cwd=cwd)
    assert record.returncode == 2, (record.stdout, record.stderr)
    lines = record.stderr.strip().splitlines()
    assert len(lines) == 1 and "past the retention of the Prefect server" in lines[0], lines
    assert "keeps flow runs 1 day after they end" in lines[0] and "another server" not in lines[0]

    # status: size, oldest run kept (the second run), retention, free disk, growth
    status = _ok("server", "status", cwd=cwd)
    for field in (
        "database: ",
        "oldest run kept: ",
        "retention: keeps flow runs 1 day after they end",
        "free disk: ",
        "growth: ",
    ):
        assert field in status, status
    assert "oldest run kept: none" not in status

    # compact: refused while the server runs, done once it is stopped
    refused = run_ape("server", "compact", cwd=cwd)
    assert refused.returncode == 2 and "runs (pid" in refused.stderr, (refused.stdout, refused.stderr)
    assert len(refused.stderr.strip().splitlines()) == 1
    _ok("server", "stop", cwd=cwd)
    compacted = _ok("server", "compact", cwd=cwd)
    assert f"compacted {db}: " in compacted and "given back" in compacted, compacted
