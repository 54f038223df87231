"""The bookkeeping that makes a run wait for the Prefect server (ape.tasks.recording.server),
with a counting function standing in for the server's /task_runs/count."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from ape.tasks.recording import RunRecording
from ape.tasks.recording import server as recording
from ape.tasks.recording.server import TaskRunCounts, keep_chain, wait_until_recorded
from ape.tasks.recording.stage_runs import StageMark


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
    monkeypatch.setattr(recording, "PACE_NOTE_S", 0.05)  # the 0.3 s wait would be over it
    counts = TaskRunCounts(counter=FakeServer(total=40, rate=40, open_=3))
    counts.add("f1", 50)
    lines: list[str] = []
    started = time.monotonic()
    result = wait_until_recorded(["f1"], counts, wait_s=0.3, on_progress=lines.append)
    assert time.monotonic() - started < 5
    assert result is not None and not result.complete
    assert (result.missing, result.open) == (10, 3)
    assert "has not recorded 10 of 50 task runs (3 still open)" in lines[-1]
    assert not any("pace" in line for line in lines)  # a wait that ran out is not the server's pace


def test_nothing_expected_means_no_wait() -> None:
    counts = TaskRunCounts(counter=FakeServer(total=0, rate=0))
    assert wait_until_recorded(["f1"], counts, wait_s=5) is None
    counts.add("f1", 3)
    counts.forget(["f1"])
    assert wait_until_recorded(None, counts, wait_s=5) is None


def test_throttle_waits_while_the_server_is_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.01)
    server = FakeServer(total=1000, rate=100)
    counts = TaskRunCounts(counter=server, background=False)
    counts.add("f1", 1000)
    assert counts.throttle(max_lag=2000) == 0.0 and server.polls == 0  # not behind: no request
    counts.throttle(max_lag=500)
    assert server.polls >= 5 and counts.lag() <= 500


def test_throttle_polls_from_one_thread_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.05)
    server = FakeServer(total=100, rate=10)
    counts = TaskRunCounts(counter=server, background=False)
    counts.add("f1", 100)
    threads = [threading.Thread(target=counts.throttle, kwargs={"max_lag": 5, "limit_s": 5}) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts.lag() <= 5
    assert 10 <= server.polls <= 12  # ten polls reach 100; eight threads did not each poll


def _marks(state_type: str = "COMPLETED", state_name: str = "Completed") -> list[StageMark]:
    return [StageMark("solve", 0.0, 1.0), StageMark("check", 1.0, 2.0, state_type, state_name)]


def test_plain_chains_are_kept_while_the_server_keeps_up() -> None:
    assert keep_chain(_marks(), lag=0, max_lag=500)
    assert keep_chain(_marks("COMPLETED", "Passed"), lag=500, max_lag=500)
    assert keep_chain(_marks("COMPLETED", "Cached"), lag=-3, max_lag=500)  # a count newer than ours
    assert not keep_chain(_marks("COMPLETED", "Passed"), lag=501, max_lag=500)
    assert not keep_chain(_marks(), lag=0, max_lag=0)  # a budget of 0: no plain chain


@pytest.mark.parametrize(
    ("state_type", "state_name"),
    [("FAILED", "Failed"), ("COMPLETED", "Incorrect"), ("COMPLETED", "Skipped"), ("COMPLETED", "Gave up")],
)
def test_unusual_chains_are_always_kept(state_type: str, state_name: str) -> None:
    assert keep_chain(_marks(state_type, state_name), lag=10**6, max_lag=500)
    assert keep_chain(_marks(state_type, state_name), lag=10**6, max_lag=0)


def test_the_first_chains_are_kept_whatever_the_lag() -> None:
    # a small run records every chain: the first ones go even with the server far behind
    assert keep_chain(_marks(), lag=10**6, max_lag=100, first=True)
    assert not keep_chain(_marks(), lag=10**6, max_lag=100, first=False)
    assert not keep_chain(_marks(), lag=0, max_lag=0, first=True)  # a budget of 0 still records none


def test_the_first_chains_are_counted_per_flow_run() -> None:
    counts = TaskRunCounts(counter=lambda ids, types: 0, background=False)
    assert [counts.first_chain("f1", first=3) for _ in range(5)] == [True, True, True, False, False]
    assert counts.first_chain("f2", first=3)  # another flow run counts afresh
    assert not counts.first_chain(None, first=3) and not counts.first_chain("f3", first=0)
    counts.forget(["f1"])  # a served process runs many flow runs: a finished one is dropped
    assert counts.first_chain("f1", first=3)


def test_a_small_run_records_every_chain_with_the_server_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "CHAIN_MAX_LAG", 100)
    monkeypatch.setattr(recording, "CHAIN_FIRST", 2)
    worker = RunRecording("flow-x", record_stages=True, live_stages=False, collect=True)
    counts = _counts(monkeypatch, lag=10**6)
    for _ in range(3):
        _session(monkeypatch, lag=10**6, counts=counts, run=worker)
    assert [recorded for _, _, recorded in worker.collected] == [True, True, False]


def test_the_budget_defaults_to_the_module_constant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "CHAIN_MAX_LAG", 10)
    assert keep_chain(_marks(), lag=10) and not keep_chain(_marks(), lag=11)


def test_the_poller_refreshes_the_lag_off_the_solver_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lag a session reads is refreshed by the poller thread, not by the session; the
    poller asks only while the server is over the chain budget, and ends when nothing is expected."""
    monkeypatch.setattr(recording, "POLL_S", 0.02)
    monkeypatch.setattr(recording, "CHAIN_MAX_LAG", 100)
    askers: list[str] = []

    def counter(ids: Iterable[str], types: Iterable[str]) -> int:
        askers.append(threading.current_thread().name)
        return 950

    counts = TaskRunCounts(counter=counter)
    counts.add("f1", 50)
    time.sleep(0.2)
    assert askers == [] and counts.lag() == 50  # under the budget: no request
    counts.add("f1", 950)
    deadline = time.monotonic() + 5
    while counts.lag() > 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counts.lag() == 50 and set(askers) == {"ape-task-run-counts"}
    counts.forget(["f1"])
    deadline = time.monotonic() + 5
    while counts._poller is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counts._poller is None  # nothing expected: the poller ended


