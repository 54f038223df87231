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

The stages report to their session's :class:`StageRecorder` through its one context
manager, :meth:`StageRecorder.stage` (bound to the solver thread by the flow, found by
``ape.tasks.session.recorder.current_recorder``, also inside a stage's task run); its
clock, present only when the chain is recorded, times the stages, so the chain itself
keeps no clock and reports the same way at either task granularity.

The contract: what the server builds from these events equals what it builds from
Prefect's own task engine for the same chain (name, state type and name, times, flow run,
run counts, tags, labels, retry policy, state details, and the upstream arrow), checked by
``tests/integration/test_stage_run_contract.py``, last against Prefect 3.9.1; CI installs
the newest Prefect that ``pyproject.toml`` allows (3.9 up to 4), so a release that changes
the event schema fails that test before it shows in the UI. Two differences are deliberate: the
``task_key`` (``ape.stage.<stage>``, so the UI groups a stage's runs over a run), and the
upstream input's name (``upstream``; the engine names it after the parameter, or
``wait_for``), which the UI's graph draws alike.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from prefect.events import emit_event

from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome
from ape.schemas.transcript import SolveRecord
from ape.tasks.storage.prefect_internals import task_run_event

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
    # what "now" is: the wall clock while a session runs; a chain rebuilt later from saved
    # results (ape.tasks.recording.afterwards) sets its own
    now: Callable[[], float] = time.time

    def mark(
        self, stage: str, state_type: str = "COMPLETED", state_name: str = "Completed", message: str | None = None
    ) -> StageMark:
        """Close ``stage``: it ran from the previous mark until now."""
        now = self.now()
        mark = StageMark(stage, self.last, now, state_type, state_name, message)
        self.marks.append(mark)
        self.last = now
        return mark

    def failed(self, stage: str, message: str) -> StageMark:
        return self.mark(stage, "FAILED", "Failed", message)

    def skipped(self, stage: str, message: str) -> StageMark:
        now = self.now()
        mark = StageMark(stage, now, now, "COMPLETED", "Skipped", message)
        self.marks.append(mark)
        return mark


def mark_adapt(clock: StageClock, record: SolveRecord, solve_failed: bool, message: str | None = None) -> None:
    """Close the adapt stage on ``clock`` with the state its outcome deserves (``message``
    goes with a plain Completed one)."""
    if solve_failed:
        clock.skipped("adapt", "the solve stage failed")
    elif record.outcome is Outcome.ERROR:
        error = record.error
        clock.failed("adapt", f"{error.type}: {error.message}" if error else "model error")
    elif record.outcome is Outcome.PARSING_FAILED:
        error = record.error
        clock.failed("adapt", "parse failure" + (f": {error.message}" if error else ""))
    elif record.outcome is Outcome.GAVE_UP:
        clock.mark("adapt", state_name="Gave up", message="the answer contained I_GIVE_UP")
    elif record.outcome is Outcome.TRUNCATED:
        reason = f" ({record.stop_reason})" if record.stop_reason else ""
        clock.mark(
            "adapt",
            state_name="Truncated",
            message=f"the answer was cut at the token limit{reason}; raise [model] max_tokens",
        )
    else:
        clock.mark("adapt", message=message)


def close_chain(clock: StageClock, outcome: Outcome, check: CheckResult | None, score: float | None) -> None:
    """Mark the check and score stages: a checker that raised is Failed, a wrong answer
    Completed as ``Incorrect`` (a result, not a failure), an unchecked session Skipped."""
    if check is None:
        clock.skipped("check", f"no solution to check ({outcome.value})")
    elif check.status is CheckStatus.ERROR:
        error = check.error
        clock.failed("check", f"check error: {error.line()}" if error else "check error")
    elif check.status is CheckStatus.FAILED:
        reason = check.metadata.get("reason") if isinstance(check.metadata, dict) else None
        clock.mark("check", state_name="Incorrect", message=str(reason) if reason else None)
    else:
        clock.mark("check", state_name="Passed")
    clock.mark("score", message=None if score is None else f"score {score:g}")


@dataclass
class StageEnd:
    """What a stage's body tells :meth:`StageRecorder.stage`: its result, and whether it
    came from the run's cache."""

    result: Any = None
    cached: bool = False


# watches a running session (flow run id, item id, run index, start) so a slow one shows
# as Running (``ape.tasks.recording.server.SlowSessions.watch``)
Watch = Callable[[str | None, str, int, float], AbstractContextManager[None]]


