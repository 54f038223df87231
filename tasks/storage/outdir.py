"""The output folder: checked before a run starts, and held by one writer at a time.

``check_output_folder`` runs before any flow starts (``ape run``, ``ape validate``):
the folder must exist or be creatable, be writable (a probe file is created and
removed in it, or in its nearest existing parent; that is what actually counts:
permission bits, a read-only mount or an immutable folder all fail it, even for
root) and have free space. It creates nothing.

``OutputLock`` is an advisory lock on ``<output>/.ape.lock`` (``fcntl.flock``),
held for the whole run. The kernel releases it when the holder exits or is
killed, so a stale lock from a killed run is taken over without asking; the
file keeps the holder's pid and start time only to name it in the error a
second run gets. A lock is re-entrant within one process (the command line takes
it before the flow starts, the flow takes it again for deployments).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ape.schemas.errors import ApeError

LOCK_FILE = ".ape.lock"
MIN_FREE_BYTES = 50 * 1024 * 1024  # below this a run would likely fail mid-way


def _existing_parent(path: Path) -> Path:
    current = path
    while not current.exists():
        if current.parent == current:
            break
        current = current.parent
    return current


def check_output_folder(folder: Path, *, where: str = "[run] output", min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """One clear ApeError unless ``folder`` can hold a run's outputs."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ApeError(
            f"the output folder {folder} is a file, not a folder",
            where=where,
            hint="choose another output folder (--output)",
        )
    base = _existing_parent(folder)
    if not base.is_dir():
        raise ApeError(
            f"the output folder {folder} cannot be created: {base} is a file, not a folder",
            where=where,
            hint="choose another output folder (--output)",
        )
    target = folder if folder.is_dir() else base  # nothing is created here
    probe = target / f".ape-write-test-{os.getpid()}"
    try:
        with probe.open("w") as handle:
            handle.write("x")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        what = "is not writable" if target == folder else f"cannot be created in {target}"
        raise ApeError(
            f"the output folder {folder} {what}: {exc.strerror or exc}",
            where=where,
            hint="choose a folder you can write to (--output)",
        ) from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    free = shutil.disk_usage(target).free
    if free < min_free_bytes:
        raise ApeError(
            f"only {free // (1024 * 1024)} MiB free where the output folder {folder} lives",
            where=where,
            hint="free some space or choose another output folder (--output)",
        )


class OutputLock:
    """An exclusive, re-entrant (per process) advisory lock on one output folder."""

    _held: dict[Path, tuple[int, int]] = {}  # folder -> (fd, depth)
    _guard = threading.Lock()

    def __init__(self, folder: Path):
        self.folder = Path(folder).resolve()
        self.path = self.folder / LOCK_FILE

    def acquire(self) -> None:
        with self._guard:
            held = self._held.get(self.folder)
            if held is not None:
                self._held[self.folder] = (held[0], held[1] + 1)
                return
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise ApeError(
                    f"the output folder {self.folder} is in use by another ape run ({describe_holder(self.path)})",
                    where="[run] output",
                    hint="wait for it to finish, or give this run another --output",
                ) from None
            # the previous holder, if any, is gone (the kernel dropped its lock): take over
            info = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode() + b"\n", 0)
            self._held[self.folder] = (fd, 1)

    def release(self) -> None:
        with self._guard:
            held = self._held.get(self.folder)
            if held is None:
                return
            fd, depth = held
            if depth > 1:
                self._held[self.folder] = (fd, depth - 1)
                return
            del self._held[self.folder]
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def in_use(folder: Path) -> bool:
    """Whether a live process holds ``folder``'s lock (an ``ape run`` writing it now).

    Why: ``ape record`` names the sessions of a run that was killed from its saved results,
    which is safe only once nothing writes them; a killed holder's lock is gone with it. Asked
    with a shared, non-blocking lock that is released at once, so it never holds up a run."""
    try:
        fd = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return True
    finally:
        os.close(fd)  # closing drops the probe's own lock
    return False


def describe_holder(path: Path) -> str:
    """'pid 123 on host, started 2026-...' from a lock file (what its holder wrote)."""
    try:
        info: dict[str, Any] = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not info.get("pid"):
        return "holder unknown"
    return f"pid {info['pid']} on {info.get('host', '?')}, started {info.get('started_at', '?')}"