def test_forget_never_leaves_the_lag_too_low() -> None:
    counts = TaskRunCounts(counter=lambda ids, types: 1000, background=False)
    counts.add("f1", 1000)
    counts.add("f2", 800)
    counts._poll()
    assert counts.lag() == 800
    counts.forget(["f1"])  # the count of 1000 held f1's task runs: no longer ours to subtract
    assert counts.lag() == 800


def test_chains_are_counted_and_the_left_out_named_per_flow_run() -> None:
    from ape.tasks.recording import RunRecording

    f1 = RunRecording("f1", record_stages=True, live_stages=False)
    f2 = RunRecording("f2", record_stages=True, live_stages=False)
    f1.add_chains([("q1", 0, True), ("q1", 1, False)])
    f2.add_chains([("q9", 0, True)])
    RunRecording(None, record_stages=True, live_stages=False).add_chains([("q0", 0, False)])  # no flow run
    taken = f1.finish()
    assert (taken.recorded, taken.left_out) == (1, [("q1", 1)])
    assert f1.finish().recorded == 0  # taken: a second finish holds nothing
    assert (f2.finish().recorded, f2.finish().left_out) == (1, [])


def _counts(monkeypatch: pytest.MonkeyPatch, lag: int = 0) -> TaskRunCounts:
    """A fresh process-wide count for the test (no poller), its lag fixed at ``lag``."""
    counts = TaskRunCounts(counter=lambda ids, types: 0, background=False)
    monkeypatch.setattr(counts, "lag", lambda: lag)
    # no solver wait: with a lag past MAX_LAG the throttle would hold each session for its
    # whole minute (it has its own tests above)
    monkeypatch.setattr(counts, "throttle", lambda *args, **kwargs: 0.0)
    monkeypatch.setattr(recording, "TASK_RUN_COUNTS", counts)
    return counts


