"""The live view's numbers: what one model's run has done so far, its pace and time left.

Plain, thread-safe bookkeeping for :mod:`ape.flows.live.view` (which publishes it) and the
text both the Prefect UI and ``ape status`` show (:func:`describe`). Kept cheap where it is
called per saved item (:meth:`LiveCounts.add`: counters under a lock), and doing the real
work only when a snapshot is taken, every few seconds, in the publishing thread:

- the pass rate's interval is the report's own (:func:`ape.tasks.stats.intervals.rate_interval`
  over the sessions' 0/1 passes, clustered by item, or by ``[data] cluster_field`` where set,
  as :mod:`ape.tasks.stats.aggregate` clusters them), computed from per-cluster counts, so at
  the end of a run the live view and the report agree;
- rates are over the last minute (:data:`WINDOW_S`), from cumulative samples taken at each
  snapshot (:func:`per_minute`), and the time left is the items left at that pace
  (:func:`eta_seconds`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from ape.schemas.live import LiveStatus, State
from ape.schemas.results import CheckStatus, Outcome, OutputBatch, SessionResult
from ape.tasks.stats.intervals import Interval, rate_interval

__all__ = [
    "WINDOW_S",
    "LiveCounts",
    "Sample",
    "cluster_label",
    "describe",
    "duration",
    "eta_seconds",
    "pass_interval",
    "per_minute",
]

WINDOW_S = 60.0  # rates and the time left are over the last minute


@dataclass(frozen=True)
class Sample:
    """Cumulative counts of this run at one moment (``t``: monotonic seconds)."""

    t: float
    items: int
    requests: int
    tokens: int


def per_minute(samples: Sequence[Sample], what: Callable[[Sample], int], window_s: float = WINDOW_S) -> float | None:
    """The pace of a cumulative count per minute over the last ``window_s`` of ``samples``
    (oldest first): the rise from the oldest sample in the window to the newest, over the
    time between them. None with less than a second between them (nothing to time yet)."""
    if not samples:
        return None
    last = samples[-1]
    first = next((s for s in samples if last.t - s.t <= window_s), last)
    span = last.t - first.t
    if span < 1.0:
        return None
    return max(0.0, (what(last) - what(first)) * 60.0 / span)


def eta_seconds(remaining: int, items_per_minute: float | None) -> float | None:
    """Seconds until the ``remaining`` items are done at the recent pace: 0 with none left,
    None while there is no pace (nothing finished in the last minute, or not timed yet)."""
    if remaining <= 0:
        return 0.0
    if not items_per_minute:
        return None
    return remaining * 60.0 / items_per_minute


def cluster_label(session: SessionResult) -> str:
    """The cluster a session's pass counts in, as the report labels it
    (:func:`ape.tasks.stats.aggregate._cluster_labels`): its ``[data] cluster_field``
    value, else its item."""
    return f"c:{session.cluster}" if session.cluster is not None else f"i:{session.item_id}"


def pass_interval(sessions: Sequence[int], passed: Sequence[int]) -> Interval:
    """The report's interval of the pass rate, from the sessions and passes of each cluster
    (the same 0/1 values the report sees, in another order)."""
    n = np.asarray(sessions, dtype=np.int64)
    c = np.asarray(passed, dtype=np.int64)
    codes = np.arange(n.size)
    values = np.concatenate([np.repeat(np.ones(n.size), c), np.repeat(np.zeros(n.size), n - c)])
    labels = np.concatenate([np.repeat(codes, c), np.repeat(codes, n - c)])
    return rate_interval(values, labels)


class LiveCounts:
    """One model's counts for the live view: :meth:`add` per saved item (cheap), :meth:`status`
    every few seconds (the interval and the rates)."""

    def __init__(self, benchmark: str, model: str, total: int, *, clock: Callable[[], float] = time.monotonic):
        self.benchmark, self.model, self.total = benchmark, model, total
        self._clock = clock
        self._lock = threading.Lock()
        self.started_at = datetime.now(UTC)
        self._started = clock()
        self.done = self.resumed = self.sessions = self.passed = 0
        self.errors = self.check_errors = self.truncated = 0
        self.tokens = self.steps = 0  # of the sessions this run made (cached ones made no request)
        self.items_run = 0  # finished by this run (the pace), resumed items not counted
        self._clusters: dict[str, int] = {}  # cluster label -> index into the two lists below
        self._cluster_sessions: list[int] = []
        self._cluster_passed: list[int] = []
        self._samples: deque[Sample] = deque([Sample(self._started, 0, 0, 0)])
        self._interval: tuple[int, Interval] | None = None  # (sessions it was computed at, interval)

    def add(self, batch: OutputBatch, *, resumed: bool = False) -> None:
        """Count one saved item: one finished now, or one an earlier run saved (``resumed``)."""
        with self._lock:
            self.done += 1
            if resumed:
                self.resumed += 1
            else:
                self.items_run += 1
            for session in batch.sessions:
                self.sessions += 1
                self.passed += session.correct
                self.errors += session.outcome is Outcome.ERROR
                self.truncated += session.outcome is Outcome.TRUNCATED
                if session.check is not None and session.check.status is CheckStatus.ERROR:
                    self.check_errors += 1
                if not resumed and not session.cached:
                    self.tokens += (session.input_tokens or 0) + (session.output_tokens or 0)
                    self.steps += session.steps
                label = cluster_label(session)
                index = self._clusters.get(label)
                if index is None:
                    index = self._clusters[label] = len(self._cluster_sessions)
                    self._cluster_sessions.append(0)
                    self._cluster_passed.append(0)
                self._cluster_sessions[index] += 1
                self._cluster_passed[index] += session.correct

    def status(
        self,
        state: State,
        *,
        requests: int | None = None,
        requests_in_flight: int | None = None,
        items_in_flight: int = 0,
        flow_run_id: str | None = None,
    ) -> LiveStatus:
        """The numbers now (called by one thread: the publisher). ``requests``: requests
        started in all by this run (None: count the saved sessions' model calls instead, as
        for a Dask run)."""
        now = self._clock()
        with self._lock:
            sessions, passed = self.sessions, self.passed
            fresh = self._interval is None or self._interval[0] != sessions
            per_cluster = (list(self._cluster_sessions), list(self._cluster_passed)) if fresh else None
            sample = Sample(now, self.items_run, self.steps if requests is None else requests, self.tokens)
            if sample.t > self._samples[-1].t:
                self._samples.append(sample)
            while len(self._samples) > 2 and now - self._samples[1].t > WINDOW_S:
                self._samples.popleft()  # keep one sample older than the window, to time it from
            samples = list(self._samples)
            counts = {
                "done": self.done,
                "resumed": self.resumed,
                "errors": self.errors,
                "check_errors": self.check_errors,
                "truncated": self.truncated,
            }
        if per_cluster is not None:
            self._interval = (sessions, pass_interval(*per_cluster))
        assert self._interval is not None
        interval = self._interval[1]
        items_pace = per_minute(samples, lambda s: s.items)

        def share(value: float) -> float | None:
            return None if math.isnan(value) else min(1.0, max(0.0, value))

        return LiveStatus(
            benchmark=self.benchmark,
            model=self.model,
            state=state,
            flow_run_id=flow_run_id,
            started_at=self.started_at,
            updated_at=datetime.now(UTC),
            elapsed_s=max(0.0, now - self._started),
            total=self.total,
            items_in_flight=items_in_flight,
            sessions=sessions,
            passed=passed,
            pass_rate=passed / sessions if sessions else None,
            pass_rate_low=share(interval.low),
            pass_rate_high=share(interval.high),
            interval_method=interval.method,
            requests_in_flight=requests_in_flight,
            requests_per_minute=per_minute(samples, lambda s: s.requests),
            tokens_per_minute=per_minute(samples, lambda s: s.tokens),
            items_per_minute=items_pace,
            eta_s=eta_seconds(self.total - counts["done"], items_pace),
            **counts,
        )


def duration(seconds: float) -> str:
    """``1 h 02 min``, ``3 min 05 s``, ``42 s``: a time span as people read it."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _pace(value: float | None, what: str) -> str:
    return f"- {what}/min" if value is None else f"{value:,.0f} {what}/min"


