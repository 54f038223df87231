"""Where a session's stages report: the interface the chain sees, and the recorder bound to
the solver thread.

Why here: the chain reports each stage through one context manager
(``with current_report().stage("check") as end: end.result = ...``), which marks the
stage's start, end and state from its result or its exception, and counts the live task
runs it created. What is done with those reports (the mirror in the Prefect UI,
``ape.tasks.recording``) is the flow's choice: it binds its recorder to the thread that
runs the session (:func:`reporting_to`), so the chain imports nothing of the mirror.
Outside a bound session (a stage task called on its own) the reports go nowhere.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol


class StageEnd(Protocol):
    """What the body of a stage tells its report: the stage's result (its state is read
    from it) and whether it came from the run's cache."""

    result: Any
    cached: bool


class StageReport(Protocol):
    """A session's recorder, as the chain sees it."""

    def stage(self, name: str, *, task_runs: int = 0, live: bool = False, **facts: Any) -> AbstractContextManager[Any]:
        """The stage ``name`` runs inside the block; ``task_runs``: live task runs it creates;
        ``live``: a live task run whose own stages report inside it (only counted and, when
        cached, marked as the cache's); ``facts``: what its state depends on besides its
        result (``solve_failed`` for adapt, ``outcome`` for score, ``message``)."""
        ...


class _End:
    def __init__(self) -> None:
        self.result: Any = None
        self.cached = False


class _Nowhere:
    """The report outside a bound session: every stage runs, nothing is kept."""

    @contextmanager
    def stage(self, name: str, *, task_runs: int = 0, live: bool = False, **facts: Any) -> Iterator[StageEnd]:
        yield _End()


_local = threading.local()
_NOWHERE = _Nowhere()


def bind_report(report: StageReport | None) -> None:
    """Make ``report`` the one this thread's stages report to (None: nowhere)."""
    _local.report = report


@contextmanager
def reporting_to(report: StageReport) -> Iterator[StageReport]:
    """This thread's stages report to ``report`` while the block runs."""
    previous = getattr(_local, "report", None)
    bind_report(report)
    try:
        yield report
    finally:
        bind_report(previous)


def current_report() -> StageReport:
    """The report of the session running on this thread (also inside a stage's task run)."""
    report = getattr(_local, "report", None)
    return report if report is not None else _NOWHERE
