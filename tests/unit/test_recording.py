"""The bookkeeping that makes a run wait for the Prefect server (ape.tasks.recording),
with a counting function standing in for the server's /task_runs/count."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import pytest

from ape.tasks import recording
from ape.tasks.recording import TaskRunCounts, keep_chain, wait_until_recorded
from ape.tasks.stage_runs import StageMark


class FakeServer:
    """Records ``rate`` task runs per poll until it holds ``total``; ``open`` stay open."""

    def __init__(self, total: int, rate: int, open_: int = 0) -> None:
        self.total, self.rate, self.open, self.held, self.polls = total, rate, open_, 0, 0

    def __call__(self, ids: Iterable[str], types: Iterable[str]) -> int:
        types = tuple(types)
        if types == recording.OPEN_TYPES:
            return self.open
        self.polls += 1
        self.held = min(self.total, self.held + self.rate)
        return self.held


def test_wait_ends_when_everything_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.01)
    server = FakeServer(total=50, rate=10)
    counts = TaskRunCounts(counter=server)
    counts.add("f1", 30)
    counts.add("f1", 20)
    counts.add(None, 99)  # outside a flow run: not expected on the server
    lines: list[str] = []
    result = wait_until_recorded(["f1"], counts, wait_s=10, on_progress=lines.append)
    assert result is not None and result.complete
    assert (result.expected, result.final, result.missing) == (50, 50, 0)
    assert server.polls == 5
    assert not any("not recorded" in line for line in lines)


def test_wait_is_bounded_and_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.01)
    counts = TaskRunCounts(counter=FakeServer(total=40, rate=40, open_=3))
    counts.add("f1", 50)
    lines: list[str] = []
    started = time.monotonic()
    result = wait_until_recorded(["f1"], counts, wait_s=0.3, on_progress=lines.append)
    assert time.monotonic() - started < 5
    assert result is not None and not result.complete
    assert (result.missing, result.open) == (10, 3)
    assert "has not recorded 10 of 50 task runs (3 still open)" in lines[-1]


def test_nothing_expected_means_no_wait() -> None:
    counts = TaskRunCounts(counter=FakeServer(total=0, rate=0))
    assert wait_until_recorded(["f1"], counts, wait_s=5) is None
    counts.add("f1", 3)
    counts.forget(["f1"])
    assert wait_until_recorded(None, counts, wait_s=5) is None


def test_throttle_waits_while_the_server_is_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.01)
    server = FakeServer(total=1000, rate=100)
    counts = TaskRunCounts(counter=server)
    counts.add("f1", 1000)
    assert counts.throttle(max_lag=2000) == 0.0 and server.polls == 0  # not behind: no request
    counts.throttle(max_lag=500)
    assert server.polls >= 5 and counts.lag() <= 500


def test_throttle_polls_from_one_thread_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.05)
    server = FakeServer(total=100, rate=10)
    counts = TaskRunCounts(counter=server)
    counts.add("f1", 100)
    threads = [threading.Thread(target=counts.throttle, kwargs={"max_lag": 5, "limit_s": 5}) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts.lag() <= 5
    assert 10 <= server.polls <= 12  # ten polls reach 100; eight threads did not each poll


def test_session_index_counts_per_flow_run() -> None:
    counts = TaskRunCounts(counter=FakeServer(total=0, rate=0))
    assert [counts.next_session("a") for _ in range(3)] == [0, 1, 2]
    assert counts.next_session("b") == 0


def _marks(state_type: str = "COMPLETED", state_name: str = "Completed") -> list[StageMark]:
    return [StageMark("solve", 0.0, 1.0), StageMark("check", 1.0, 2.0, state_type, state_name)]


def test_keep_chain_full_then_failures_and_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "FULL_CHAINS", 4)
    monkeypatch.setattr(recording, "SAMPLE_EVERY", 3)
    assert all(keep_chain(i, _marks()) for i in range(4))
    kept = [i for i in range(4, 13) if keep_chain(i, _marks())]
    assert kept == [4, 7, 10]
    assert keep_chain(5, _marks("FAILED", "Failed"))
    assert keep_chain(5, _marks("COMPLETED", "Incorrect"))
    assert keep_chain(5, _marks("COMPLETED", "Skipped"))
    assert not keep_chain(5, _marks("COMPLETED", "Passed"))


def test_slow_sessions_are_announced_once_and_fast_ones_never(monkeypatch: pytest.MonkeyPatch) -> None:
    from ape.tasks import recording

    sent: list[dict] = []
    monkeypatch.setattr(recording, "emit_event", lambda **event: sent.append(event))
    slow = recording.SlowSessions(after_s=0.2)
    with slow.watch("flow-1", "fast", 0, time.time()):
        pass  # ended before the threshold: nothing sent
    with slow.watch("flow-1", "slow", 0, time.time()):
        time.sleep(1.0)
    with slow.watch(None, "no-flow", 0, time.time() - 10):
        time.sleep(0.6)  # outside a flow run: nothing to show it in
    assert [e["resource"]["prefect.resource.name"] for e in sent] == ["session[slow]#0"]
    (event,) = sent
    assert event["event"] == "prefect.task-run.Running"
    assert event["payload"]["task_run"]["end_time"] is None and slow.announced == 1
