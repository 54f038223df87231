"""The contract between APE's recorded stage runs and Prefect's own task runs.

APE records each session's stages as task runs from one ``prefect.task-run.*`` event
(:mod:`ape.tasks.recording.stage_runs`) instead of running them through Prefect's task engine. The
UI and the API must not tell the two apart: this test runs a two-task chain through the
engine and records the same chain as APE does, in one flow run on a real server, and
compares what the server holds of each. A Prefect upgrade that changes the event schema
or the fields the server builds from it fails here, not in the UI.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = pytest.mark.slow

# What the UI's task-run pages, the flow run's graph and the API's filters read of a task run.
COMPARED = ("flow_run_id", "run_count", "flow_run_run_count", "tags", "labels", "empirical_policy", "task_version")
TIMES = ("expected_start_time", "start_time", "end_time")


def _chain() -> tuple[str, list[Any]]:
    """One flow run holding a live render -> solve chain (item q1) and a recorded one (q2)."""
    from prefect import flow, task

    from ape.tasks.recording.stage_runs import StageMark, record_stage_runs
    from ape.tasks.storage.prefect_api import current_flow_run_id

    @task(task_run_name="{stage}[q1]#0", persist_result=False)
    def stage_task(stage: str) -> str:
        time.sleep(0.05)
        return stage

    @flow(name="stage-run-contract", persist_result=False)
    def contract() -> str:
        render = stage_task.submit("render")
        stage_task.submit("solve", wait_for=[render]).result()
        t = time.time()
        marks = [StageMark("render", t, t + 0.05), StageMark("solve", t + 0.05, t + 0.1)]
        flow_run_id = str(current_flow_run_id())
        assert flow_run_id != "None"
        assert record_stage_runs(flow_run_id, "q2", 0, marks) == 2
        return flow_run_id

    flow_run_id = contract()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter

    deadline = time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while True:  # the recorded runs arrive as events: wait until the server holds all four
            runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": [flow_run_id]}))
            if len(runs) == 4 or time.monotonic() > deadline:
                return flow_run_id, runs
            time.sleep(0.5)


def test_a_recorded_stage_run_is_the_task_run_prefects_engine_makes(prefect_server: str) -> None:
    import prefect

    from ape.tasks.storage.prefect_internals import CHECKED_WITH

    # on a failure below, the installed Prefect changed what ape.tasks.storage.prefect_internals
    # builds by hand: re-check that module against it, then add the version to CHECKED_WITH
    print(f"Prefect {prefect.__version__}; prefect_internals checked with {', '.join(CHECKED_WITH)}")
    flow_run_id, runs = _chain()
    by_name = {run.name: run for run in runs}
    assert sorted(by_name) == ["render[q1]#0", "render[q2]#0", "solve[q1]#0", "solve[q2]#0"], sorted(by_name)
    for stage in ("render", "solve"):
        live, recorded = by_name[f"{stage}[q1]#0"], by_name[f"{stage}[q2]#0"]
        for key in COMPARED:
            assert getattr(recorded, key) == getattr(live, key), (stage, key)
        assert str(recorded.flow_run_id) == flow_run_id
        # the final state, as the UI colours and filters it
        assert (recorded.state_type, recorded.state_name) == (live.state_type, live.state_name)
        assert (recorded.state.type, recorded.state.name) == (live.state.type, live.state.name)
        assert recorded.state.timestamp == recorded.end_time and live.state.timestamp == live.end_time
        details = {run.name: run.state.state_details.model_dump(exclude={"task_run_id"}) for run in (live, recorded)}
        assert details[recorded.name] == details[live.name]
        assert recorded.state.state_details.task_run_id == recorded.id
        assert recorded.estimated_run_time == recorded.total_run_time
        # real times: present, in order, and a run time the UI shows as the duration
        for run in (live, recorded):
            assert all(getattr(run, key) is not None for key in TIMES), (run.name, [getattr(run, k) for k in TIMES])
            assert run.start_time <= run.end_time
            assert run.total_run_time.total_seconds() == pytest.approx(
                (run.end_time - run.start_time).total_seconds(), abs=0.05
            )
        # the task key groups runs of one task in the UI; its shape differs on purpose
        assert live.task_key and recorded.task_key == f"ape.stage.{stage}"
    # the graph's arrow: solve's upstream input is the render run of its own chain, as the engine records it
    for item in ("q1", "q2"):
        solve, render = by_name[f"solve[{item}]#0"], by_name[f"render[{item}]#0"]
        assert by_name[f"render[{item}]#0"].task_inputs == {} or all(
            not v for v in by_name[f"render[{item}]#0"].task_inputs.values()
        )
        upstream = solve.task_inputs.get("wait_for") or solve.task_inputs.get("upstream")
        assert upstream is not None, (item, solve.task_inputs)
        assert [(i.input_type, i.id) for i in upstream] == [("task_run", render.id)], (item, solve.task_inputs)
