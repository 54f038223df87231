"""The server APE starts runs Prefect on the newest SQLite it can load (ape.prefect_sqlite):
pysqlite3 stands in for sqlite3 only when it is newer, and APE_SERVER_SQLITE=system keeps the
standard module."""

from __future__ import annotations

import importlib
import sqlite3
import subprocess
import sys
from types import ModuleType, SimpleNamespace

import pytest

from ape import prefect_sqlite, server


def _fake(version: tuple[int, int, int]) -> ModuleType:
    module = ModuleType("pysqlite3.dbapi2")
    module.sqlite_version_info = version  # type: ignore[attr-defined]
    module.sqlite_version = ".".join(map(str, version))  # type: ignore[attr-defined]
    return module


@pytest.fixture
def offered(monkeypatch: pytest.MonkeyPatch):
    """Offer a pysqlite3 of a given SQLite version to newer_sqlite (None: not installed)."""
    real = importlib.import_module

    def offer(version: tuple[int, int, int] | None) -> None:
        def import_module(name: str, *args, **kwargs):
            if name != prefect_sqlite.NEWER_MODULE:
                return real(name, *args, **kwargs)
            if version is None:
                raise ImportError(name)
            return _fake(version)

        monkeypatch.setattr(prefect_sqlite.importlib, "import_module", import_module)

    monkeypatch.delenv(prefect_sqlite.CHOICE_ENV, raising=False)
    return offer


def test_a_newer_sqlite_stands_in_for_the_standard_one(offered, monkeypatch: pytest.MonkeyPatch) -> None:
    offered((99, 0, 0))
    monkeypatch.setitem(sys.modules, "sqlite3", sqlite3)
    monkeypatch.setitem(sys.modules, "sqlite3.dbapi2", sys.modules.get("sqlite3.dbapi2", sqlite3))
    assert prefect_sqlite.use_newest_sqlite() == "99.0.0"
    assert sys.modules["sqlite3"].sqlite_version == "99.0.0"
    assert sys.modules["sqlite3.dbapi2"] is sys.modules["sqlite3"]


@pytest.mark.parametrize("version", [None, (3, 0, 0), tuple(sqlite3.sqlite_version_info)])
def test_without_a_newer_one_nothing_changes(offered, version) -> None:
    offered(version)
    assert prefect_sqlite.newer_sqlite() is None
    assert prefect_sqlite.use_newest_sqlite() == sqlite3.sqlite_version
    assert sys.modules["sqlite3"] is sqlite3


def test_ape_server_sqlite_system_keeps_the_standard_module(offered, monkeypatch: pytest.MonkeyPatch) -> None:
    offered((99, 0, 0))
    monkeypatch.setenv(prefect_sqlite.CHOICE_ENV, "system")
    assert prefect_sqlite.newer_sqlite() is None


def test_the_server_is_started_through_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    started: list[list[str]] = []

    def popen(command, **_kwargs):
        started.append(command)
        return SimpleNamespace(pid=2**22 + 7)

    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    monkeypatch.setattr(server.subprocess, "Popen", popen)
    home = server.private_dir(tmp_path / "ape" / "server")
    server._spawn(home, "127.0.0.1", 4321)
    server._SPAWNED.clear()
    assert started[0][1:5] == ["-m", "ape.prefect_sqlite", "server", "start"]
    # the pid check of a reused server reads "prefect" in the command line
    assert "prefect" in " ".join(started[0])


def test_it_runs_prefects_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ape.prefect_sqlite", "version"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "3." in done.stdout
