"""Progress on the terminal (rich) and in the Prefect UI (a progress artifact).

Both are updated from the saving thread only; the artifact at most every few
seconds, because each update is an API call.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import cast
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ape.flows.live.batch_column import BatchColumn
from ape.flows.logs import CONSOLE_SKIP
from ape.schemas.results import CheckStatus, Outcome, OutputBatch
from ape.tasks.common.console import Repeats
from ape.tasks.common.inert import terminal_safe
from ape.tasks.models.limits.policy import RETRY_LINES

log = logging.getLogger("ape")


@dataclass
class Tally:
    total: int
    done: int = 0
    sessions: int = 0
    passed: int = 0
    errors: int = 0
    check_errors: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, batch: OutputBatch) -> None:
        """Count one finished item of this run."""
        self.done += 1
        self.sessions += len(batch.sessions)
        self.passed += sum(s.correct for s in batch.sessions)
        self.errors += sum(s.outcome is Outcome.ERROR for s in batch.sessions)
        self.check_errors += batch.check_errors

    def resumed(self, counts: tuple[int, int]) -> None:
        """Count one item saved by an earlier run (skipped now), so the pass rate covers it."""
        sessions, passed = counts
        self.done += 1
        self.sessions += sessions
        self.passed += passed

    @property
    def pass_rate(self) -> float:
        return self.passed / self.sessions if self.sessions else 0.0

    def line(self) -> str:
        return (
            f"{self.done}/{self.total} items, pass {self.pass_rate:.1%}, "
            f"{self.errors} errored sessions, {self.check_errors} check errors, "
            f"{time.monotonic() - self.started:.1f} s"
        )


MAX_ERROR_LINES = 20  # on the terminal; run.log and the Prefect UI get every line


class ErrorLines:
    """Error lines printed on the terminal during one run, across all its models: the cap
    is per run (a run of several models still prints at most MAX_ERROR_LINES). A model's
    error that repeats (the same type and message but for numbers: a dead endpoint on every
    session) is printed once; ``repeats`` counts them, told when the model is done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.shown = 0
        self.repeats = Repeats()

    def take(self) -> int:
        """Count one more error line; returns how many have been counted in this run."""
        with self._lock:
            self.shown += 1
            return self.shown

    def reset(self) -> None:
        """A new run begins (the benchmark flow calls this before its first model)."""
        with self._lock:
            self.shown = 0
        self.repeats.reset()


RUN_ERROR_LINES = ErrorLines()


def report_errors(batch: OutputBatch, tally: Tally) -> None:
    """One line per errored session or check of a saved item (never a traceback)."""
    for session in batch.sessions:
        if session.outcome is Outcome.ERROR:
            what, error = "session error", session.error
        elif session.check is not None and session.check.status is CheckStatus.ERROR:
            what, error = "check error", session.check.error
        else:
            continue
        detail = " ".join(error.line().split())[:500] if error else "unknown error"
        repeat = RUN_ERROR_LINES.repeats.count(batch.model_id, f"{what}: {detail}") > 1
        shown = RUN_ERROR_LINES.shown if repeat else RUN_ERROR_LINES.take()
        quiet = repeat or shown > MAX_ERROR_LINES
        log.warning(
            "item %s run %d: %s: %s",
            batch.item_id,
            session.run_index,
            what,
            detail,
            extra={CONSOLE_SKIP: True} if quiet else None,
        )
        if error is not None and error.traceback:  # --debug: on the terminal and in run.log
            log.debug("item %s run %d: %s traceback:\n%s", batch.item_id, session.run_index, what, error.traceback)
        if shown == MAX_ERROR_LINES + 1 and not repeat:
            log.warning("further error lines go to run.log only")


def repeated_errors(model_id: str) -> list[str]:
    """The lines that tell how often each error of a finished model repeated: its sessions'
    errors, and the retries before them, one line per kind that came more than once."""
    lines = []
    for count, text in RUN_ERROR_LINES.repeats.take(model_id):
        what, _, detail = text.partition(": ")
        if count > 1:
            lines.append(f"{model_id}: the same {what} on {count} sessions (the first shown; all in run.log): {detail}")
    for count, text in RETRY_LINES.take(model_id):
        if count > 1:
            lines.append(f"{model_id}: {count} retries after the same error (the first shown; all in run.log): {text}")
    return lines


class ProgressView:
    """The bar (and artifact) shows ``label`` ("benchmark · model"); the periodic log lines
    name the model as ``name``, as every other line of a run does ("model: 31/40 items")."""

    def __init__(
        self, label: str, tally: Tally, *, enabled: bool = True, artifact: bool = True, name: str | None = None
    ):
        self.tally = tally
        self.label = label
        self.name = name or label
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._artifact_id: UUID | None = None
        self._artifact_at = 0.0
        self._last_log = time.monotonic()
        self._use_artifact = artifact
        interactive = enabled and sys.stderr.isatty()
        if interactive:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("pass {task.fields[rate]}"),
                TextColumn("errors {task.fields[errors]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                BatchColumn(self.name),  # a waiting provider batch, live (empty otherwise)
                console=Console(stderr=True),
                transient=False,
            )
        self._log_progress = enabled and not interactive

    def __enter__(self) -> ProgressView:
        if self._bar is not None:
            self._bar.start()
            # the label is read as rich markup: its text is the config's, never markup or escapes
            self._task = self._bar.add_task(
                escape(terminal_safe(self.label)), total=self.tally.total, completed=self.tally.done, rate="-", errors=0
            )
        if self._use_artifact:
            try:
                # called from synchronous code, so the sync_compatible function returns the id itself
                self._artifact_id = cast(
                    UUID, create_progress_artifact(progress=self._percent(), description=f"{self.label}: items done")
                )
            except Exception as exc:  # no API (unit tests) or a server hiccup: UI only
                log.debug("progress artifact unavailable: %s", exc)
        return self

    def _percent(self) -> float:
        return 100.0 * self.tally.done / self.tally.total if self.tally.total else 100.0

    def update(self, force: bool = False) -> None:
        t = self.tally
        if self._bar is not None and self._task is not None:
            self._bar.update(
                self._task,
                completed=t.done,
                rate=f"{t.pass_rate:.1%}",
                errors=f"{t.errors}, check errors {t.check_errors}",
            )
        now = time.monotonic()
        if self._log_progress and not force and now - self._last_log >= 10.0:
            # without a terminal, a line every 10 s; the runner logs the final tally itself
            self._last_log = now
            log.info("%s: %s", self.name, t.line())
        if self._artifact_id is not None and (force or now - self._artifact_at >= 3.0):
            self._artifact_at = now
            try:
                update_progress_artifact(self._artifact_id, progress=self._percent())
            except Exception as exc:
                log.debug("progress artifact update failed: %s", exc)

    def __exit__(self, *exc: object) -> None:
        self.update(force=True)
        if self._bar is not None:
            self._bar.stop()
