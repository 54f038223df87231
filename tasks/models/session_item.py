"""Which item (and which of its sessions) a model call belongs to, for the mocks that answer from it.

The built-in mocks ``oracle`` and ``scripted`` with responses keyed by item id play a model
that knows the current item. They must not learn it from the prompt text (a prompt need not
hold the id, and parsing it back would tie a mock to one template), nor from the order of
calls (each solver worker has its own model instance, so the order depends on scheduling).
The model stages (:mod:`ape.tasks.session.stages`) set the session's item, its id and its run index
around their model calls with :func:`session_item`; a mock reads them with
:func:`current_session_item`. A context variable follows the call into the retry wrapper and
into :func:`ape.tasks.common.deadline.call_with_timeout`'s thread (it copies the context), and
is never seen by a call outside a session (a judge's call in the check stage, say).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["SessionItem", "current_session_item", "session_item"]


@dataclass(frozen=True)
class SessionItem:
    """The item a session answers, its id and its run index (0 .. runs_per_data - 1)."""

    item: Any
    item_id: str
    run_index: int = 0


_CURRENT: ContextVar[SessionItem | None] = ContextVar("ape_session_item", default=None)


@contextmanager
def session_item(item: Any, item_id: str, run_index: int = 0) -> Iterator[SessionItem]:
    """Make ``item`` the current session's item for the calls made inside the block."""
    current = SessionItem(item, item_id, run_index)
    token = _CURRENT.set(current)
    try:
        yield current
    finally:
        _CURRENT.reset(token)


def current_session_item() -> SessionItem | None:
    """The item of the session whose model call this is, or None outside a session."""
    return _CURRENT.get()