class StageRecorder:
    """What one session's stages report as they end, kept out of the chain itself.

    Two things are kept: how many live Prefect task runs the session created (the
    server is waited on for them, ``ape.tasks.recording.server``), and, when the session's
    stages are recorded as task runs (``clock`` set), the stage clock those records are
    made from. Without a clock every stage report is a no-op, so the chain reports the
    same way whether or not its stages are recorded.

    The chain reports through :meth:`stage` alone (the interface
    ``ape.tasks.session.recorder.StageRecorder``); the plain methods below are what it marks
    with, also used to rebuild a saved session's chain (``ape.tasks.recording.afterwards``).
    """

    def __init__(
        self,
        clock: StageClock | None = None,
        *,
        session: tuple[str | None, str, int] | None = None,
        watch: Watch | None = None,
    ) -> None:
        self.clock = clock
        self.task_runs = 0
        self.session_mark: StageMark | None = None  # the session's own task run, when recorded
        self._where = session  # (flow run id, item id, run index), for the slow-session watch
        self._watch = watch
        self._check: CheckResult | None = None  # the check stage's verdict, marked with the score

    @contextmanager
    def stage(self, name: str, *, task_runs: int = 0, live: bool = False, **facts: Any) -> Iterator[StageEnd]:
        """The stage ``name`` runs inside the block: its start, end and state are marked from
        the result the block sets (``end.result``, ``end.cached``) or the exception it raises.

        ``task_runs``: the live task runs the stage creates, counted when it ends. ``live``:
        the block calls a live task run whose own stages report inside it; only counted,
        and when it came from the cache its solve and adapt are marked as the cache's.
        ``facts``: ``message``; ``solve_failed`` (adapt); ``outcome`` (score). Check and score
        are marked together when score ends (:func:`close_chain`), as they always were.
        """
        end = StageEnd()
        started = time.time()
        if name == "check" and not live and self.clock is not None:
            self.clock.last = self.clock.now()  # what ran since adapt ended is not the check's
        if name == "session" and not live:
            try:
                with self._watching(started):
                    yield end
            except Exception as exc:
                self.session(started, "FAILED", "Failed", f"{type(exc).__name__}: {exc}")
                raise
            self._close_session(started, end)
            return
        yield end
        self.ran(task_runs)
        if live:
            if end.cached:
                self.from_cache(end.result)
        elif name == "render":
            self.rendered()
        elif name == "solve":
            self.solved(getattr(end.result, "error", None), facts.get("message"))
        elif name == "adapt":
            self.adapted(end.result, bool(facts.get("solve_failed")), facts.get("message"))
        elif name == "check":
            self._check = end.result
        elif name == "score":
            self.scored(facts["outcome"], self._check, end.result)

    def _watching(self, started: float) -> AbstractContextManager[None]:
        if self._watch is None or self._where is None:
            return nullcontext()
        flow_run_id, item_id, run_index = self._where
        return self._watch(flow_run_id, item_id, run_index, started)

    def _close_session(self, started: float, end: StageEnd) -> None:
        """The session's own task run: Cached, Failed (its result an exception: a session
        that ended ERROR) or Completed."""
        if end.cached:
            self.from_cache(end.result)
            self.session(started, "COMPLETED", "Cached")
        elif isinstance(end.result, BaseException):
            self.session(started, "FAILED", "Failed", str(end.result))
        else:
            self.session(started, "COMPLETED", "Completed")

    def session(self, start: float, state_type: str, state_name: str, message: str | None = None) -> None:
        """The session's solve -> adapt ran as a plain call from ``start`` until now: its task
        run is recorded (one event, sent with the chain) instead of run through the engine."""
        self.session_mark = StageMark("session", start, time.time(), state_type, state_name, message)

    def ran(self, task_runs: int = 1) -> None:
        """The chain created ``task_runs`` more live task runs."""
        self.task_runs += task_runs

    def rendered(self) -> None:
        if self.clock is not None:
            self.clock.mark("render")

    def solved(self, error: ErrorInfo | None, message: str | None = None) -> None:
        """The solve stage ended, failed when it ended with ``error``."""
        if self.clock is None:
            return
        if error is not None:
            self.clock.failed("solve", f"{error.type}: {error.message}")
        else:
            self.clock.mark("solve", message=message)

    def adapted(self, record: SolveRecord, solve_failed: bool, message: str | None = None) -> None:
        if self.clock is not None:
            mark_adapt(self.clock, record, solve_failed, message)

    def from_cache(self, record: SolveRecord) -> None:
        """Solve and adapt came from the run's cache (no model call)."""
        if self.clock is None:
            return
        self.clock.mark("solve", state_name="Cached", message="generation from the run's cache")
        if record.outcome is Outcome.PARSING_FAILED:
            mark_adapt(self.clock, record, solve_failed=False)  # still a parse failure
        else:
            self.clock.mark("adapt", state_name="Cached")

    def checking(self) -> None:
        """The check stage starts now (what ran since adapt ended is not the check's)."""
        if self.clock is not None:
            self.clock.last = self.clock.now()

    def scored(self, outcome: Outcome, check: CheckResult | None, score: float | None) -> None:
        """Check and score ended (see :func:`close_chain`)."""
        if self.clock is not None:
            close_chain(self.clock, outcome, check, score)

    @property
    def marks(self) -> list[StageMark]:
        return self.clock.marks if self.clock is not None else []


