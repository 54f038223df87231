"""Each session's stage chain as Prefect task runs: the events, and what a real server records."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome
from ape.schemas.transcript import SolveRecord
from ape.tasks.recording.stage_runs import (
    STAGES,
    StageClock,
    StageMark,
    close_chain,
    mark_adapt,
    stage_run_events,
    stage_run_id,
)
from tests.helpers.runner import make_benchmark


def test_events_parse_as_the_server_parses_them() -> None:
    """The server's own task_run_from_event accepts each event: name, times, state, chain."""
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.server.services.task_run_recorder import task_run_from_event

    flow_run_id = str(uuid.uuid4())
    t = time.time()
    marks = [
        StageMark("render", t, t + 0.001),
        StageMark("solve", t + 0.001, t + 0.5),
        StageMark("adapt", t + 0.5, t + 0.6, "FAILED", "Failed", "parse failure: no number"),
        StageMark("check", t + 0.6, t + 0.6, "COMPLETED", "Skipped", "no solution to check"),
        StageMark("score", t + 0.6, t + 0.61),
    ]
    events = stage_run_events(flow_run_id, "q007", 2, marks)
    runs = [task_run_from_event(ReceivedEvent(**event)) for event in events]
    assert [r.name for r in runs] == [f"{s}[q007]#2" for s in STAGES]
    assert all(str(r.flow_run_id) == flow_run_id for r in runs)
    assert runs[1].total_run_time.total_seconds() == pytest.approx(0.499, abs=1e-3)
    assert runs[1].start_time.timestamp() == pytest.approx(t + 0.001, abs=1e-3)
    assert runs[2].state.type.value == "FAILED" and runs[2].state.message == "parse failure: no number"
    assert runs[3].state.name == "Skipped"
    # each stage points at the one before it, so the UI graph draws the chain
    assert runs[0].task_inputs == {}
    for before, after in zip(runs, runs[1:]):
        assert [i.id for i in after.task_inputs["upstream"]] == [before.id]
    # a retry of the same flow run updates the same task runs
    assert runs[4].id == stage_run_id(flow_run_id, "q007", 2, "score")


def test_a_nested_chain_sits_in_its_sessions_task_run() -> None:
    """Nested, each stage names the session's recorded task run as its parent (``__parents__``,
    what the server turns into the graph's encapsulating edge and the UI folds behind the
    session node's toggle); the upstream arrow between stages stays; the session itself is
    nested in nothing."""
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.server.services.task_run_recorder import task_run_from_event

    flow_run_id = str(uuid.uuid4())
    t = time.time()
    session = StageMark("session", t, t + 0.5)
    marks = [StageMark(stage, t + i * 0.1, t + (i + 1) * 0.1) for i, stage in enumerate(STAGES)]
    outer = task_run_from_event(ReceivedEvent(**stage_run_events(flow_run_id, "q1", 0, [session], nested=True)[0]))
    assert outer.task_inputs == {} and outer.id == stage_run_id(flow_run_id, "q1", 0, "session")
    runs = [task_run_from_event(ReceivedEvent(**e)) for e in stage_run_events(flow_run_id, "q1", 0, marks, nested=True)]
    for run in runs:
        assert [i.id for i in run.task_inputs["__parents__"]] == [outer.id], run.name
    for before, after in zip(runs, runs[1:]):
        assert [i.id for i in after.task_inputs["upstream"]] == [before.id]
    # not nested (the default): no parent, as before
    plain = stage_run_events(flow_run_id, "q1", 0, marks)
    assert all("__parents__" not in e["payload"]["task_run"]["task_inputs"] for e in plain)


