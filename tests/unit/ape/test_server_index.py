"""APE's index for Prefect's task-run recorder (ape.server_db.ensure_recorder_index) on a SQLite
file built by Prefect's own migrations: made once, found again, and used by the recorder's
lookup in place of a scan of the table."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest
from prefect.server.database import provide_database_interface
from prefect.settings import PREFECT_API_DATABASE_CONNECTION_URL, temporary_settings

from ape import server, server_db


@pytest.fixture(scope="module")
def prefect_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty database at Prefect's newest migration, made by Prefect itself."""
    path = tmp_path_factory.mktemp("prefect-db") / "prefect.db"
    with temporary_settings({PREFECT_API_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{path}"}):
        asyncio.run(provide_database_interface().create_db())
    return path


@pytest.fixture
def database(prefect_db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "prefect.db"
    shutil.copy(prefect_db, copy)
    return copy


def _recorder_lookup_plan(con: sqlite3.Connection) -> str:
    """SQLite's plan of the lookup Prefect 3.9's task-run recorder sends before an upsert."""
    sql = (
        "SELECT task_run.id, task_run.flow_run_id, task_run.task_key, task_run.dynamic_key FROM task_run "
        "WHERE task_run.id IN (?, ?) OR (task_run.flow_run_id, task_run.task_key, task_run.dynamic_key) "
        "IN (VALUES (?, ?, ?), (?, ?, ?))"
    )
    params = [str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4()), "a", "0", str(uuid.uuid4()), "b", "0"]
    return " / ".join(row[-1] for row in con.execute("EXPLAIN QUERY PLAN " + sql, params))


@pytest.mark.timeout(300)
def test_the_index_is_made_once_and_the_recorders_lookup_reads_it_instead_of_the_table(database: Path) -> None:
    with sqlite3.connect(database) as con:
        before = _recorder_lookup_plan(con)
        assert "SCAN task_run" in before and "COVERING INDEX" not in before, before
        assert not server_db.recorder_index_present(con)

    assert server_db.index_database(database) is True
    assert server_db.index_database(database) is False  # every later start: nothing to do

    with sqlite3.connect(database) as con:
        assert server_db.recorder_index_present(con)
        names = [row[1] for row in con.execute("PRAGMA index_list('task_run')")]
        assert names.count(server_db.RECORDER_INDEX) == 1
        after = _recorder_lookup_plan(con)
    assert f"SCAN task_run USING COVERING INDEX {server_db.RECORDER_INDEX}" in after, after


def test_an_index_of_the_same_columns_under_another_name_is_enough(database: Path) -> None:
    # should Prefect ship the same index, APE adds none of its own
    columns = ", ".join(server_db.RECORDER_INDEX_COLUMNS)
    with sqlite3.connect(database) as con:
        con.execute(f"CREATE INDEX ix_task_run__prefects_own ON task_run ({columns})")
    assert server_db.index_database(database) is False
    with sqlite3.connect(database) as con:
        names = [row[1] for row in con.execute("PRAGMA index_list('task_run')")]
    assert server.server_db.RECORDER_INDEX not in names and "ix_task_run__prefects_own" in names


def test_a_file_without_prefects_tables_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE notes (id TEXT)")
    assert server_db.index_database(path) is False
    with sqlite3.connect(path) as con:
        assert con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'index'").fetchone()[0] == 0


def test_a_database_that_cannot_take_the_index_is_said_in_one_line_and_the_server_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    monkeypatch.delenv(server_db.DATABASE_URL_KEY, raising=False)
    home = server.private_dir(tmp_path / "ape" / "server")
    (home / "prefect").mkdir()
    (home / "prefect" / "prefect.db").write_bytes(b"not a database" * 100)
    messages: list[str] = []
    server._index_database(home, messages.append)
    assert len(messages) == 1 and "could not add APE's task-run index" in messages[0], messages
    assert "\n" not in messages[0]
