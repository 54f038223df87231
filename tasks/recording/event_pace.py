"""Pace the catch-up (``ape record``) on the events the server has stored, not only on its
task runs.

Why: a local Prefect server passes every event through an in-memory broker that keeps at
most 10,000 messages per consumer and drops the rest ("Subscription queue is full"). The
task-run recorder and the event persister are two such consumers; the persister writes the
events table behind the UI's *Events* feed and is the slower of the two. A catch-up paced on
recorded task runs alone (:meth:`~ape.tasks.recording.server.TaskRunCounts.throttle`) ran
ahead of the persister: in a 20,000-item run every task run was recorded, yet the events
table held 44,851 of 120,002 task-run events (docs/server.md). :class:`EventPace` counts the
events this process sent and, once more than :data:`MAX_EVENT_LAG` of them are not stored,
waits for the persister; at the end it waits until every one is stored and the count has
settled, so a server stopped right after the catch-up loses nothing.

It never waits forever: a count that does not move for :data:`STALL_S` while events are
missing (the persister switched off, ``PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED=false``,
or events already dropped) is said once, and from then on the catch-up paces on task runs
only; so is a server that does not answer the count. A persister switched off in this
process's settings is said at once, without a query.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

# events sent here and not yet stored before the catch-up waits: half the broker's 10,000 a
# consumer, so the run's own events (a live run beside the catch-up) still fit
try:
    MAX_EVENT_LAG = max(1, int(os.environ.get("APE_RECORD_MAX_EVENT_LAG", "5000")))
except ValueError:
    MAX_EVENT_LAG = 5000
# seconds without a stored event, while some are missing, after which the catch-up stops
# waiting for the persister (it flushes every second when it runs)
STALL_S = 60.0
POLL_S = 1.0


class EventPace:
    """Events sent by this process for one flow run and how many the server has stored.

    ``counter`` returns the server's count of the flow run's task-run events (any that were
    there before :meth:`start` are its baseline); ``say`` gets the one line that tells why
    the pacing falls back to task runs only. ``clock`` and ``sleep`` are for tests.
    """

    def __init__(
        self,
        counter: Callable[[], int],
        say: Callable[[str], None],
        *,
        enabled: bool = True,
        stall_s: float = STALL_S,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.counter = counter
        self.say = say
        self.stall_s = stall_s
        self.poll_s = poll_s
        self.clock = clock
        self.sleep = sleep
        self.on = True
        self.base = 0
        self.sent = 0
        self.stored = 0  # of the events sent here, those stored at the last count
        self.polls = 0  # counts asked of the server (the cost of the pacing)
        self._last = 0  # the server's count at the last poll
        if not enabled:
            self._off("the Prefect server's event persister is off here (UI Events feed not written)")

    def _off(self, reason: str) -> None:
        if self.on:
            self.on = False
            self.say(f"{reason}: pacing on task runs only")

    def _poll(self) -> int | None:
        """The server's count now (None once the pacing is off)."""
        if not self.on:
            return None
        try:
            count = self.counter()
        except Exception as exc:  # a server without the events API, or one that is gone
            self._off(f"the Prefect server does not count its stored events ({type(exc).__name__}: {exc})")
            return None
        self.polls += 1
        self._last = count
        self.stored = max(0, count - self.base)
        return count

    def start(self) -> None:
        """Take the events the server holds now as the baseline (before anything is sent)."""
        count = self._poll()
        self.base = count or 0
        self.stored = 0

    def add(self, events: int) -> None:
        """Note ``events`` more events sent for the flow run."""
        self.sent += max(0, events)

    def lag(self) -> int:
        """Events sent here that the server had not stored at the last count."""
        return max(0, self.sent - self.stored)

    def wait(
        self, max_lag: int, limit_s: float | None = None, on_progress: Callable[[int, int], None] | None = None
    ) -> bool:
        """Wait until at most ``max_lag`` events sent here are not stored; ``max_lag`` 0 also
        waits for the count to settle (the same at two polls in a row, so the run's own events
        still in the persister's queue are stored too). True when it got there; False when the
        pacing is or goes off (a stall, no answer) or after ``limit_s``. ``on_progress``
        (stored, sent) every 5 s of waiting."""
        if not self.on:
            return False
        if self.lag() <= max_lag and max_lag > 0:
            return True
        started = moved = said = self.clock()
        before = self._poll()
        if before is None:
            return False
        rate = 0.0  # events stored a second, between the last two counts that moved
        while self.on:
            now = self.clock()
            behind = self.lag() > max_lag
            if not behind and max_lag > 0:
                return True
            if limit_s is not None and now - started >= limit_s:
                return False
            if now - moved >= self.stall_s:
                self._off(
                    f"the Prefect server stored no event for {self.stall_s:.0f} s with {self.lag()} of"
                    f" {self.sent} sent here missing (event persister off, or events dropped)"
                )
                return False
            if on_progress is not None and now - said >= 5.0:
                on_progress(self.stored, self.sent)
                said = now
            self.sleep(self._pause(max_lag, rate))
            count = self._poll()
            if count is None:
                return False
            if count != before:
                rate = (count - before) / max(self.poll_s, self.clock() - moved)
                moved, before = self.clock(), count
            elif not behind:  # max_lag 0: all stored and nothing new arrived over one poll
                return True
        return False

    def _pause(self, max_lag: int, rate: float) -> float:
        """Seconds until the next count: the time the persister needs, at its last rate, to
        bring the lag within ``max_lag`` (a count of a large events table costs the server
        more than the events a second of waiting would), from one to ten polls."""
        if rate <= 0:
            return self.poll_s
        return min(10 * self.poll_s, max(self.poll_s, (self.lag() - max_lag) / rate))
