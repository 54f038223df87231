"""Time limits for user plugins (adapters, checkers, tool calls), and for the calls a run's
end makes to a Prefect server that may be busy (:func:`finished_within`).

Python cannot stop a thread, so a call with a limit runs on a daemon thread of its own
and the caller stops waiting when the limit passes: the session or check ends with
a :class:`PluginTimeout` and the run goes on. The stuck call keeps its thread
until it returns (a daemon thread never keeps the process alive); an object it was
working on (a checker instance) must not be handed to anyone else afterwards.

The threads are reused: a call takes an idle plugin thread (or starts one), and the thread
goes back to the idle ones only when its call has returned, so a stuck call never holds up
another. Starting a thread per call cost two thread starts per session (adapter and
checker), about a tenth of an instant-model run's samples under ``py-spy`` (issue 46). Each
call still runs in a copy of its caller's context; a plugin's own ``threading.local`` state
may outlive one call, as in any thread pool.

APE's own plugins whose time is linear in the answer and that run no user code (the
``raw``, ``strip`` and ``last_number`` adapters, the ``exact_match`` and ``accuracy``
checkers) say so with a true ``runs_inline`` attribute and run on the caller's thread: they
cannot get stuck, and the hop to a plugin thread and back was about a tenth of the solver
threads' interpreter time at 256 workers (issue 60). A regular expression from the config,
a JSON schema or any user plugin keeps its thread and its limit.
"""

from __future__ import annotations

import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# idle plugin threads kept for reuse; more than this many idle at once end
MAX_IDLE = 64


class _PluginThread:
    """A daemon thread running one call at a time; idle between calls (module doc)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="ape-plugin", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.jobs.get()()
            with _IDLE_LOCK:  # free again only now: a stuck call keeps its thread
                if len(_IDLE) >= MAX_IDLE:
                    return
                _IDLE.append(self)


_IDLE: list[_PluginThread] = []
_IDLE_LOCK = threading.Lock()


def _forget_idle() -> None:
    """A forked child has none of its parent's threads: start afresh."""
    global _IDLE_LOCK
    _IDLE.clear()
    _IDLE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_idle)


def _plugin_thread() -> _PluginThread:
    with _IDLE_LOCK:
        if _IDLE:
            return _IDLE.pop()
    return _PluginThread()


class PluginTimeout(Exception):
    """A user plugin did not return within its configured limit."""

    def __init__(self, label: str, limit_s: float, key: str):
        super().__init__(f"{label} did not return within {limit_s:g} s (raise the limit with {key})")
        self.label = label
        self.limit_s = limit_s


def call_with_timeout(
    fn: Callable[..., T], *args: Any, limit_s: float | None, label: str, key: str, **kwargs: Any
) -> T:
    """``fn(*args, **kwargs)``, or PluginTimeout after ``limit_s`` seconds (None: no limit;
    a ``fn`` with a true ``runs_inline`` has none either: module doc)."""
    if limit_s is None or getattr(fn, "runs_inline", False):
        return fn(*args, **kwargs)
    outcome: list[Any] = []
    done = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome.append((True, context.run(fn, *args, **kwargs)))
        except BaseException as exc:  # handed to the caller below
            outcome.append((False, exc))
        finally:
            done.set()

    _plugin_thread().jobs.put(target)
    if not done.wait(limit_s) or not outcome:
        raise PluginTimeout(label, limit_s, key)
    ok, value = outcome[0]
    if ok:
        return value
    raise value


END_WAIT_S = 5.0  # how long a run's end waits for each last call to a Prefect server


def finished_within(fn: Callable[[], object], limit_s: float, name: str) -> bool:
    """Run ``fn`` on a daemon thread of its own and wait at most ``limit_s`` seconds for it:
    True when it ended in time. For the run's last calls to the Prefect server (the live
    view's final snapshot, the control variable's removal): a busy or stopped server held
    the end of a run, a Ctrl-C too, for minutes while Prefect's client retried; what such a
    call leaves undone is harmless, and ``fn`` handles its own errors."""
    thread = threading.Thread(target=contextvars.copy_context().run, args=(fn,), name=name, daemon=True)
    thread.start()
    thread.join(limit_s)
    return not thread.is_alive()
