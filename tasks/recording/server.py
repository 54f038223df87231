"""Make sure the Prefect server has recorded a run before APE says it is done.

Why: a Prefect 3 server builds its task-run records from the events clients send. On a
local ``prefect server start`` those events pass through an in-memory broker whose
queue per consumer holds 10,000 messages; when a run emits faster than the task-run
recorder writes (an instant model, many workers, two cores), the broker drops the
overflow with a "Subscription queue is full" warning and those task runs never appear,
or stay Running for good. Faster server settings (see ``ape.server``) raise the rate the
server keeps up with; this module makes the rest safe:

- a process-wide :class:`TaskRunCounts` (:data:`TASK_RUN_COUNTS`, which no flow knows of)
  counts the task runs
  APE itself created per flow run (each session's live task runs and its recorded stages);
- :func:`server_behind`: while the server is more than :data:`LIVE_MAX_LAG` task runs
  behind (:data:`MAX_LAG` for a flow run's first :data:`CHAIN_FIRST` sessions), a session
  that ends sends nothing and is noted as left out whole (sent after the run by ``ape
  record``, in the background), so the broker's queue never overflows, no solver waits, and
  the run's process spends no time on events the server cannot take in yet;
  :meth:`TaskRunCounts.throttle` holds back only live task runs (stage granularity);
- :func:`wait_until_recorded` runs at the end of a flow: it polls
  ``/task_runs/count`` for those flow runs until every expected task run is there in a
  final state (none Pending or Running), for a few seconds at most (:data:`END_WAIT_S`),
  then hands the rest to the background catch-up (``ape.tasks.recording.catch_up``);
- :func:`keep_chain` decides which sessions' stage chains are recorded: every chain with a
  stage that did not end plainly, every chain of a flow run's first :data:`CHAIN_FIRST`
  sessions (so a small run, the README's example among them, shows all of them), and
  after those a plain one while the server is at most :data:`CHAIN_MAX_LAG` task runs
  behind (the lag a poller thread per process keeps fresh, so no solver thread asks the
  server); the chains left out are counted and named per flow run by its
  :class:`~ape.tasks.recording.RunRecording`, for ``stage_chains.json`` and ``ape record``;
- :func:`session_bookkeeping` does this bookkeeping around one session's chain (for
  :meth:`~ape.tasks.recording.RunRecording.session`, the one way the flows reach it), so
  the chain itself only reports to its :class:`~ape.tasks.recording.stage_runs.StageRecorder`;
  it also sends the session's own task run, recorded when solve -> adapt ran as a plain call;
- :class:`SlowSessions` shows such a session as Running while it is slow;
- :func:`pace_note` is the line a run ends with when the server, not the model, set its
  pace (solvers held back by :meth:`TaskRunCounts.throttle`, or a long end wait).

Everything here is a no-op without an API server (the ephemeral test harness counts too:
it answers the same API).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from prefect.events import emit_event
from prefect.settings import get_current_settings

from ape.tasks.recording.stage_runs import (
    StageClock,
    StageRecorder,
    record_stage_runs,
    running_event,
)
from ape.tasks.storage import prefect_api

log = logging.getLogger("ape")

FINAL_TYPES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
OPEN_TYPES = ("SCHEDULED", "PENDING", "RUNNING", "PAUSED", "CANCELLING")


def _env_int(name: str, default: int) -> int:
    try:
        return max(0, int(os.environ.get(name, "")))
    except ValueError:
        return default


# task runs the server may be behind before solver workers wait for it: each is at most
# three events (a live session: Pending, Running, Completed), so 2,500 keep the broker's
# queue (10,000 per consumer) well below its limit
MAX_LAG = _env_int("APE_RECORD_MAX_LAG", 2500)
# task runs the server may be behind for a session that ends (past its flow run's first
# CHAIN_FIRST, which go live while the server is within MAX_LAG) to send its own task run
# live; further behind, it is left out whole and sent after the run. 500, about two seconds
# of a local server's intake: a server that keeps up is never that far behind (its recorder
# writes once a second), and one that does not no longer takes the run's process's time for
# events it cannot take in yet. At 256 solver workers on the mock (four alternating pairs on
# a quiet machine) results came after 10.5-12.0 s against 13.9-25.9 s at 2,500, the mirror
# complete about as soon after them (docs/server.md, "The whole run in the UI"). At most MAX_LAG.
LIVE_MAX_LAG = min(MAX_LAG, _env_int("APE_RECORD_LIVE_MAX_LAG", 500))
# task runs the server may be behind for a plain stage chain to be recorded (five task
# runs); further behind, plain chains are left out (named in stage_chains.json, recorded
# later by `ape record`) and chains with an unusual stage still go. 100: a run that sends
# up to about 40 task runs a second (6-7 sessions a second with their chains; the server's
# recorder writes once a second, so it is always that far behind) records every chain,
# and a faster one goes at its sessions' pace instead of its chains': on two cores the
# server shares the CPU with the run and takes in about 245 task-run events a second, so
# at 2,000 a run of 640 sessions at 64 workers waited 9.5 s at its end for its chains and
# took 4.3x its ideal time, at 100 1.0-2.7 s and 1.84-2.26x (docs/performance.md).
# 0 records no plain chain (CHAIN_FIRST included).
CHAIN_MAX_LAG = _env_int("APE_CHAIN_MAX_LAG", 100)
# the first sessions of each evaluate flow run (per process) whose chains are recorded
# whatever the lag: a run of up to this many sessions per model (the README's example:
# 90 per model) records every chain and says nothing about chains left out, for an end
# wait of a second or two (docs/server.md); past it, the lag rule above
CHAIN_FIRST = _env_int("APE_CHAIN_FIRST", 200)
# how long `ape record` (the catch-up after a run) waits for the server, at most (seconds)
WAIT_S = float(_env_int("APE_RECORD_WAIT_S", 300))
# how long the end of a run waits for the server, at most (seconds): a run the server keeps up
# with is held within its recorder's next flush (about a second) and ends fully recorded; what
# is still missing after this goes to the background catch-up (docs/server.md), so the model,
# not the server, sets the run's pace
END_WAIT_S = float(_env_int("APE_RECORD_END_WAIT_S", 5))
# the seconds of waiting for the server (solvers held back, or the end of the run) from which
# the run says the server set its pace: a run the server keeps up with ends within its
# recorder's next flush, about a second
PACE_NOTE_S = 5.0
PACE_DOC = 'docs/server.md, "Where the line is"'
POLL_S = 1.0


@dataclass(frozen=True)
class ServerHeld:
    """What the server held for the run's flow runs when the wait ended."""

    expected: int
    final: int
    open: int
    waited_s: float

    @property
    def missing(self) -> int:
        """Expected task runs not on the server in a final state."""
        return max(0, self.expected - self.final)

    @property
    def complete(self) -> bool:
        return self.missing == 0 and self.open == 0


