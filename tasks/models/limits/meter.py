"""How many model requests of a model are going now, and how many have started: for the
live view (:mod:`ape.flows.live.view`), which samples them every few seconds.

Counted around every request a :class:`ape.tasks.models.managed.ManagedChatModel` sends
(each retry is a request of its own), inside the limiter's slot: a request waiting for a slot
is not in flight. Per model id and per process, as the limiters are: a Dask run's requests
are made in its workers' processes, which the flow's process does not see.

Two counter updates under a lock per request: nothing a request's own cost notices.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CallMeter", "meter_for"]


class CallMeter:
    """Requests of one model in this process: going now (``in_flight``) and started in all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self.started = 0

    @contextmanager
    def request(self) -> Iterator[None]:
        with self._lock:
            self.in_flight += 1
            self.started += 1
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def read(self) -> tuple[int, int]:
        """(in flight now, started in all), read together."""
        with self._lock:
            return self.in_flight, self.started


_METERS: dict[str, CallMeter] = {}
_METERS_LOCK = threading.Lock()


def meter_for(model_id: str) -> CallMeter:
    """The process-wide meter of one model id (created on first use)."""
    meter = _METERS.get(model_id)
    if meter is None:
        with _METERS_LOCK:
            meter = _METERS.setdefault(model_id, CallMeter())
    return meter
