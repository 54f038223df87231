"""The default session answer: a plain call, cached through the run's SessionCache, and
recorded as the session's task run with the state the engine would have given it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ape.schemas.results import ErrorInfo, Outcome
from ape.schemas.transcript import SolveRecord
from ape.tasks.recording.stage_runs import StageClock, StageRecorder
from ape.tasks.session.chain import RecordedAnswer
from ape.tasks.session.recorder import bind_recorder
from ape.tasks.session.stages import SessionFailed, SessionSpec

SPEC = SessionSpec(item_id="q1", run_index=0, item="{}", prompt="2 + 3?", system=None, fingerprint="f")


def start_recorder(record_stages: bool) -> StageRecorder:
    """A fresh recorder bound to this thread, as the flow binds one per session."""
    recorder = StageRecorder(StageClock() if record_stages else None)
    bind_recorder(recorder)
    return recorder


class Cache:
    """A SessionCache stand-in: a dict."""

    def __init__(self) -> None:
        self.records: dict[str, SolveRecord] = {}

    def key(self, spec: SessionSpec) -> str:
        return spec.prompt

    def read(self, key: str) -> SolveRecord | None:
        return self.records.get(key)

    def write(self, key: str, record: SolveRecord) -> None:
        self.records[key] = record


def answer(fn, cache=None) -> RecordedAnswer:
    return RecordedAnswer(SimpleNamespace(fn=fn), None, cache)


def test_a_solved_session_is_cached_and_recorded_completed_then_read_from_the_cache() -> None:
    calls = []
    cache = Cache()
    solved = SolveRecord(outcome=Outcome.SOLVED, solution=5)
    run = answer(lambda spec: calls.append(spec) or solved, cache)
    recorder = start_recorder(True)
    assert run(SPEC, False) == (solved, False)
    mark = recorder.session_mark
    assert mark is not None and (mark.stage, mark.state_type, mark.state_name) == ("session", "COMPLETED", "Completed")
    assert mark.end >= mark.start and cache.records == {"2 + 3?": solved}

    recorder = start_recorder(True)
    record, cached = run(SPEC, False)
    assert cached and record == solved and len(calls) == 1  # no second call
    assert recorder.session_mark is not None and recorder.session_mark.state_name == "Cached"
    assert [m.state_name for m in recorder.marks] == ["Cached", "Cached"]  # solve and adapt from the cache

    start_recorder(True)
    assert run(SPEC, True) == (solved, False) and len(calls) == 2  # refresh: the model again


def test_an_errored_session_is_recorded_failed_and_not_cached() -> None:
    cache = Cache()
    failed = SolveRecord(outcome=Outcome.ERROR, error=ErrorInfo(type="RateLimitError", message="429"))

    def fn(spec):
        raise SessionFailed(failed)

    recorder = start_recorder(False)  # stage_runs = false: the session's run is still recorded
    assert answer(fn, cache)(SPEC, False) == (failed, False)
    mark = recorder.session_mark
    assert mark is not None and (mark.state_type, mark.message) == ("FAILED", "RateLimitError: 429")
    assert cache.records == {}  # a retry asks the model again


def test_a_crash_is_recorded_failed_and_raised() -> None:
    def fn(spec):
        raise ConnectionError("worker lost")

    recorder = start_recorder(True)
    with pytest.raises(ConnectionError):
        answer(fn, Cache())(SPEC, False)
    mark = recorder.session_mark
    assert mark is not None and mark.state_type == "FAILED" and mark.message == "ConnectionError: worker lost"