def count_task_runs(
    flow_run_ids: Iterable[str], state_types: Iterable[str], task_run_ids: Iterable[str] | None = None
) -> int:
    """Task runs of ``flow_run_ids`` in one of ``state_types`` (of those, only the ones
    ``task_run_ids`` names, when given), as the API server counts them."""

    task_runs: dict[str, Any] = {"state": {"type": {"any_": list(state_types)}}}
    if task_run_ids is not None:
        task_runs["id"] = {"any_": list(task_run_ids)}
    body = {"flow_runs": {"id": {"any_": list(flow_run_ids)}}, "task_runs": task_runs}
    response = counting_client().request("POST", "/task_runs/count", json=body)
    response.raise_for_status()
    return int(response.json())


_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def counting_client() -> Any:
    """One started Prefect client per API address and credentials, kept for the process.

    Why: the counts are polled several times a second at the end of a run and while the
    server is behind, and each new client built its own TLS context and HTTP pool (a
    fifth of the end-of-run wait's CPU under ``py-spy``, issue 46). httpx's client is safe
    to share between threads. The key holds what decides where and how it connects, so a
    changed ``PREFECT_API_URL`` (another server) gets its own client.
    """
    api = get_current_settings().api
    auth = api.auth_string.get_secret_value() if api.auth_string is not None else None
    token = api.key.get_secret_value() if api.key is not None else None
    key = (api.url, auth, token, api.tls_insecure_skip_verify, api.ssl_cert_file)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            while len(_CLIENTS) >= 4:  # keep a few: the oldest goes
                _CLIENTS.pop(next(iter(_CLIENTS))).__exit__(None, None, None)
            client = prefect_api.sync_client()
            client.__enter__()
            _CLIENTS[key] = client
    return client