@pytest.mark.parametrize(
    ("outcome", "solve_failed", "state"),
    [
        (Outcome.SOLVED, False, ("COMPLETED", "Completed")),
        (Outcome.PARSING_FAILED, False, ("FAILED", "Failed")),
        (Outcome.ERROR, False, ("FAILED", "Failed")),
        (Outcome.GAVE_UP, False, ("COMPLETED", "Gave up")),
        (Outcome.ERROR, True, ("COMPLETED", "Skipped")),
    ],
)
def test_adapt_stage_state_follows_the_outcome(outcome: Outcome, solve_failed: bool, state: tuple[str, str]) -> None:
    clock = StageClock()
    error = ErrorInfo(type="ValueError", message="boom") if outcome is not Outcome.SOLVED else None
    mark_adapt(clock, SolveRecord(outcome=outcome, error=error), solve_failed=solve_failed)
    assert [(m.stage, m.state_type, m.state_name) for m in clock.marks] == [("adapt", *state)]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_records_every_stage_of_every_session(prefect_server: str, tmp_path: Path) -> None:
    """A real run on a real server: six task runs per session (the live session run and its
    five recorded stages); a checker that raises is a Failed check run, a wrong answer an
    Incorrect one."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter

    from ape.config import load_config
    from ape.flows.benchmark import benchmark

    config_path = make_benchmark(
        tmp_path,
        n=4,
        run="runs_per_data = 2\n",
        model_args='behaviour = "arithmetic", accuracy = 1.0',
        checker='implementation = "uichecker:check"',
    )
    (tmp_path / "uichecker.py").write_text(CHECKER)
    state = benchmark(load_config(config_path), return_state=True)
    parent = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(parent_flow_run_id={"any_": [parent]}))
        assert len(children) == 1, children
        deadline = time.monotonic() + 60
        while True:  # recorded stages arrive as events: wait until the server ingested them
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": [children[0].id]}), limit=200)
            if len(tasks) >= 4 * 2 * 6 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    by_name = {t.name: t for t in tasks}
    assert len(tasks) == 4 * 2 * 6, sorted(by_name)
    for stage in (*STAGES, "session"):
        assert f"{stage}[i0]#1" in by_name
    failed = by_name["check[i1]#0"]
    assert failed.state_type.value == "FAILED"
    assert "checker crashed" in (failed.state.message or "")
    assert by_name["check[i0]#0"].state_name == "Passed"
    assert by_name["check[i2]#0"].state_name == "Incorrect"
    assert by_name["solve[i0]#0"].total_run_time.total_seconds() >= 0
    assert by_name["solve[i0]#0"].task_inputs["upstream"][0].id == by_name["render[i0]#0"].id


CHECKER = """
def check(item, solution):
    if item.id == "i1":
        raise RuntimeError("checker crashed")
    if item.id == "i2":
        return False
    return solution == item.answer
"""


def test_check_result_states() -> None:
    for check, expected in [
        (CheckResult(status=CheckStatus.PASSED), ("COMPLETED", "Passed")),
        (CheckResult(status=CheckStatus.FAILED, metadata={"reason": "off by one"}), ("COMPLETED", "Incorrect")),
        (CheckResult(status=CheckStatus.ERROR, error=ErrorInfo(type="KeyError", message="x")), ("FAILED", "Failed")),
        (None, ("COMPLETED", "Skipped")),
    ]:
        clock = StageClock()
        close_chain(clock, Outcome.SOLVED if check else Outcome.PARSING_FAILED, check, 0.0)
        assert (clock.marks[0].state_type, clock.marks[0].state_name) == expected
        assert clock.marks[1].stage == "score"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_slow_session_shows_as_running_before_it_ends(prefect_server: str, tmp_path: Path) -> None:
    """A recorded session is one event when it ends; one that runs longer than a few
    seconds (the default, 3 s) shows as Running in the UI meanwhile, then ends Completed."""
    import os
    import subprocess
    import sys

    from tests.helpers.paths import REPO_ROOT
    from tests.helpers.prefect_api import PrefectApi

    config = make_benchmark(
        tmp_path,
        n=1,
        model_args='behaviour = "arithmetic", latency_s = 6.0',
        run="solver_workers = 1",
        id_prefix="slow",  # a name no other test's run has on the shared server
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("APE_SESSION")}
    command = [sys.executable, "-m", "ape", "run", str(config), "--no-progress"]
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: set[str] = set()
    body = {"task_runs": {"name": {"like_": "session[slow0]"}}}
    with PrefectApi(prefect_server) as api:
        while proc.poll() is None:
            seen |= {run["state_type"] for run in api.post("/task_runs/filter", json=body).json()}
            time.sleep(0.3)
        output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        assert proc.returncode == 0, output[-3000:]
        (run,) = api.post("/task_runs/filter", json=body).json()
    assert "RUNNING" in seen, seen  # shown while the model was still answering
    assert run["state_type"] == "COMPLETED" and run["name"] == "session[slow0]#0", run
    assert run["total_run_time"] >= 6.0  # the session's real duration
