"""An OpenAI-compatible loopback endpoint that counts what the server-held limits let through.

It answers "What is a + b?" correctly after ``latency_s``, and records per request the
moment it arrived and the run it came from (told apart by API key), and the requests in
flight at once: in all, at their peak and at each new high. ``go`` holds every request until
it is set, so a test can keep a run's slots taken while it changes the limit.
"""

from __future__ import annotations

import json
import re
import threading
import time

from tests.helpers.fake_openai import LoopbackEndpoint, Request, completion


class CountingEndpoint:
    """Answers every chat request after ``latency_s``; counts requests in flight and arrivals."""

    def __init__(self, latency_s: float, *, held: bool = True) -> None:
        self.latency_s = latency_s
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.peaks: list[tuple[float, int]] = []  # (time, in flight) at each new high
        self.arrivals: list[tuple[float, str]] = []  # (time.monotonic(), API key) per request
        self.go = threading.Event()
        if not held:
            self.go.set()
        self.endpoint = LoopbackEndpoint(self.respond)

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    def respond(self, request: Request) -> tuple[int, dict]:
        with self.lock:
            self.arrivals.append((time.monotonic(), request.auth or ""))
            self.now += 1
            if self.now > self.peak:
                self.peak = self.now
                self.peaks.append((time.monotonic(), self.now))
        try:
            self.go.wait(180)
            time.sleep(self.latency_s)
            a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)", json.dumps(request.body))[-1])
            return 200, completion(f"The answer is {a + b}")
        finally:
            with self.lock:
                self.now -= 1

    def wait_for(self, in_flight: int, timeout_s: float) -> float | None:
        """Seconds until ``in_flight`` requests were in flight at once, or None at the timeout."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            with self.lock:
                if self.peak >= in_flight:
                    return time.monotonic() - started
            time.sleep(0.05)
        return None

    def times(self, start: float = 0.0, end: float = float("inf")) -> list[float]:
        """Arrival times within ``[start, end)``, in order."""
        with self.lock:
            return sorted(t for t, _ in self.arrivals if start <= t < end)

    def close(self) -> None:
        self.go.set()
        self.endpoint.close()


def most_in_window(times: list[float], window_s: float) -> int:
    """The most arrivals in any half-open window ``[t, t + window_s)`` (sliding over ``times``)."""
    most, first = 0, 0
    for last, t in enumerate(times):
        while t - times[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most
