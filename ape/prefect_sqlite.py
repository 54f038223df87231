"""Prefect's command line on the newest SQLite this Python can load: the entry point of the
server APE starts (``python -m ape.prefect_sqlite server start ...``).

Why: Prefect's task-run recorder (3.9) looks up the task runs it is about to write with
``(flow_run_id, task_key, dynamic_key) IN (VALUES ...)``, once per flush and once per chunk of
about 30 rows. SQLite 3.40 (Debian 12's, which Python's ``sqlite3`` module loads there) plans that
as a scan of the whole ``task_run`` table, so with a year of history behind it every chunk costs
a second and the server falls behind; SQLite 3.51 plans it as a search of Prefect's own unique
index. Python's ``sqlite3`` is bound to the SQLite its build found, so a newer one comes from the
``pysqlite3`` module (the ``pysqlite3-binary`` wheel, a dependency of APE on Linux x86_64: a
build of the standard module against a current SQLite). When it is installed and its SQLite is
newer than the standard module's, it stands in for ``sqlite3`` in this process before Prefect
(SQLAlchemy, aiosqlite, Alembic) imports it; otherwise nothing changes. The file format is the
same, so the database stays readable by any SQLite. ``APE_SERVER_SQLITE=system`` keeps the
standard module (to compare, or should the newer SQLite misbehave).

Figures: docs/server.md, "The same speed with a year behind it".
"""

from __future__ import annotations

import importlib
import os
import runpy
import sqlite3
import sys
from types import ModuleType

NEWER_MODULE = "pysqlite3.dbapi2"
CHOICE_ENV = "APE_SERVER_SQLITE"


def newer_sqlite() -> ModuleType | None:
    """``pysqlite3.dbapi2`` when it is installed, its SQLite is newer than ``sqlite3``'s, and
    ``APE_SERVER_SQLITE`` is not ``system``."""
    if os.environ.get(CHOICE_ENV, "").strip().lower() == "system":
        return None
    try:
        module = importlib.import_module(NEWER_MODULE)
    except ImportError:
        return None
    if tuple(module.sqlite_version_info) <= tuple(sqlite3.sqlite_version_info):
        return None
    return module


def use_newest_sqlite() -> str:
    """Make ``import sqlite3`` in this process give the newest SQLite found; the version in use.
    Called before anything imports Prefect."""
    module = newer_sqlite()
    if module is None:
        return sqlite3.sqlite_version
    sys.modules["sqlite3"] = module
    sys.modules["sqlite3.dbapi2"] = module
    return str(module.sqlite_version)


def main() -> None:
    """Run ``python -m prefect`` with this process's arguments, on the newest SQLite."""
    use_newest_sqlite()
    runpy.run_module("prefect", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
