"""Whom a session's stages tell: the recorder interface the chain sees, and the recorder
bound to the solver thread.

Why here: the chain tells each stage through one context manager
(``with current_recorder().stage("check") as end: end.result = ...``), which marks the
stage's start, end and state from its result or its exception, and counts the live task
runs it created. What is done with them (the mirror in the Prefect UI,
``ape.tasks.recording``) is the flow's choice: it binds its recorder to the thread that
runs the session (:func:`recording_to`), so the chain imports nothing of the mirror.
Outside a bound session (a stage task called on its own) they go nowhere.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol


class StageEnd(Protocol):
    """What the body of a stage tells its recorder: the stage's result (its state is read
    from it) and whether it came from the run's cache."""

    result: Any
    cached: bool


class StageRecorder(Protocol):
    """A session's recorder, as the chain sees it."""

    def stage(self, name: str, *, task_runs: int = 0, live: bool = False, **facts: Any) -> AbstractContextManager[Any]:
        """The stage ``name`` runs inside the block; ``task_runs``: live task runs it creates;
        ``live``: a live task run whose own stages are told inside it (only counted and, when
        cached, marked as the cache's); ``facts``: what its state depends on besides its
        result (``solve_failed`` for adapt, ``outcome`` for score, ``message``)."""
        ...


class _End:
    def __init__(self) -> None:
        self.result: Any = None
        self.cached = False


class _Nowhere:
    """The recorder outside a bound session: every stage runs, nothing is kept."""

    @contextmanager
    def stage(self, name: str, *, task_runs: int = 0, live: bool = False, **facts: Any) -> Iterator[StageEnd]:
        yield _End()


_local = threading.local()
_NOWHERE = _Nowhere()


def bind_recorder(recorder: StageRecorder | None) -> None:
    """Make ``recorder`` the one this thread's stages tell (None: nowhere)."""
    _local.recorder = recorder


@contextmanager
def recording_to(recorder: StageRecorder) -> Iterator[StageRecorder]:
    """This thread's stages tell ``recorder`` while the block runs."""
    previous = getattr(_local, "recorder", None)
    bind_recorder(recorder)
    try:
        yield recorder
    finally:
        bind_recorder(previous)


def current_recorder() -> StageRecorder:
    """The recorder of the session running on this thread (also inside a stage's task run)."""
    recorder = getattr(_local, "recorder", None)
    return recorder if recorder is not None else _NOWHERE