def describe(status: LiveStatus, now: datetime | None = None) -> list[tuple[str, str]]:
    """The live view's lines, (what, value): the Prefect UI's table and ``ape status`` both."""
    s = status
    share = f" ({_percent(s.done / s.total)})" if s.total else ""
    resumed = f", {s.resumed} saved by an earlier run" if s.resumed else ""
    if s.pass_rate is None:
        rate = "- (no session saved yet)"
    else:
        rate = (
            f"{_percent(s.pass_rate)} (95% interval {_percent(s.pass_rate_low)} to {_percent(s.pass_rate_high)}, "
            f"{s.passed} of {s.sessions} sessions)"
        )
    requests = "not seen here (Dask workers)" if s.requests_in_flight is None else str(s.requests_in_flight)
    if s.state not in ("running", "paused", "draining"):
        left = "-" if s.done >= s.total else f"- ({s.total - s.done} items not done)"
    elif s.state == "paused":  # no clock runs while it waits: a countdown would be a guess
        left = f"- (paused, {s.total - s.done} items not done; `ape ctl resume` goes on)"
    else:
        left = "- (no pace yet)" if s.eta_s is None else f"about {duration(s.eta_s)}"
    age = ((now or datetime.now(UTC)) - s.updated_at).total_seconds()
    going = s.state in ("running", "paused", "draining")
    state = s.state if not going or age < 30 else f"{s.state}? (no update for {duration(age)})"
    return [
        (
            "state",
            f"{state}, {duration(s.elapsed_s)} since it started" if going else f"{state} after {duration(s.elapsed_s)}",
        ),
        ("items", f"{s.done} of {s.total} done{share}{resumed}, {s.items_in_flight} in flight"),
        ("pass rate", rate),
        ("errors", f"{s.errors} sessions errored, {s.check_errors} checks errored"),
        ("truncated", f"{s.truncated} sessions"),
        ("requests in flight", requests),
        (
            "pace (last minute)",
            ", ".join(
                [
                    _pace(s.requests_per_minute, "requests"),
                    _pace(s.tokens_per_minute, "tokens"),
                    _pace(s.items_per_minute, "items"),
                ]
            ),
        ),
        ("time left", left),
    ]