def stage_run_id(flow_run_id: str, item_id: str, run_index: int, stage: str) -> uuid.UUID:
    """Stable id of a recorded stage run: the same flow run, item, run and stage."""
    return uuid.uuid5(_NAMESPACE, f"{flow_run_id}/{item_id}#{run_index}/{stage}")


def _task_run_event(
    flow_run_id: str,
    item_id: str,
    run_index: int,
    mark: StageMark,
    upstream: uuid.UUID | None,
    tags: tuple[str, ...],
    *,
    running: bool = False,
    parent: uuid.UUID | None = None,
) -> dict[str, Any]:
    """The ``emit_event`` arguments of one task run's state: its final state (from ``mark``),
    or with ``running`` the Running state it is in since ``mark.start``. ``parent``: the task
    run it is nested in (``__parents__``, as the engine records a task called inside a task)."""
    run_id = stage_run_id(flow_run_id, item_id, run_index, mark.stage)
    name = f"{mark.stage}[{item_id}]#{run_index}"
    inputs: dict[str, list[dict[str, str]]] = {}
    if upstream:
        inputs["upstream"] = [{"input_type": "task_run", "id": str(upstream)}]
    if parent:
        inputs["__parents__"] = [{"input_type": "task_run", "id": str(parent)}]
    state_type, state_name = ("RUNNING", "Running") if running else (mark.state_type, mark.state_name)
    message = "" if running else mark.message or ""
    at = time.time() if running else mark.end
    return task_run_event(
        flow_run_id,
        run_id,
        name=name,
        task_key=f"ape.stage.{mark.stage}",
        dynamic_key=f"{item_id}#{run_index}",
        tags=tags,
        inputs=inputs,
        state=(state_type, state_name, message),
        start=mark.start,
        end=None if running else mark.end,
        at=at,
    )


def stage_run_events(
    flow_run_id: str,
    item_id: str,
    run_index: int,
    marks: list[StageMark],
    tags: tuple[str, ...] = (),
    *,
    nested: bool = False,
) -> list[dict[str, Any]]:
    """The ``emit_event`` arguments that record ``marks`` as task runs of ``flow_run_id``,
    each pointing at the one before it (``upstream``), so the flow run's graph draws the chain.

    ``nested``: the stages are nested in the session's own recorded task run (its id is
    fixed, :func:`stage_run_id` of stage ``session``), as a task called inside a task is.
    The UI's flow-run graph then draws one node per session, the chain folded inside it
    behind the node's toggle, instead of six hairline bars per session side by side
    (docs/server.md); the Task Runs tab and the API list every stage as before.

    Plain dicts (what Prefect's own engine sends for a task run's state change), so the
    function is testable without a server and costs little per stage.
    """
    events = []
    upstream: uuid.UUID | None = None
    session = stage_run_id(flow_run_id, item_id, run_index, "session") if nested else None
    for mark in marks:
        parent = session if mark.stage != "session" else None
        events.append(_task_run_event(flow_run_id, item_id, run_index, mark, upstream, tags, parent=parent))
        upstream = stage_run_id(flow_run_id, item_id, run_index, mark.stage)
    return events


def running_event(flow_run_id: str, item_id: str, run_index: int, stage: str, start: float) -> dict[str, Any]:
    """The ``emit_event`` arguments that show ``stage`` of a session as Running since ``start``
    (a slow session, :class:`SlowSessions`); its final event later updates the same task run."""
    return _task_run_event(flow_run_id, item_id, run_index, StageMark(stage, start, start), None, (), running=True)


def record_stage_runs(
    flow_run_id: str | None, item_id: str, run_index: int, marks: list[StageMark], *, nested: bool = False
) -> int:
    """Send ``marks`` to the Prefect server as task runs; returns how many were sent.
    ``nested``: inside the session's recorded task run (:func:`stage_run_events`).

    Needs a flow run to attach them to; without one (a stage called outside a flow)
    nothing is sent.
    """
    if flow_run_id is None or not marks:
        return 0

    sent = 0
    for event in stage_run_events(flow_run_id, item_id, run_index, marks, nested=nested):
        if emit_event(**event) is not None:
            sent += 1
    return sent
