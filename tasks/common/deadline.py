"""Time limits for user plugins (adapters, checkers, tool calls).

Python cannot stop a thread, so a call with a limit runs on its own daemon thread
and the caller stops waiting when the limit passes: the session or check ends with
a :class:`PluginTimeout` and the run goes on. The stuck call keeps its thread
until it returns (a daemon thread never keeps the process alive); an object it was
working on (a checker instance) must not be handed to anyone else afterwards.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class PluginTimeout(Exception):
    """A user plugin did not return within its configured limit."""

    def __init__(self, label: str, limit_s: float, key: str):
        super().__init__(f"{label} did not return within {limit_s:g} s (raise the limit with {key})")
        self.label = label
        self.limit_s = limit_s


def call_with_timeout(
    fn: Callable[..., T], *args: Any, limit_s: float | None, label: str, key: str, **kwargs: Any
) -> T:
    """``fn(*args, **kwargs)``, or PluginTimeout after ``limit_s`` seconds (None: no limit)."""
    if limit_s is None:
        return fn(*args, **kwargs)
    outcome: list[Any] = []
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome.append((True, context.run(fn, *args, **kwargs)))
        except BaseException as exc:  # handed to the caller below
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name=f"ape-{label}", daemon=True)
    thread.start()
    thread.join(limit_s)
    if not outcome:
        raise PluginTimeout(label, limit_s, key)
    ok, value = outcome[0]
    if ok:
        return value
    raise value
