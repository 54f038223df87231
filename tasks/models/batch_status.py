"""What a batch model waits for, where a user looks: the terminal's bar and the Prefect UI.

A run whose sessions wait for a provider batch saves no item for minutes or hours; its
progress bar stands still. The :class:`BatchBoard` of each batcher holds its batches'
latest state (id, status, counts, age), told by the batcher on each submit, poll and end:

- the progress bar's batch column (:mod:`ape.flows.live.batch_column`) reads
  :func:`waiting_text` at each refresh, so the terminal shows the waiting batch;
- a markdown artifact keyed ``<model>-batches`` on the flow run that asked (one per flow
  run and model, updated in place) holds the table of the model's batches, with a first
  line that says whether a batch is waiting or all are done. It is written at most every
  :data:`PUBLISH_EVERY_S` seconds (each write is an API call), with a trailing write so
  the last state is never held back, and at once when a batch is submitted or ends.
  It also counts the batches and answer rows of the folder's files the batcher refused
  (:mod:`ape.tasks.models.batch_trust`), which the run's summary reports
  (``refused_batch_records``, :func:`take_refused`).

Without a Prefect API (a unit test, the server gone) the artifact is skipped with a debug
line; the batches are unaffected.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import UUID

from ape.tasks.common.inert import md_text
from ape.tasks.storage import prefect_api

__all__ = ["BatchBoard", "BatchRow", "artifact_key_for", "board_for", "take_refused", "waiting_text"]

log = logging.getLogger("ape")

PUBLISH_EVERY_S = 5.0


@dataclass
class BatchRow:
    """One batch as last seen: ``submitted_at`` is wall-clock seconds (the ledger's time for
    a batch an earlier run submitted, so its age is the batch's, not this process's)."""

    batch_id: str
    requests: int
    submitted_at: float
    status: str = "submitted"
    counts: dict[str, int] = field(default_factory=dict)
    ended: bool = False

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (now if now is not None else time.time()) - self.submitted_at)

    def counts_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or f"{self.requests} requests"


def artifact_key_for(model_id: str) -> str:
    """The artifact's key: Prefect keys take lowercase letters, digits and dashes."""
    return prefect_api.artifact_key(prefect_api.artifact_key(model_id, fallback="model"), "batches")


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