def _session(
    monkeypatch: pytest.MonkeyPatch,
    lag: int,
    state_name: str = "Passed",
    counts: TaskRunCounts | None = None,
    run: RunRecording | None = None,
) -> list[list[str]]:
    """One recorded session with a chain of flow run ``flow-x`` (in ``run``), at ``lag`` (in
    ``counts``, else a fresh count); the stages it sent."""
    sent: list[list[str]] = []
    if run is None:
        run = RunRecording("flow-x", record_stages=True, live_stages=False)
    monkeypatch.setattr(
        recording, "record_stage_runs", lambda f, i, r, marks, **kw: sent.append([m.stage for m in marks]) or len(marks)
    )
    if counts is None:
        _counts(monkeypatch, lag)
    with run.session("q1", 0) as recorder:
        recorder.rendered()
        assert recorder.clock is not None
        recorder.clock.mark("check", state_name=state_name)
    return sent


def test_a_session_leaves_a_plain_chain_out_when_the_server_is_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "CHAIN_MAX_LAG", 500)
    monkeypatch.setattr(recording, "CHAIN_FIRST", 0)  # no small-run allowance: the lag alone decides
    worker = RunRecording("flow-x", record_stages=True, live_stages=False, collect=True)  # a Dask worker's
    assert _session(monkeypatch, lag=10, run=worker) == [["render", "check"]]
    assert _session(monkeypatch, lag=501, run=worker) == []
    assert _session(monkeypatch, lag=501, state_name="Incorrect", run=worker) == [["render", "check"]]
    assert worker.collected == [("q1", 0, True), ("q1", 0, False), ("q1", 0, True)]
    assert worker.finish().recorded == 0  # collected, not counted here
    own = RunRecording("flow-x", record_stages=True, live_stages=False)
    _session(monkeypatch, lag=501, run=own)  # the flow's own recording: counted in this process
    assert own.collected == [] and own.finish().left_out == [("q1", 0)]


def test_live_stages_count_as_a_recorded_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    _counts(monkeypatch)
    live = RunRecording("flow-live", record_stages=False, live_stages=True, collect=True)
    with live.session("q2", 1):
        pass
    plain = RunRecording("flow-live", record_stages=False, live_stages=False, collect=True)
    with plain.session("q3", 0):  # [run] stage_runs = false: no chain at all
        pass
    assert live.collected == [("q2", 1, True)] and plain.collected == []


def test_slow_sessions_are_announced_once_and_fast_ones_never(monkeypatch: pytest.MonkeyPatch) -> None:
    from ape.tasks.recording import server as recording

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


def test_a_run_recording_owns_its_sessions_chains_from_start_to_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flow talks to one object: its sessions go in, finish() says what was recorded and
    left out; a worker process's recording collects its chains for the flow's to add."""
    from ape.tasks.recording import RunRecording

    monkeypatch.setattr(recording, "CHAIN_MAX_LAG", 500)
    monkeypatch.setattr(recording, "CHAIN_FIRST", 0)
    monkeypatch.setattr(recording, "record_stage_runs", lambda f, i, r, marks, **kw: len(marks))
    counts = _counts(monkeypatch, lag=501)  # behind: a plain chain is left out
    run = RunRecording("flow-r", record_stages=True, live_stages=False)
    for run_index, state_name in enumerate(("Passed", "Incorrect")):
        with run.session("q1", run_index) as recorder:
            recorder.rendered()
            assert recorder.clock is not None
            recorder.clock.mark("check", state_name=state_name)
    worker = RunRecording("flow-r", record_stages=True, live_stages=False, collect=True)
    with worker.session("q2", 0) as recorder:
        recorder.rendered()
    assert worker.collected == [("q2", 0, False)]  # not counted in the worker's process
    run.add_chains(worker.collected)
    tally = run.finish()
    assert (tally.recorded, tally.left_out) == (1, [("q1", 0), ("q2", 0)])
    assert run.finish().recorded == 0  # finished: taken
    assert counts.lag() == 501  # the process-wide count holds only the server's lag


def test_a_stage_is_marked_from_its_result_or_its_exception() -> None:
    """The chain's one report call: ``with recorder.stage(name) as end``."""
    from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome
    from ape.schemas.transcript import SolveRecord
    from ape.tasks.recording.stage_runs import StageClock, StageRecorder

    recorder = StageRecorder(StageClock())
    with recorder.stage("render", task_runs=2):
        pass
    with recorder.stage("solve") as end:
        end.result = SolveRecord(outcome=Outcome.ERROR, error=ErrorInfo(type="Timeout", message="slow"))
    with recorder.stage("adapt", solve_failed=True) as end:
        end.result = SolveRecord(outcome=Outcome.ERROR)
    with recorder.stage("check") as end:
        end.result = CheckResult(status=CheckStatus.FAILED)
    with recorder.stage("score", outcome=Outcome.SOLVED) as end:
        end.result = 0.0
    with pytest.raises(ValueError), recorder.stage("session"):
        raise ValueError("lost")  # the session's own task run: Failed, and raised
    assert [(m.stage, m.state_type, m.state_name) for m in recorder.marks] == [
        ("render", "COMPLETED", "Completed"),
        ("solve", "FAILED", "Failed"),
        ("adapt", "COMPLETED", "Skipped"),
        ("check", "COMPLETED", "Incorrect"),
        ("score", "COMPLETED", "Completed"),
    ]
    assert recorder.marks[1].message == "Timeout: slow" and recorder.task_runs == 2
    session = recorder.session_mark
    assert session is not None and (session.state_type, session.message) == ("FAILED", "ValueError: lost")


