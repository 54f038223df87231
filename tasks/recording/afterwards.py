"""Record, after the run, the stage chains a run left out of the Prefect UI (``ape record``).

A run leaves a plain chain out while the server is behind (``ape.tasks.recording.server``),
and a whole session (its own task run too) while the server is more than
:data:`~ape.tasks.recording.server.MAX_LAG` task runs behind, and names the session in its
model folder's ``stage_chains.json``; the session's own task run is rebuilt too when the
server does not hold it (:func:`sessions_lacking`). Here each such chain is
rebuilt from the session's saved result and sent as the same task runs the live run
would have sent: the same ids (:func:`~ape.tasks.recording.stage_runs.stage_run_id`, so sending
twice updates the same runs), names, states and flow run. The states come from the same
rules as the live chain (reported to a :class:`~ape.tasks.recording.stage_runs.StageRecorder`,
as the stages report to it); the times are reconstructed from the saved
results, not measured: an item's sessions ran one after another and ended when it was
saved (``saved_at``), each took its solve + adapt time (``latency_s``, shown on the
solve stage; adapt is the instant after it) and its check's ``runtime_s``; render and
score show as instants.

The chains go out in slices, each after the server has caught up to within
:data:`~ape.tasks.recording.MAX_LAG` task runs, so a long list never overflows a local
server's queue; a slice whose task runs the server already holds is not sent again. They
are also paced on the events the server has stored (:mod:`ape.tasks.recording.event_pace`),
so the event persister's queue does not overflow either, and the catch-up ends only once the
server has stored them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ape.schemas.results import Outcome, OutputBatch, SessionResult
from ape.schemas.transcript import SolveRecord
from ape.tasks.recording.event_pace import MAX_EVENT_LAG, EventPace
from ape.tasks.recording.server import (
    FINAL_TYPES,
    MAX_LAG,
    POLL_S,
    WAIT_S,
    TaskRunCounts,
    count_task_runs,
    counting_client,
    poll_server,
)
from ape.tasks.recording.stage_runs import (
    STAGES,
    StageClock,
    StageMark,
    StageRecorder,
    record_stage_runs,
    stage_run_id,
)
from ape.tasks.storage import prefect_api
from ape.tasks.storage.save import read_batches
from ape.tasks.storage.stage_chains import FlowRunChains

SLICE = 200  # sessions sent between two looks at the server (1,000 task runs)


def session_marks(session: SessionResult, end: float) -> list[StageMark]:
    """The five stage marks of a saved session that ended at ``end`` (epoch seconds), reported
    to a :class:`StageRecorder` as the live chain reports them, on a clock set from the
    saved times."""
    check_s = session.check.runtime_s if session.check is not None else 0.0
    start = end - max(0.0, session.latency_s) - max(0.0, check_s)
    now = [start]  # the moment each stage ends, set as the chain is rebuilt
    clock = StageClock(last=start, now=lambda: now[0])
    recorder = StageRecorder(clock)
    recorder.rendered()
    now[0] = start + max(0.0, session.latency_s)
    record = SolveRecord(outcome=session.outcome, error=session.error)
    # a session that ended ERROR failed in its solve stage (a model error), the usual cause
    solve_failed = session.outcome is Outcome.ERROR
    if session.cached:
        recorder.from_cache(record)
    else:
        if solve_failed and session.error is None:
            clock.failed("solve", "model error")
        else:
            recorder.solved(session.error if solve_failed else None)
        recorder.adapted(record, solve_failed=solve_failed)
    now[0] = end  # the check ran from adapt's end (the clock's last mark) until the session ended
    recorder.scored(session.outcome, session.check, session.score)
    return recorder.marks


def session_mark(chain: list[StageMark]) -> StageMark:
    """The session's own task run of a rebuilt chain, for a session the run left out whole
    (nothing sent while the server was behind): solve -> adapt, as the run records it,
    Cached when its solve came from the cache, else Completed (a session that raised was
    always sent by the run)."""
    by_stage = {mark.stage: mark for mark in chain}
    solve, adapt = by_stage["solve"], by_stage["adapt"]
    name = "Cached" if solve.state_name == "Cached" else "Completed"
    return StageMark("session", solve.start, adapt.end, "COMPLETED", name)


def sessions_lacking(flow_run_id: str, sessions: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """The sessions whose own task run the server does not hold in a final state (their fixed
    ids asked for by id, at most a slice of :data:`SLICE` at a time). Why final: a slow session
    is shown Running while it goes (``SlowSessions``), and one that then ended with the server
    far behind, or in a process that was killed, sent no final state; sent now, its fixed id
    updates the Running one instead of leaving it open for good."""
    ids = {str(stage_run_id(flow_run_id, key, index, "session")): (key, index) for key, index in sessions}
    body = {"task_runs": {"id": {"any_": list(ids)}, "state": {"type": {"any_": list(FINAL_TYPES)}}}, "limit": len(ids)}
    with prefect_api.sync_client() as client:
        response = client.request("POST", "/task_runs/filter", json=body)
    response.raise_for_status()
    held = {str(run["id"]) for run in response.json()}
    return {session for task_run_id, session in ids.items() if task_run_id not in held}


def chains_held(flow_run_id: str, sessions: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """The sessions whose chain the server holds in ``flow_run_id`` under any id: its score
    stage's task run in a final state, asked for by name, a slice of :data:`SLICE` at a time
    (one the server holds still Running lost its end with the killed process: sent again).

    Why by name: a run killed mid-run names every session it saved (``note_interrupted``), also
    those whose chain went live, and at stage granularity those chains are Prefect's own task
    runs, whose ids are not the fixed ones; sending them again would show them twice."""
    held: set[tuple[str, int]] = set()
    with prefect_api.sync_client() as client:
        for first in range(0, len(sessions), SLICE):
            names = {f"score[{key}]#{index}": (key, index) for key, index in sessions[first : first + SLICE]}
            body = {
                "flow_runs": {"id": {"any_": [flow_run_id]}},
                "task_runs": {"name": {"any_": list(names)}, "state": {"type": {"any_": list(FINAL_TYPES)}}},
                "limit": len(names),
            }
            response = client.request("POST", "/task_runs/filter", json=body)
            response.raise_for_status()
            held.update(names[run["name"]] for run in response.json() if run.get("name") in names)
    return held


def rebuild(results: Path, wanted: Iterable[tuple[str, int]]) -> dict[tuple[str, int], list[StageMark]]:
    """(item id, run index) -> the rebuilt marks of each wanted session found in ``results``
    (the item's last saved batch; sessions not in the file are left out of the answer)."""
    wanted = set(wanted)
    items = {key for key, _ in wanted}
    latest: dict[str, OutputBatch] = {}
    for batch in read_batches(results):
        if batch.item_id in items:
            latest[batch.item_id] = batch
    marks: dict[tuple[str, int], list[StageMark]] = {}
    for batch in latest.values():
        end = batch.saved_at.timestamp()
        for session in sorted(batch.sessions, key=lambda s: s.run_index, reverse=True):
            chain = session_marks(session, end)
            end = chain[0].start  # the session before this one ended when it started
            if (batch.item_id, session.run_index) in wanted:
                marks[(batch.item_id, session.run_index)] = chain
    return marks


def flow_run_known(flow_run_id: str) -> bool:
    """Whether the server holds the flow run ``flow_run_id``."""
    with prefect_api.sync_client() as client:
        try:
            response = client.request("GET", "/flow_runs/{id}", path_params={"id": flow_run_id})
        except Exception as exc:  # Prefect's client raises on 4xx answers
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                return False
            raise
        return response.status_code == 200


@dataclass
class ChainsSent:
    """What ``ape record`` did for one flow run: the chains it sent and the server holds."""

    flow_run_id: str
    sessions: int = 0  # chains rebuilt and on the server
    task_runs: int = 0  # stage task runs sent
    missing: list[tuple[str, int]] = field(default_factory=list)  # no saved result to rebuild from
    complete: bool = True  # the server held every chain when the wait ended


def record_flow_run(
    entry: FlowRunChains,
    results: Path,
    on_progress: Callable[[str], None],
    wait_s: float = WAIT_S,
    on_sent: Callable[[int], None] | None = None,
) -> ChainsSent:
    """Send the chains ``entry`` left out, rebuilt from ``results``, and wait until the
    server holds them in a final state (at most ``wait_s``), with a progress line;
    ``on_sent`` hears of each slice of sessions done (sent, or found held already)."""
    flow_run_id = entry.flow_run_id
    wanted = [(s.item_id, s.run_index) for s in entry.left_out]
    marks = rebuild(results, wanted)
    done = ChainsSent(flow_run_id, missing=[key for key in wanted if key not in marks])
    counts = TaskRunCounts(count_task_runs, background=False)
    counts.add(flow_run_id, count_task_runs([flow_run_id], FINAL_TYPES))  # what it holds already
    sessions = [key for key in wanted if key in marks]
    events = _event_pace(flow_run_id, marks, on_progress)
    said = time.monotonic()
    for first in range(0, len(sessions), SLICE):
        batch = sessions[first : first + SLICE]
        ids = [str(stage_run_id(flow_run_id, key, index, stage)) for key, index in batch for stage in STAGES]
        held = count_task_runs([flow_run_id], FINAL_TYPES, task_run_ids=ids)
        if held < len(ids):  # not sent before (or only in part): send the slice
            counts.throttle(max_lag=MAX_LAG)
            events.wait(MAX_EVENT_LAG)  # the event persister, the broker's slower consumer
            lacking = sessions_lacking(flow_run_id, batch)  # left out whole while the server was behind
            before = done.task_runs
            for key, index in batch:
                chain = marks[(key, index)]
                if (key, index) in lacking:
                    done.task_runs += record_stage_runs(flow_run_id, key, index, [session_mark(chain)])
                # nested in the session's task run (a fixed id), as the run nests them
                done.task_runs += record_stage_runs(flow_run_id, key, index, chain, nested=True)
            counts.add(flow_run_id, len(ids) - held + len(lacking))
            events.add(done.task_runs - before)  # one event per task run sent
        if on_sent is not None:
            on_sent(len(batch))
        if time.monotonic() - said >= 5.0:
            on_progress(f"sent {min(first + SLICE, len(sessions))}/{len(sessions)} chains of flow run {flow_run_id}")
            said = time.monotonic()
    done.complete = _wait(counts, flow_run_id, wait_s, on_progress)
    if done.complete and events.sent:
        _wait_for_events(events, wait_s, on_progress)
    done.sessions = len(sessions) if done.complete else 0
    return done


def _event_pace(
    flow_run_id: str, marks: dict[tuple[str, int], list[StageMark]], on_progress: Callable[[str], None]
) -> EventPace:
    """The pacing on stored events of one flow run's catch-up, its baseline taken. The events
    carry the stages' own times, so the count reaches back to the earliest stage rebuilt (a
    minute more for clocks), whatever day that was."""
    first = min((mark.start for chain in marks.values() for mark in chain), default=time.time())
    since = datetime.fromtimestamp(first - 60.0, tz=UTC)
    client = counting_client()
    pace = EventPace(
        lambda: prefect_api.count_flow_run_events(client, flow_run_id, since),
        on_progress,
        enabled=prefect_api.event_persister_enabled(),
    )
    pace.start()
    return pace


def _wait_for_events(events: EventPace, wait_s: float, on_progress: Callable[[str], None]) -> None:
    """Wait until the server has stored every event sent (the UI's Events feed whole, and
    nothing left in its queue for ``ape server stop`` to lose), at most ``wait_s``, with a
    progress line; a shortfall is said, the task runs stay recorded."""
    stored = events.wait(
        0,
        limit_s=wait_s,
        on_progress=lambda held, sent: on_progress(
            f"Prefect server storing the events: {min(held, sent)}/{sent} task-run events of the flow run"
        ),
    )
    if not stored and events.on:
        on_progress(f"the Prefect server has not stored {events.lag()} of {events.sent} events after {wait_s:.0f} s")
    elif stored:
        on_progress(f"the Prefect server stored all {events.sent} task-run events ({events.polls} counts asked)")


def _wait(counts: TaskRunCounts, flow_run_id: str, wait_s: float, on_progress: Callable[[str], None]) -> bool:
    """Poll until the server holds every task run ``counts`` expects of the flow run in a
    final state, or ``wait_s`` passes; a progress line every 5 s (:func:`poll_server`)."""
    expected = counts.expected([flow_run_id])[flow_run_id]
    polled = poll_server(
        lambda: (count_task_runs([flow_run_id], FINAL_TYPES), 0),
        expected,
        wait_s,
        lambda final, total: on_progress(
            f"Prefect server recording the chains: {final}/{total} task runs of the flow run"
        ),
        open_matters=False,  # task runs the run itself left open are not this command's
        first_delay_s=POLL_S / 4,
    )
    if polled.error is not None:
        raise polled.error
    if not polled.done:
        on_progress(f"the Prefect server has not recorded {expected - polled.final} task runs after {wait_s:.0f} s")
    return polled.done
