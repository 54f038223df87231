"""The retention of the server APE starts, the database's growth warning, and how `ape record`
tells a run the server forgot from one it never knew (plain functions, no server)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prefect.settings.models.server.services import ServerServicesDBVacuumSettings

from ape import server, server_db
from ape.schemas.errors import ApeError

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _vacuum_settings(env: dict[str, str], _monkeypatch: pytest.MonkeyPatch) -> ServerServicesDBVacuumSettings:
    """What Prefect itself reads from the environment the server is started with (set only
    while Prefect reads it, so the next server_env call sees the test's own environment)."""
    with pytest.MonkeyPatch.context() as scoped:
        for key in (server.VACUUM_ENABLED_KEY, server.VACUUM_RETENTION_KEY):
            scoped.delenv(key, raising=False)
            if key in env:
                scoped.setenv(key, env[key])
        return ServerServicesDBVacuumSettings()


def test_the_default_server_environment_turns_flow_run_retention_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    for key in ("APE_SERVER_RETENTION_DAYS", server.VACUUM_ENABLED_KEY, server.VACUUM_RETENTION_KEY):
        monkeypatch.delenv(key, raising=False)
    env = server.server_env(server.private_dir(tmp_path / "ape" / "server"), "127.0.0.1", 4321)
    vacuum = _vacuum_settings(env, monkeypatch)
    assert "flow_runs" in vacuum.enabled_vacuum_types and "events" in vacuum.enabled_vacuum_types
    assert vacuum.retention_period == timedelta(days=server.DEFAULT_RETENTION_DAYS) == timedelta(days=30)
    assert server.retention_in(env) == 30


def test_the_retention_variable_and_a_users_prefect_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    home = server.private_dir(tmp_path / "ape" / "server")
    monkeypatch.setenv("APE_SERVER_RETENTION_DAYS", "7")
    env = server.server_env(home, "127.0.0.1", 4321)
    assert _vacuum_settings(env, monkeypatch).retention_period == timedelta(days=7)
    monkeypatch.setenv("APE_SERVER_RETENTION_DAYS", "0")  # keep every run
    env = server.server_env(home, "127.0.0.1", 4321)
    assert "flow_runs" not in _vacuum_settings(env, monkeypatch).enabled_vacuum_types
    assert server.retention_in(env) == 0
    monkeypatch.setenv(server.VACUUM_RETENTION_KEY, str(3 * 86400))  # the user's own Prefect setting wins
    monkeypatch.setenv("APE_SERVER_RETENTION_DAYS", "10")
    assert server.retention_in(server.server_env(home, "127.0.0.1", 4321)) == 3
    for bad in ("soon", "-1", "0.01"):  # 0.01 days is under Prefect's one hour
        monkeypatch.setenv("APE_SERVER_RETENTION_DAYS", bad)
        with pytest.raises(ApeError, match="APE_SERVER_RETENTION_DAYS"):
            server.retention_days()


def test_growth_warns_only_when_the_disk_fills_within_a_month(tmp_path: Path) -> None:
    assert server_db.growth([], 10, NOW).per_day is None
    young = [(NOW - timedelta(minutes=10), 0)]  # under an hour old: not a rate yet
    assert server_db.growth(young, 10, NOW).per_day is None
    points = [(NOW - timedelta(days=30), 0), (NOW - timedelta(days=2), 1_000), (NOW - timedelta(days=1), 5_000)]
    rate = server_db.growth(points, 3_000, NOW)  # the oldest sample within the week: 2 days ago
    assert rate.per_day == pytest.approx(1_000) and rate.span_days == pytest.approx(2)
    assert server_db.days_to_fill(20_000, rate) == pytest.approx(20)  # warns (< 30 days)
    assert server_db.days_to_fill(20_000, server_db.growth(points, 500, NOW)) is None  # shrank: no warning
    for day, size in ((3, 100), (1, 200)):
        server_db.record_sample(tmp_path, size, NOW - timedelta(days=day))
    (tmp_path / "db_sizes.jsonl").open("a").write("not json\n")
    assert server_db.samples(tmp_path) == [(NOW - timedelta(days=3), 100), (NOW - timedelta(days=1), 200)]


def test_the_database_is_found_or_said_to_be_postgres(tmp_path: Path) -> None:
    assert server_db.database_path(tmp_path, {}) == tmp_path / "prefect" / "prefect.db"
    url = {"PREFECT_API_DATABASE_CONNECTION_URL": "sqlite+aiosqlite:////data/p.db"}
    assert server_db.database_path(tmp_path, url) == Path("/data/p.db")
    pg = {"PREFECT_API_DATABASE_CONNECTION_URL": "postgresql+asyncpg://u:p@h/prefect"}
    assert server_db.database_path(tmp_path, pg) is None


def _uuid7(at: datetime) -> str:
    value = (int(at.timestamp() * 1000) << 80) | (7 << 76) | (2 << 62) | 12345
    return str(uuid.UUID(int=value))


def test_a_forgotten_run_is_told_from_one_the_server_never_knew() -> None:
    created = server_db.flow_run_created(_uuid7(NOW - timedelta(days=40)))
    assert created is not None and abs(created - (NOW - timedelta(days=40))) < timedelta(seconds=1)
    assert server_db.flow_run_created(str(uuid.uuid4())) is None
    # older than the retention in force
    assert server_db.past_retention(created, None, 30, NOW)
    # retention unknown (a configured server): older than the oldest run it keeps
    assert server_db.past_retention(created, NOW - timedelta(days=20), None, NOW)
    # a recent run the server does not know: another server or APE home
    recent = server_db.flow_run_created(_uuid7(NOW - timedelta(days=2)))
    assert not server_db.past_retention(recent, NOW - timedelta(days=20), 30, NOW)
    assert not server_db.past_retention(created, None, 0, NOW)  # keeps everything, holds nothing older


def test_a_reused_server_says_the_retention_in_force_and_when_another_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    running = server._State(pid=1, host="127.0.0.1", port=4200, started_at=0.0, retention_days=30)
    monkeypatch.delenv("APE_SERVER_RETENTION_DAYS", raising=False)
    assert server._retention_note(running) == "keeps flow runs 30 days after they end"
    monkeypatch.setenv("APE_SERVER_RETENTION_DAYS", "7")
    assert server._retention_note(running) == (
        "keeps flow runs 30 days after they end; APE_SERVER_RETENTION_DAYS=7 applies after 'ape server stop'"
    )
    older = running.model_copy(update={"retention_days": None})  # started by an APE that recorded none
    assert server._retention_note(older).startswith("not known")
    assert server.describe_retention(0) == "keeps every flow run (no retention)"
