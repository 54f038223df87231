"""Time limits for user plugins (ape.tasks.common.deadline): reused threads, same behaviour."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from ape.tasks.common.deadline import PluginTimeout, call_with_timeout

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def _on(fn, *args, limit_s: float | None = 5.0):
    return call_with_timeout(fn, *args, limit_s=limit_s, label="the checker", key="[checker] timeout_s")


def test_calls_with_a_limit_reuse_their_threads() -> None:
    """200 calls one after another run on a handful of threads, not one started per call
    (two thread starts per session were a tenth of an instant-model run's samples)."""
    threads = [_on(threading.current_thread) for _ in range(200)]
    assert all(t is not threading.current_thread() for t in threads)
    assert len({id(t) for t in threads}) <= 2


def test_a_stuck_call_times_out_and_holds_up_no_other() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(PluginTimeout, match=r"the checker did not return within 0.2 s \(raise the limit with"):
        _on(release.wait, 30, limit_s=0.2)
    assert time.monotonic() - started < 5
    stuck_free = time.monotonic()
    assert _on(lambda: 42) == 42  # on another thread: the stuck one is still waiting
    assert time.monotonic() - stuck_free < 1
    release.set()


def test_errors_values_and_the_callers_context_pass_through() -> None:
    VAR.set("caller's")
    assert _on(VAR.get) == "caller's"
    assert _on(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(KeyError, match="boom"):
        _on(lambda: {}["boom"])
    assert _on(VAR.get, limit_s=None) == "caller's"  # no limit: called here


def test_calls_at_once_each_get_a_thread() -> None:
    """Sixteen workers calling at once are not queued behind each other."""
    barrier = threading.Barrier(16, timeout=10)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            _on(barrier.wait, limit_s=10)
        except BaseException as exc:  # noqa: BLE001 - collected for the assert
            errors.append(exc)

    workers = [threading.Thread(target=worker) for _ in range(16)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(20)
    assert errors == []


class _Recorder:
    """Records the thread each call ran on."""

    def __init__(self, runs_inline: bool) -> None:
        self.runs_inline = runs_inline
        self.threads: list[threading.Thread] = []

    def __call__(self, *args: object) -> str:
        self.threads.append(threading.current_thread())
        return "done"


def test_only_a_plugin_marked_runs_inline_skips_the_plugin_thread() -> None:
    marked, unmarked = _Recorder(True), _Recorder(False)
    assert _on(marked, "x") == _on(unmarked, "x") == "done"
    assert marked.threads == [threading.current_thread()]
    assert unmarked.threads[0] is not threading.current_thread()


def test_the_built_ins_that_run_inline_are_the_linear_ones() -> None:
    """raw, strip, last_number, exact_match and accuracy run on the caller's thread; a pattern
    from the config (regex), a schema (json) and every other metric keep their thread and limit."""
    from ape.tasks.checking.builtin import builtin_checker
    from ape.tasks.checking.metrics import METRICS
    from ape.tasks.solving.adapt import builtin_adapter

    inline = {name for name in ("raw", "strip", "last_number") if builtin_adapter(name).runs_inline}
    assert inline == {"raw", "strip", "last_number"}
    assert not builtin_adapter("regex", {"pattern": "(a+)+b"}).runs_inline
    assert not builtin_adapter("json").runs_inline
    checkers = {name for name in METRICS if builtin_checker(name).runs_inline}
    assert checkers == {"exact_match", "accuracy"}
    assert _on(builtin_adapter("last_number"), "so 12, then 42") == 42
