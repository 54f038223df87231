"""Each session's stage chain (render -> solve -> adapt -> check -> score) as Prefect task
runs, recorded after the stages ran instead of run through Prefect's task engine.

Why: a live Prefect task run costs the client about 4-5 ms of CPU (engine context,
parameter hashing, three state transitions) and the server three events to record;
five per session made the stage chain the bottleneck of a run (see
benchmarks/README.md). The Prefect server builds its task-run records from
``prefect.task-run.*`` events, so one event per stage, carrying the stage's real start
and end times and its final state, gives the UI the same task run (name, duration,
state, upstream arrow in the graph) for a fraction of the cost. The events go out
through Prefect's own background events worker, batched, off the solver thread.

A stage that went wrong is recorded Failed with the reason as its message: a model
error (solve or adapt), a parse failure (adapt) and a checker that raised (check). A
wrong answer is a result, not a failure: its check is Completed, named ``Incorrect``.
A stage that never ran (check after a failed solve) is Completed, named ``Skipped``.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

STAGES = ("render", "solve", "adapt", "check", "score")
# one namespace for the ids of recorded stage runs, so a rerun of the same flow run
# (a retry) updates the same task runs instead of adding new ones
_NAMESPACE = uuid.UUID("5e3f0d0a-8c2b-4b8e-9a57-6a5e0c1d2b7f")


@dataclass
class StageMark:
    """One stage as it ran: wall-clock start/end (epoch seconds) and its final state."""

    stage: str
    start: float
    end: float
    state_type: str = "COMPLETED"  # a Prefect StateType value
    state_name: str = "Completed"
    message: str | None = None


@dataclass
class StageClock:
    """Collects the marks of one session's stages on the thread that runs them."""

    marks: list[StageMark] = field(default_factory=list)
    last: float = field(default_factory=time.time)

    def mark(
        self, stage: str, state_type: str = "COMPLETED", state_name: str = "Completed", message: str | None = None
    ) -> StageMark:
        """Close ``stage``: it ran from the previous mark until now."""
        now = time.time()
        mark = StageMark(stage, self.last, now, state_type, state_name, message)
        self.marks.append(mark)
        self.last = now
        return mark

    def failed(self, stage: str, message: str) -> StageMark:
        return self.mark(stage, "FAILED", "Failed", message)

    def skipped(self, stage: str, message: str) -> StageMark:
        now = time.time()
        mark = StageMark(stage, now, now, "COMPLETED", "Skipped", message)
        self.marks.append(mark)
        return mark


_local = threading.local()


def start_clock() -> StageClock:
    """A fresh clock for the session about to run on this thread."""
    _local.clock = StageClock()
    return _local.clock


def current_clock() -> StageClock | None:
    """The clock of the session running on this thread (None outside one)."""
    return getattr(_local, "clock", None)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


def stage_run_id(flow_run_id: str, item_id: str, run_index: int, stage: str) -> uuid.UUID:
    """Stable id of a recorded stage run: the same flow run, item, run and stage."""
    return uuid.uuid5(_NAMESPACE, f"{flow_run_id}/{item_id}#{run_index}/{stage}")


def stage_run_events(
    flow_run_id: str, item_id: str, run_index: int, marks: list[StageMark], tags: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The ``emit_event`` arguments that record ``marks`` as task runs of ``flow_run_id``.

    Plain dicts (what Prefect's own engine sends for a task run's state change), so the
    function is testable without a server and costs little per stage.
    """
    events = []
    upstream: uuid.UUID | None = None
    for mark in marks:
        run_id = stage_run_id(flow_run_id, item_id, run_index, mark.stage)
        name = f"{mark.stage}[{item_id}]#{run_index}"
        inputs = {"upstream": [{"input_type": "task_run", "id": str(upstream)}]} if upstream else {}
        task_run = {
            "name": name,
            "task_key": f"ape.stage.{mark.stage}",
            "dynamic_key": f"{item_id}#{run_index}",
            "task_version": None,
            "empirical_policy": {},
            "tags": list(tags),
            "labels": {},
            "task_inputs": inputs,
            "run_count": 1,
            "flow_run_run_count": 1,
            "expected_start_time": _iso(mark.start),
            "start_time": _iso(mark.start),
            "end_time": _iso(mark.end),
            "total_run_time": max(0.0, mark.end - mark.start),
        }
        state: dict[str, Any] = {
            "type": mark.state_type,
            "name": mark.state_name,
            "message": mark.message or "",
            "state_details": {},
            "data": None,
        }
        events.append(
            {
                "event": f"prefect.task-run.{mark.state_name}",
                "id": uuid.uuid4(),
                "occurred": datetime.fromtimestamp(mark.end, tz=UTC),
                "resource": {
                    "prefect.resource.id": f"prefect.task-run.{run_id}",
                    "prefect.resource.name": name,
                    "prefect.run-count": "1",
                    "prefect.state-message": mark.message or "",
                    "prefect.state-name": mark.state_name,
                    "prefect.state-timestamp": _iso(mark.end),
                    "prefect.state-type": mark.state_type,
                    "prefect.orchestration": "client",
                },
                "related": [
                    {"prefect.resource.id": f"prefect.flow-run.{flow_run_id}", "prefect.resource.role": "flow-run"}
                ],
                "payload": {
                    "intended": {"from": None, "to": mark.state_type},
                    "initial_state": None,
                    "validated_state": state,
                    "task_run": task_run,
                },
            }
        )
        upstream = run_id
    return events


def current_flow_run_id() -> str | None:
    """The flow run the calling code belongs to (directly, or through its task run)."""
    from prefect.context import FlowRunContext, TaskRunContext

    task_ctx = TaskRunContext.get()
    if task_ctx is not None and task_ctx.task_run.flow_run_id is not None:
        return str(task_ctx.task_run.flow_run_id)
    flow_ctx = FlowRunContext.get()
    if flow_ctx is not None and flow_ctx.flow_run is not None:
        return str(flow_ctx.flow_run.id)
    return None


def record_stage_runs(flow_run_id: str | None, item_id: str, run_index: int, marks: list[StageMark]) -> int:
    """Send ``marks`` to the Prefect server as task runs; returns how many were sent.

    Needs a flow run to attach them to; without one (a stage called outside a flow)
    nothing is sent.
    """
    if flow_run_id is None or not marks:
        return 0
    from prefect.events import emit_event

    sent = 0
    for event in stage_run_events(flow_run_id, item_id, run_index, marks):
        if emit_event(**event) is not None:
            sent += 1
    return sent