class BatchBoard:
    """The batches of one model's batcher, and their artifact (see the module docstring)."""

    def __init__(self, model_id: str, publish_every_s: float = PUBLISH_EVERY_S):
        self.model_id = model_id
        self.publish_every_s = publish_every_s
        self._lock = threading.Lock()
        self._rows: dict[str, BatchRow] = {}
        self._flow_run_id: UUID | None = None
        self._artifact_id: UUID | None = None
        self._published_at = 0.0
        self._timer: threading.Timer | None = None
        self._refused = 0  # not yet taken into a run's summary
        self._refused_shown = 0  # on this board's artifact

    # -- told by the batcher ----------------------------------------------------------------
    def asked_from(self, flow_run_id: UUID | None) -> None:
        """The flow run whose sessions ask now: the artifact goes on it (a new one per run)."""
        if flow_run_id is None or flow_run_id == self._flow_run_id:
            return
        with self._lock:
            self._flow_run_id, self._artifact_id = flow_run_id, None
            known = bool(self._rows)
        if known:  # batches resumed before any session asked: show them on this run now
            self.publish(force=True)

    def submitted(self, batch_id: str, requests: int, submitted_at: float | None = None) -> None:
        with self._lock:
            self._rows[batch_id] = BatchRow(batch_id, requests, submitted_at or time.time())
        self.publish(force=True)

    def polled(self, batch_id: str, status: str, counts: dict[str, int], ended: bool) -> None:
        with self._lock:
            row = self._rows.get(batch_id)
            if row is None:
                return
            row.status, row.counts, row.ended = status, dict(counts), ended
        self.publish(force=ended)

    def refused(self, n: int) -> None:
        """``n`` answer rows or batches of the folder's files were not taken as the model's."""
        with self._lock:
            self._refused += n
            self._refused_shown += n
        self.publish(force=True)

    def take_refused(self) -> int:
        """The refusals since the last call (each run's summary takes its own)."""
        with self._lock:
            n, self._refused = self._refused, 0
        return n

    def ended(self, batch_id: str, status: str | None = None) -> None:
        with self._lock:
            row = self._rows.get(batch_id)
            if row is None:
                return
            row.ended = True
            if status:
                row.status = status
        self.publish(force=True)

    # -- read ---------------------------------------------------------------------------------
    def rows(self) -> list[BatchRow]:
        with self._lock:
            return [BatchRow(**vars(row)) for row in self._rows.values()]

    def waiting(self) -> list[BatchRow]:
        return [row for row in self.rows() if not row.ended]

    def text(self) -> str:
        """One short line for the progress bar: the oldest waiting batch, and how many more."""
        waiting = sorted(self.waiting(), key=lambda row: row.submitted_at)
        if not waiting:
            return ""
        first = waiting[0]
        done = first.counts.get("completed", first.counts.get("succeeded", 0))
        total = first.counts.get("total", first.requests)
        more = f" (+{len(waiting) - 1} more)" if len(waiting) > 1 else ""
        return f"batch {first.batch_id} {first.status} {done}/{total}, {_age(first.age_s())}{more}"

    def markdown(self) -> str:
        rows = sorted(self.rows(), key=lambda row: row.submitted_at)
        waiting = [row for row in rows if not row.ended]
        if waiting:
            head = f"**waiting** for {len(waiting)} of {len(rows)} batch(es) of {md_text(self.model_id)}"
        else:
            head = f"**done**: all {len(rows)} batch(es) of {md_text(self.model_id)} ended, none waiting"
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        lines = [head, "", f"as of {stamp}", ""]
        if self._refused_shown:
            lines += [f"refused: {self._refused_shown} batch(es) or answer row(s) not this folder's, asked again", ""]
        lines += ["| batch | status | counts | age |", "|---|---|---|---|"]
        now = time.time()
        for row in rows:
            lines.append(
                f"| {md_text(row.batch_id)} | {md_text(row.status)}{' (ended)' if row.ended else ''} "
                f"| {md_text(row.counts_text())} | {_age(row.age_s(now))} |"
            )
        return "\n".join(lines) + "\n"

    # -- the artifact ---------------------------------------------------------------------------
    def publish(self, force: bool = False) -> None:
        """Write the artifact now (``force``, or the throttle's interval has passed), else
        once the interval has passed (one trailing write holds the latest state)."""
        with self._lock:
            if self._flow_run_id is None:
                return
            wait = self._published_at + self.publish_every_s - time.monotonic()
            if not force and wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._trailing)
                    self._timer.daemon = True
                    self._timer.start()
                return
            self._published_at = time.monotonic()
        self._write()

    def _trailing(self) -> None:
        with self._lock:
            self._timer = None
            self._published_at = time.monotonic()
        self._write()

    def _write(self) -> None:
        markdown = self.markdown()
        with self._lock:
            flow_run_id, artifact_id = self._flow_run_id, self._artifact_id
        try:
            with prefect_api.sync_client() as client:
                made = prefect_api.upsert_artifact(
                    client,
                    artifact_id,
                    key=artifact_key_for(self.model_id),
                    kind="markdown",
                    data=markdown,
                    description=f"{self.model_id}: provider batches (id, status, counts, age)",
                    flow_run_id=flow_run_id,
                )
            if artifact_id is None:
                with self._lock:
                    if self._flow_run_id == flow_run_id:
                        self._artifact_id = made
        except Exception as exc:  # no API, or a hiccup: the terminal and the log still say it
            log.debug("batch artifact of %s unavailable: %s", self.model_id, exc)


_boards: dict[str, BatchBoard] = {}
_boards_lock = threading.Lock()


def board_for(model_id: str) -> BatchBoard:
    """The process's board of ``model_id`` (made on first use)."""
    with _boards_lock:
        board = _boards.get(model_id)
        if board is None:
            board = _boards[model_id] = BatchBoard(model_id)
        return board


def take_refused(model_id: str) -> int:
    """The batch records of ``model_id``'s folder refused since the last call (0 for a model
    that does not batch)."""
    board = _boards.get(model_id)
    return board.take_refused() if board is not None else 0


def waiting_text(model_id: str) -> str:
    """The progress bar's line for ``model_id``: its oldest waiting batch, or "" when none
    waits (or the model does not batch)."""
    board = _boards.get(model_id)
    return board.text() if board is not None else ""
