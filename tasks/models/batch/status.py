"""What a batch model waits for, where a user looks: the terminal's bar and the Prefect UI.

A run whose sessions wait for a provider batch saves no item for minutes or hours; its
progress bar stands still. The :class:`BatchBoard` of each batcher holds its batches'
latest state (id, status, counts, age), told by the batcher on each submit, poll and end:

- the progress bar's batch column (:mod:`ape.flows.live.batch_column`) reads
  :func:`waiting_text` at each refresh, so the terminal shows the waiting batch;
- the table of the model's batches (:meth:`BatchBoard.markdown`, with a first line that
  says whether a batch is waiting or all are done) is handed to every display registered
  for the model (:func:`show_batches`); the flow's live view registers one that keeps it as
  a markdown artifact on the flow run that asked (:mod:`ape.flows.live.batch_table`), so
  this layer writes nothing to Prefect. It is handed over at most every
  :data:`PUBLISH_EVERY_S` seconds (each artifact write is an API call), with a trailing
  hand-over so the last state is never held back, and at once when a batch is submitted or
  ends. It also counts the batches and answer rows of the folder's files the batcher refused
  (:mod:`ape.tasks.models.batch.trust`), which the run's summary reports
  (``refused_batch_records``, :func:`take_refused`).

A display that fails (no Prefect API, the server gone) costs a debug line; the batches are
unaffected. Displays are per process, as the boards are: under Dask the sessions' boards
live in the workers, where no live view registers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import UUID

from ape.tasks.common.inert import md_text

__all__ = [
    "BatchBoard",
    "BatchDisplay",
    "BatchRow",
    "BatchTable",
    "board_for",
    "show_batches",
    "take_refused",
    "waiting_text",
]

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


@dataclass(frozen=True)
class BatchTable:
    """What a display is handed: the model, the flow run whose sessions asked, and the table
    of the model's batches (markdown)."""

    model_id: str
    flow_run_id: UUID
    markdown: str


BatchDisplay = Callable[[BatchTable], None]


def _age(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


class BatchBoard:
    """The batches of one model's batcher, and their table (see the module docstring)."""

    def __init__(self, model_id: str, publish_every_s: float = PUBLISH_EVERY_S):
        self.model_id = model_id
        self.publish_every_s = publish_every_s
        self._lock = threading.Lock()
        self._rows: dict[str, BatchRow] = {}
        self._flow_run_id: UUID | None = None
        self._published_at = 0.0
        self._timer: threading.Timer | None = None
        self._refused = 0  # not yet taken into a run's summary
        self._refused_shown = 0  # on this board's table

    # -- told by the batcher ----------------------------------------------------------------
    def asked_from(self, flow_run_id: UUID | None) -> None:
        """The flow run whose sessions ask now: the table is shown on it (a new one per run)."""
        if flow_run_id is None or flow_run_id == self._flow_run_id:
            return
        with self._lock:
            self._flow_run_id = flow_run_id
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

    # -- handed to the displays ------------------------------------------------------------------------
    def publish(self, force: bool = False) -> None:
        """Hand the table over now (``force``, or the throttle's interval has passed), else
        once the interval has passed (one trailing hand-over holds the latest state)."""
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
        with self._lock:
            flow_run_id = self._flow_run_id
        if flow_run_id is None:
            return
        table = BatchTable(self.model_id, flow_run_id, self.markdown())
        with _boards_lock:
            displays = list(_displays.get(self.model_id, ()))
        for display in displays:
            try:
                display(table)
            except Exception as exc:  # no API, or a hiccup: the terminal and the log still say it
                log.debug("batch table of %s not shown: %s", self.model_id, exc)


_boards: dict[str, BatchBoard] = {}
_displays: dict[str, list[BatchDisplay]] = {}
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


def show_batches(model_id: str, display: BatchDisplay) -> Callable[[], None]:
    """Hand ``model_id``'s table to ``display`` from now on (at once when its board holds
    batches already); the function returned stops it."""
    with _boards_lock:
        _displays.setdefault(model_id, []).append(display)
        board = _boards.get(model_id)
    if board is not None and board.rows():
        board.publish(force=True)

    def stop() -> None:
        with _boards_lock:
            shown = _displays.get(model_id, [])
            if display in shown:
                shown.remove(display)

    return stop