@dataclass
class ChainTally:
    """The stage chains of one flow run: how many were recorded, and the sessions
    (item id, run index) whose chain was left out while the server was behind."""

    recorded: int = 0
    left_out: list[tuple[str, int]] = field(default_factory=list)

    def add(self, item_id: str, run_index: int, recorded: bool) -> None:
        if recorded:
            self.recorded += 1
        else:
            self.left_out.append((item_id, run_index))


class TaskRunCounts:
    """Task runs this process created, per flow run, what the server last held of them, and
    how many sessions' chains were judged per flow run (for :data:`CHAIN_FIRST`: counted per
    process, not per :class:`~ape.tasks.recording.RunRecording`, because a Dask worker makes one
    recording per item it runs). Which chains were recorded or left out is the recording's.

    The server is asked from two places, one at a time and at most once a :data:`POLL_S`:
    a daemon thread, running while task runs are expected and the last count puts the
    server more than half :data:`CHAIN_MAX_LAG` behind, so :func:`keep_chain` reads a fresh lag
    without a solver thread making a request; and :meth:`throttle`, the one place a solver
    waits.
    """

    def __init__(
        self,
        counter: Callable[[Iterable[str], Iterable[str]], int] = count_task_runs,
        *,
        background: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._expected: dict[str, int] = {}
        self._sessions: dict[str, int] = {}  # chains judged so far, per flow run
        self._recorded = 0
        self._polled_at = 0.0
        self._held = 0  # solver threads waiting in throttle() now
        self._held_since = 0.0
        self._held_s = 0.0  # wall seconds, before the present wait, with a solver held back
        self._background = background
        self._poller: threading.Thread | None = None
        self.counter = counter

    def add(self, flow_run_id: str | None, task_runs: int) -> None:
        """Note ``task_runs`` more task runs of ``flow_run_id`` (sent or about to be)."""
        if flow_run_id is None or task_runs <= 0:
            return
        with self._lock:
            self._expected[flow_run_id] = self._expected.get(flow_run_id, 0) + task_runs
            if self._background and self._poller is None:
                self._poller = threading.Thread(target=self._poll_loop, name="ape-task-run-counts", daemon=True)
                self._poller.start()

    def first_chain(self, flow_run_id: str | None, first: int | None = None) -> bool:
        """Count one more chain judged for ``flow_run_id``; whether it is among the first
        ``first`` (:data:`CHAIN_FIRST`) of that flow run in this process, which are recorded
        whatever the server's lag."""
        limit = CHAIN_FIRST if first is None else first
        if flow_run_id is None or limit <= 0:
            return False
        with self._lock:
            seen = self._sessions.get(flow_run_id, 0) + 1
            self._sessions[flow_run_id] = seen
        return seen <= limit

    def expected(self, flow_run_ids: Iterable[str] | None = None) -> dict[str, int]:
        with self._lock:
            wanted = self._expected if flow_run_ids is None else {k: self._expected.get(k, 0) for k in flow_run_ids}
            return dict(wanted)

    def forget(self, flow_run_ids: Iterable[str]) -> None:
        """Drop finished flow runs (a served deployment runs many in one process)."""
        with self._lock:
            for key in flow_run_ids:
                self._expected.pop(key, None)
                self._sessions.pop(key, None)
            # the last count covered the dropped runs too: until the next poll, take the
            # server to hold none of the others (a lag too high, never too low)
            self._recorded = 0
            self._polled_at = 0.0
            self._held_s = 0.0

    def _poll(self) -> None:
        """Refresh the recorded count (one thread at a time; the others keep the last one)."""
        if not self._poll_lock.acquire(blocking=False):
            return
        try:
            if time.monotonic() - self._polled_at < POLL_S:  # another thread just asked
                return
            ids = list(self.expected())
            if ids:
                self._recorded = self.counter(ids, FINAL_TYPES)
            self._polled_at = time.monotonic()
        except Exception:  # the server is busy or gone: don't stop the run for it
            log.debug("counting task runs failed", exc_info=True)
            self._polled_at = time.monotonic()
        finally:
            self._poll_lock.release()

    def _poll_loop(self) -> None:
        """The background poller: ends when no task runs are expected (started again by
        :meth:`add`); asks only while the last count leaves the server over half the chain
        budget, so a run well within it costs the server no requests, and a run the server
        keeps up with has its lag refreshed before it reaches the budget."""
        while True:
            time.sleep(POLL_S)
            with self._lock:
                if not self._expected:
                    self._poller = None
                    return
            if self.lag() > CHAIN_MAX_LAG // 2:
                self._poll()

    def lag(self) -> int:
        """Task runs created here that the server had not recorded at the last poll."""
        with self._lock:
            total = sum(self._expected.values())
        return total - self._recorded

    def throttle(self, max_lag: int = MAX_LAG, limit_s: float = 60.0) -> float:
        """Wait while the server is more than ``max_lag`` task runs behind; the seconds waited.

        Cheap when it is not: the server is asked at most once a second, and only once the
        run has created more than ``max_lag`` task runs.
        """
        if max_lag <= 0 or self.lag() <= max_lag:
            return 0.0
        started = time.monotonic()
        self._hold(True)
        try:
            while time.monotonic() - started < limit_s:
                if time.monotonic() - self._polled_at >= POLL_S:
                    self._poll()
                if self.lag() <= max_lag:
                    break
                time.sleep(0.05)
        finally:
            self._hold(False)
        return time.monotonic() - started

    def _hold(self, entering: bool) -> None:
        """A solver thread starts or stops waiting in :meth:`throttle`; the clock of
        :meth:`held_s` runs while at least one waits."""
        now = time.monotonic()
        with self._lock:
            if entering:
                if self._held == 0:
                    self._held_since = now
                self._held += 1
            else:
                self._held -= 1
                if self._held == 0:
                    self._held_s += now - self._held_since

    def held_s(self) -> float:
        """Wall seconds during which the server held the run back (at least one solver
        waited for it to catch up), since this process started or last :meth:`forget`."""
        with self._lock:
            ongoing = time.monotonic() - self._held_since if self._held else 0.0
            return self._held_s + ongoing


# process-wide on purpose, and known to no flow (they talk to a RunRecording): the server's
# event queue is shared by every flow run of this process (a benchmark's model flows side by
# side, a served deployment's many runs), so the throttle, the chain budget and a parent
# flow's end wait must see all of their task runs
TASK_RUN_COUNTS = TaskRunCounts()

# the states of a stage that ended plainly; a chain with any other is always recorded
PLAIN_STATES = ("Completed", "Passed", "Cached")


def plain_chain(marks: Iterable[Any]) -> bool:
    """Every stage of the chain ended plainly (no failure, wrong answer, skip or give-up)."""
    return all(m.state_type == "COMPLETED" and m.state_name in PLAIN_STATES for m in marks)


def keep_chain(marks: Iterable[Any], lag: int, max_lag: int | None = None, *, first: bool = False) -> bool:
    """Whether a session's stage chain is recorded now: always when a stage did not end
    plainly; else when it is among its flow run's first :data:`CHAIN_FIRST` (``first``), or
    while the server is at most ``max_lag`` (:data:`CHAIN_MAX_LAG`) task runs behind
    (``lag``); a budget of 0 records no plain chain, the first ones included."""
    budget = CHAIN_MAX_LAG if max_lag is None else max_lag
    return not plain_chain(marks) or (budget > 0 and (first or lag <= budget))


class SlowSessions:
    """Shows a recorded session that is still running after :data:`RUNNING_AFTER_S` as
    Running in the UI: one more event, for slow sessions only.

    A session at the default granularity is recorded when it ends (one event). One daemon
    thread per process looks at the open sessions twice a second and sends a Running event
    for each that has run longer than the threshold; its final event later updates the
    same task run. The entry leaves under the lock before the final event is sent, so a
    Running event never follows the final one.
    """

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._lock = threading.Lock()
        self._open: dict[int, tuple[str, str, int, float]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None
        self.announced = 0  # Running events sent (tests, and the run's own numbers)

    @contextmanager
    def watch(self, flow_run_id: str | None, item_id: str, run_index: int, start: float) -> Iterator[None]:
        """While the block runs, the session may be shown as Running (nothing without a flow run)."""
        if flow_run_id is None:
            yield
            return
        with self._lock:
            token = self._next
            self._next += 1
            self._open[token] = (flow_run_id, item_id, run_index, start)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ape-slow-sessions", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._open.pop(token, None)

    def _loop(self) -> None:
        while True:
            time.sleep(min(0.5, self.after_s))
            now = time.time()
            with self._lock:
                due = [(token, entry) for token, entry in self._open.items() if now - entry[3] >= self.after_s]
                for token, (flow_run_id, item_id, run_index, start) in due:
                    del self._open[token]  # announced once
                    try:
                        emit_event(**running_event(flow_run_id, item_id, run_index, "session", start))
                        self.announced += 1
                    except Exception:  # the UI misses one Running state; the run goes on
                        log.debug("could not send a Running event", exc_info=True)


# a session running longer than this shows as Running in the UI before it ends (seconds)
RUNNING_AFTER_S = float(os.environ.get("APE_SESSION_RUNNING_AFTER_S") or 3.0)
# process-wide on purpose, and known to no flow: one watcher thread serves every session of
# every flow run here (its recorder's ``session`` stage watches), instead of one per flow run
SLOW_SESSIONS = SlowSessions(RUNNING_AFTER_S)


def server_behind(max_lag: int | None = None) -> bool:
    """Whether the server is more than ``max_lag`` (:data:`LIVE_MAX_LAG`) task runs behind this process (at the
    last poll): a session ending now leaves its task runs out, to be sent after the run
    (``ape.tasks.recording.afterwards``), instead of adding to a queue that would overflow."""
    limit = LIVE_MAX_LAG if max_lag is None else max_lag
    return limit > 0 and TASK_RUN_COUNTS.lag() > limit


@contextmanager
def session_bookkeeping(
    flow_run_id: str | None,
    note: Callable[[str | None, str, int, bool], None],
    item_id: str,
    run_index: int,
    record_stages: bool,
    *,
    live_stages: bool = False,
) -> Iterator[StageRecorder]:
    """The bookkeeping around one session's chain, which runs inside the ``with`` block.

    Before: make a fresh recorder, with a stage clock when ``record_stages`` (the caller
    binds it to the thread the chain runs on: ``ape.tasks.session.recorder.recording_to``).
    After: send the session's recorded task run (also when the chain raised) and the
    recorded stage runs when :func:`keep_chain` keeps them, note the chain as recorded or
    left out, and count every task run the session created in :data:`TASK_RUN_COUNTS`.
    Each chain is noted through ``note`` (flow run id, item id, run index, recorded):
    counted in this process, or collected for the flow's process
    (:class:`~ape.tasks.recording.RunRecording`). A session that raised counts only its
    recorded task run. ``live_stages``: the stages ran as live task runs (stage
    granularity), so the chain counts as recorded.

    No solver waits for the server: a session that ends while the server is more than
    :data:`LIVE_MAX_LAG` task runs behind (:func:`server_behind`; :data:`MAX_LAG` for its flow
    run's first :data:`CHAIN_FIRST` sessions) sends nothing, and is noted as
    left out whole, its own task run included; ``ape record`` (run in the background after
    the run, docs/server.md) sends it from the saved result. Only live task runs (stage
    granularity), which Prefect's engine sends and nothing can send later, still wait
    (:meth:`TaskRunCounts.throttle`).
    """
    if live_stages:
        TASK_RUN_COUNTS.throttle()
    first = TASK_RUN_COUNTS.first_chain(flow_run_id)  # among its flow run's first sessions: live
    recorder = StageRecorder(
        StageClock() if record_stages else None, session=(flow_run_id, item_id, run_index), watch=SLOW_SESSIONS.watch
    )
    raised, left_whole = True, False
    try:
        yield recorder
        raised = False
    finally:  # the session's own task run, recorded: every session keeps it, one that raised too
        left_whole = recorder.session_mark is not None and not raised and server_behind(MAX_LAG if first else None)
        if recorder.session_mark is not None and not left_whole:
            sent = record_stage_runs(flow_run_id, item_id, run_index, [recorder.session_mark])
            recorder.ran(sent)
            TASK_RUN_COUNTS.add(flow_run_id, sent)
            recorder.task_runs -= sent  # counted now; the rest of the chain is counted below
    if left_whole:  # nothing sent: the whole session goes after the run
        note(flow_run_id, item_id, run_index, False)
        TASK_RUN_COUNTS.add(flow_run_id, recorder.task_runs)
        return
    if recorder.clock is not None and recorder.marks:
        kept = keep_chain(recorder.marks, TASK_RUN_COUNTS.lag(), first=first)
        if kept:
            nested = recorder.session_mark is not None  # in the session's recorded task run
            recorder.ran(record_stage_runs(flow_run_id, item_id, run_index, recorder.marks, nested=nested))
        note(flow_run_id, item_id, run_index, kept)
    elif live_stages:
        note(flow_run_id, item_id, run_index, True)
    TASK_RUN_COUNTS.add(flow_run_id, recorder.task_runs)


@dataclass(frozen=True)
class Polled:
    """How one wait for the server ended: the last counts (-1: never counted) and whether
    it ended because the server held everything."""

    final: int
    open: int
    waited_s: float
    done: bool
    error: Exception | None = None


def poll_server(
    count: Callable[[], tuple[int, int]],
    expected: int,
    wait_s: float,
    progress: Callable[[int, int], None],
    *,
    open_matters: bool = True,
    first_delay_s: float = 0.1,
) -> Polled:
    """The one loop that waits for the server: ``count()`` gives (final, open) task runs
    until ``expected`` are final (and, with ``open_matters``, none open) or ``wait_s``
    passes; ``progress(final, expected)`` after 2 s and then every 5 s. Short polls first: a
    run the server kept up with is done at the recorder's next flush (within a second),
    and a whole-second poll would add up to a second to every run. A count that raises
    ends the wait (``error``): a server gone away is reported, not waited on."""
    started = time.monotonic()
    final = open_ = -1
    say_at = started + 2.0  # a run the server has kept up with ends without a line
    delay = min(first_delay_s, POLL_S)
    while True:
        try:
            final, open_ = count()
        except Exception as exc:
            log.debug("counting task runs failed", exc_info=True)
            return Polled(final, open_, time.monotonic() - started, False, exc)
        waited = time.monotonic() - started
        if final >= expected and (open_ == 0 or not open_matters):
            return Polled(final, open_, waited, True)
        if waited >= wait_s:
            return Polled(final, open_, waited, False)
        if time.monotonic() >= say_at:
            progress(final, expected)
            say_at = time.monotonic() + 5.0
        time.sleep(delay)
        delay = min(POLL_S, delay * 1.5)


def wait_until_recorded(
    flow_run_ids: Iterable[str] | None = None,
    counts: TaskRunCounts = TASK_RUN_COUNTS,
    wait_s: float = END_WAIT_S,
    on_progress: Callable[[str], None] | None = None,
    *,
    say_missing: bool = True,
) -> ServerHeld | None:
    """Poll the server until it holds every task run ``counts`` expects of ``flow_run_ids``
    in a final state (and none open), or ``wait_s`` passes. None when nothing was expected.
    ``say_missing``: a line for task runs still missing at the end (off where the caller
    hands them to the background catch-up and says so itself)."""
    expected_by = counts.expected(flow_run_ids)
    ids = [k for k, v in expected_by.items() if v > 0]
    if not ids:
        return None
    expected = sum(expected_by[k] for k in ids)
    notify = on_progress or log.info
    polled = poll_server(
        lambda: (counts.counter(ids, FINAL_TYPES), counts.counter(ids, OPEN_TYPES)),
        expected,
        wait_s,
        lambda final, total: notify(f"Prefect server recording the run: {min(final, total)}/{total} task runs"),
    )
    if polled.error is not None:
        notify(f"could not count the task runs on the Prefect server: {polled.error}")
    result = ServerHeld(expected, max(polled.final, 0), max(polled.open, 0), polled.waited_s)
    # the end's wait counts when it ended with the run recorded (a wait that ran out is said below)
    pace = pace_note(counts.held_s(), polled.waited_s if polled.done else 0.0)
    if pace:
        notify(pace)
    if not result.complete and say_missing:
        notify(
            f"the Prefect server has not recorded {result.missing} of {expected} task runs "
            f"({result.open} still open) after {result.waited_s:.0f} s; the UI shows the run incomplete "
            "(results on disk are complete)"
        )
    return result


def pace_note(held_s: float, end_wait_s: float) -> str | None:
    """The line that says the Prefect server, not the model, set a run's pace: when solvers
    waited for it to catch up, or the run's end waited for it, :data:`PACE_NOTE_S` or more in
    all; None otherwise. Why: at an inference server's pace the run's own server is the limit
    (one core takes in a few hundred task runs a second), and a user who sees only a slow run
    would look for the cause in the model or the harness."""
    if held_s + end_wait_s < PACE_NOTE_S:
        return None
    parts = []
    if held_s >= 0.05:
        parts.append(f"solvers waited {held_s:.1f} s in all for it to catch up")
    if end_wait_s >= 0.05:
        parts.append(f"the end waited {end_wait_s:.1f} s for it to record the last task runs")
    return (
        "The Prefect server set this run's pace: "
        + " and ".join(parts)
        + f". A server with cores of its own, or fewer task runs (stage_runs = false), goes faster ({PACE_DOC})."
    )