def test_the_session_chain_imports_nothing_of_the_mirror() -> None:
    """The chain reports to the interface it owns (ape.tasks.session.recorder); the flow binds
    the recorder there."""
    import ast

    from tests.helpers.paths import REPO_ROOT

    for path in sorted((REPO_ROOT / "tasks" / "session").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in names if m.startswith("ape.tasks.recording")], path.name


def test_throttle_counts_the_time_the_run_was_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.02)
    server = FakeServer(total=100, rate=10)
    counts = TaskRunCounts(counter=server, background=False)
    counts.add("f1", 100)
    assert counts.held_s() == 0.0
    threads = [threading.Thread(target=counts.throttle, kwargs={"max_lag": 5, "limit_s": 5}) for _ in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    # wall time while any thread waited, not four threads' waits added up
    assert 0.1 < counts.held_s() <= elapsed + 0.01
    counts.forget(["f1"])
    assert counts.held_s() == 0.0


def test_the_end_wait_says_when_the_server_set_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.01)
    monkeypatch.setattr(recording, "PACE_NOTE_S", 0.05)
    counts = TaskRunCounts(counter=FakeServer(total=200, rate=5), background=False)
    counts.add("f1", 200)
    lines: list[str] = []
    result = wait_until_recorded(["f1"], counts, wait_s=30, on_progress=lines.append)
    assert result is not None and result.complete
    pace = [line for line in lines if "set this run's pace" in line]
    assert len(pace) == 1 and "to record the last" in pace[0] and "Where the line is" in pace[0]
    assert "solvers" not in pace[0]  # no solver was held back


def test_the_pace_line_names_both_waits() -> None:
    assert recording.pace_note(1.0, 2.0) is None  # under PACE_NOTE_S in all
    line = recording.pace_note(12.34, 3.0)
    assert line is not None
    assert "solvers waited 12.3 s in all" in line and "the end waited 3.0 s" in line


def test_a_server_that_keeps_up_gets_no_pace_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "POLL_S", 0.01)
    counts = TaskRunCounts(counter=FakeServer(total=50, rate=50), background=False)
    counts.add("f1", 50)
    lines: list[str] = []
    wait_until_recorded(["f1"], counts, wait_s=10, on_progress=lines.append)
    assert not any("pace" in line for line in lines)


