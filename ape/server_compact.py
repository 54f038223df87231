"""``ape server compact``: give back the disk the server's SQLite database no longer uses.

Why: retention (Prefect's db_vacuum service) deletes old flow runs, but SQLite keeps the freed
pages in the file for later writes and gives nothing back to the disk until a ``VACUUM``
rewrites it. ``VACUUM`` needs the database to itself, and writes a copy of it (a temporary
file, then the rollback journal or write-ahead log) as big as the database at most, so
:func:`compact` runs only on a stopped server, holding the start lock so no ``ape run`` starts
it meanwhile, and only with that much disk free. A PostgreSQL database is the database
server's to compact (docs/server.md, "Giving disk back").
"""

from __future__ import annotations

import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ape import server, server_db
from ape.schemas.errors import ApeError


@dataclass(frozen=True)
class Compacted:
    """The database and its size before and after (bytes)."""

    path: Path
    before: int
    after: int


def compact() -> Compacted:
    """``VACUUM`` the stopped server's SQLite database; :class:`ApeError` with one line when the
    server runs, the database is PostgreSQL or missing, the disk lacks room, or SQLite refuses."""
    with server.held_stopped() as home:
        path = server_db.database_path(home)
        if path is None:
            raise ApeError(
                f"the server's database is not SQLite ({server_db.DATABASE_URL_KEY} names another)",
                where="environment",
                hint="compact PostgreSQL on the database server (VACUUM FULL or pg_repack; docs/server.md)",
            )
        if not path.is_file():
            raise ApeError("no database here yet: nothing to compact", where=str(path), hint="it is made by a run")
        before = server_db.database_size(path)
        _check_room(path, before)
        try:
            connection = sqlite3.connect(path, timeout=5.0, isolation_level=None)
            try:
                connection.execute("VACUUM")
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise ApeError(
                f"SQLite could not compact the database: {exc}",
                where=str(path),
                hint="a program still has it open (a `prefect server` started by hand?): stop it and try again",
            ) from None
        after = server_db.database_size(path)
        server_db.record_sample(home, after)
        return Compacted(path, before, after)


def _check_room(path: Path, size: int) -> None:
    """VACUUM writes a temporary copy (SQLite's temporary folder) and then the journal beside the
    database: each up to ``size`` bytes, twice that when both are on one file system."""
    temp = Path(tempfile.gettempdir())
    needed: dict[int, tuple[int, Path]] = {}
    for folder in (path.parent, temp):
        device = folder.stat().st_dev
        held, _ = needed.get(device, (0, folder))
        needed[device] = (held + size, folder)
    for want, folder in needed.values():
        free = server_db.free_disk(folder)
        if free < want:
            raise ApeError(
                f"compacting needs about {want / 1e6:.1f} MB free on the disk of {folder}, and {free / 1e6:.1f} MB are",
                where=str(path),
                hint="free some disk there (or point SQLITE_TMPDIR at a roomier disk), then try again",
            )


__all__ = ["Compacted", "compact"]
