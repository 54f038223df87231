"""Writing and reading ``mirror.json`` (:mod:`ape.schemas.mirror`), and the line ``ape status``
prints from it: how far the Prefect mirror of a run is behind, and when it completed.

Why a file: ``ape status`` needs no server (it works after the server is gone), and the run
has ended by the time its catch-up sends; the catch-up is the one process that knows its pace.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ape.schemas.mirror import MIRROR_FILE, MirrorState, MirrorStatus
from ape.tasks.storage.live_files import read_model_file
from ape.tasks.storage.save import atomic_write_text

MAX_BYTES = 100_000  # a mirror.json is under 300 bytes
WRITE_EVERY_S = 2.0


@dataclass
class MirrorProgress:
    """The progress of one ``ape record`` over ``folder``: the chains its runs hold and the
    chains it is to send, written to ``mirror.json`` at most every :data:`WRITE_EVERY_S`."""

    folder: Path
    chains_total: int
    chains_done: int
    started: float = field(default_factory=lambda: time.monotonic())
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    _sent: int = 0
    _written: float = 0.0

    def sent(self, chains: int) -> None:
        """``chains`` more were sent; the file is rewritten when it is due."""
        self._sent += chains
        if time.monotonic() - self._written >= WRITE_EVERY_S:
            self.write("sending")

    def write(self, state: MirrorState) -> MirrorStatus:
        done = min(self.chains_total, self.chains_done + self._sent)
        elapsed = time.monotonic() - self.started
        eta = None
        if state == "sending" and self._sent > 0 and elapsed > 0:
            eta = (self.chains_total - done) / (self._sent / elapsed)
        status = MirrorStatus(
            state=state,
            chains_total=self.chains_total,
            chains_done=self.chains_total if state == "complete" else done,
            pid=os.getpid(),
            started_at=self.started_at,
            updated_at=datetime.now(UTC),
            eta_s=eta,
        )
        atomic_write_text(self.folder / MIRROR_FILE, status.model_dump_json(indent=2) + "\n")
        self._written = time.monotonic()
        return status


def read_mirror(folder: Path) -> MirrorStatus | None:
    """``folder``'s ``mirror.json``, validated; None when it has none, :class:`ApeError`
    naming the file (and key) when it is not one APE wrote."""
    path = Path(folder) / MIRROR_FILE
    if not path.exists():
        return None
    return read_model_file(path, MirrorStatus, MAX_BYTES, "a mirror status")


def describe_mirror(status: MirrorStatus, folder: Path, alive: bool) -> str:
    """The line ``ape status`` prints: how far the UI is behind, or that it is complete, or why
    it stopped and what completes it. ``alive``: whether the sending process still runs."""
    done, total = f"{status.chains_done:,}", f"{status.chains_total:,}"
    record = f"`ape record {folder}`"
    if status.state == "complete":
        return f"UI: all {total} session chains recorded (completed {status.updated_at:%Y-%m-%d %H:%M:%S} UTC)"
    if status.state == "server_gone":
        return (
            f"UI: {done} of {total} session chains recorded; the Prefect server stopped answering, so the rest "
            f"cannot be sent now (the results are complete): run {record} once it is up"
        )
    if status.state == "incomplete":
        return (
            f"UI: {done} of {total} session chains recorded; the server had not taken in the rest when the wait "
            f"ended: run {record} to complete it"
        )
    if not alive:
        return (
            f"UI: {done} of {total} session chains recorded; the catch-up (pid {status.pid}) ended before it was "
            f"done: run {record} to complete it"
        )
    within = f", the rest within about {_seconds(status.eta_s)}" if status.eta_s is not None else ""
    return (
        f"UI: {done} of {total} session chains recorded{within} "
        f"(the catch-up, pid {status.pid}, see {Path(folder) / 'record.log'})"
    )


def _seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{round(seconds / 60)} min"