def test_a_session_far_behind_the_server_is_left_out_whole_and_no_solver_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past LIVE_MAX_LAG a session that ends sends nothing, its own task run included, and is
    named as left out (sent after the run); one that raised is still sent; the solver never waits."""
    monkeypatch.setattr(recording, "LIVE_MAX_LAG", 100)
    monkeypatch.setattr(recording, "CHAIN_FIRST", 0)
    counts = _counts(monkeypatch, lag=101)

    def no_wait(*args: object, **kwargs: object) -> float:
        raise AssertionError("a solver waited for the server")

    monkeypatch.setattr(counts, "throttle", no_wait)
    sent: list[list[str]] = []
    monkeypatch.setattr(
        recording, "record_stage_runs", lambda f, i, r, marks, **kw: sent.append([m.stage for m in marks]) or len(marks)
    )
    run = RunRecording("flow-y", record_stages=True, live_stages=False)
    with run.session("q1", 0) as recorder:
        recorder.rendered()
        recorder.session(time.time(), "COMPLETED", "Completed")
    assert sent == []
    with pytest.raises(RuntimeError), run.session("q2", 0) as recorder:
        recorder.session(time.time(), "FAILED", "Failed", "boom")
        raise RuntimeError("boom")
    assert sent == [["session"]]  # a session that raised keeps its task run
    monkeypatch.setattr(counts, "lag", lambda: 100)  # caught up to the limit: sent again
    with run.session("q3", 0) as recorder:
        recorder.rendered()
        recorder.session(time.time(), "COMPLETED", "Completed")
    assert sent[1] == ["session"]
    assert run.finish().left_out == [("q1", 0)]


def test_a_flow_runs_first_sessions_go_live_until_the_queue_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between LIVE_MAX_LAG and MAX_LAG behind, the first CHAIN_FIRST sessions of a flow run
    still send their task run and chain (a small run is whole in the UI as it goes); the
    sessions after them are left out whole; past MAX_LAG the first ones are too."""
    monkeypatch.setattr(recording, "LIVE_MAX_LAG", 100)
    monkeypatch.setattr(recording, "MAX_LAG", 1000)
    monkeypatch.setattr(recording, "CHAIN_FIRST", 2)
    counts = _counts(monkeypatch, lag=500)
    sent: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(
        recording, "record_stage_runs", lambda f, i, r, marks, **kw: sent.append((i, [m.stage for m in marks])) or 1
    )
    run = RunRecording("flow-z", record_stages=True, live_stages=False)

    def session(item: str) -> None:
        with run.session(item, 0) as recorder:
            recorder.rendered()
            recorder.session(time.time(), "COMPLETED", "Completed")

    for item in ("q1", "q2", "q3"):
        session(item)
    assert [item for item, stages in sent if stages == ["session"]] == ["q1", "q2"]
    assert run.finish().left_out == [("q3", 0)]
    monkeypatch.setattr(counts, "lag", lambda: 1001)
    sent.clear()
    run2 = RunRecording("flow-w", record_stages=True, live_stages=False)
    with run2.session("q1", 0) as recorder:
        recorder.rendered()
        recorder.session(time.time(), "COMPLETED", "Completed")
    assert sent == [] and run2.finish().left_out == [("q1", 0)]


def test_the_end_does_not_wait_for_the_server_when_sessions_were_left_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Left-out sessions mean the catch-up starts anyway: the end asks once and goes on; a run
    with none left out (the server kept up) still waits for the last task runs."""
    from ape.tasks.recording import run as recording_run

    monkeypatch.setattr(recording, "POLL_S", 0.01)
    monkeypatch.setattr(recording, "END_WAIT_S", 30.0)
    started: list[Path] = []
    monkeypatch.setattr(recording_run, "start_catch_up", lambda out: started.append(out) or (out / "log", 4242))
    for left, polls, catch_up in ((7, 1, True), (0, 5, False)):
        server = FakeServer(total=50, rate=10)  # five polls to hold everything
        monkeypatch.setattr(recording, "TASK_RUN_COUNTS", TaskRunCounts(counter=server))
        monkeypatch.setattr(recording_run, "left_out_sessions", lambda out, ids, n=left: n)
        recording.TASK_RUN_COUNTS.add("f1", 50)
        lines: list[str] = []
        recording_run.finish_recording(["f1"], tmp_path, on_progress=lines.append)
        assert server.polls == polls
        assert bool(started) == catch_up
        started.clear()
