"""Deterministic concurrency checks: hold workers inside a section until the test lets them go.

Sleeping and hoping that workers overlap makes a test pass or fail with the load of the
machine. A :class:`Gate` instead holds every caller inside until it is opened, and counts
how many are inside at once, so a test can

- wait until ``n`` callers are provably inside together (a limit is reached, or work that
  should overlap does), with a generous timeout that only a broken product runs into;
- check that no further caller got in while they were held (a limit is not exceeded);
- then open the gate and let everything finish.

Only the failing direction waits (for the timeout); a passing test never depends on the
speed of the machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

TIMEOUT_S = 30.0  # far longer than any correct run needs; only a broken product waits it out
SETTLE_S = 0.2  # time a held limit gets to let an extra caller in (a broken one would)


class Gate:
    """Holds callers of :meth:`inside` until :meth:`open`; records the most inside at once.

    Use it as a context manager around the test's threads, so the gate opens (and no
    worker waits out its timeout) when the test fails half-way.
    """

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._changed = threading.Condition()
        self._opened = threading.Event()
        self.now = 0  # callers inside at the moment
        self.peak = 0  # most callers inside at once
        self.entered = 0  # callers that came in, in all

    @contextmanager
    def inside(self) -> Iterator[None]:
        """The held section: counts the caller in, waits for the gate to open, counts it out."""
        with self._changed:
            self.now += 1
            self.entered += 1
            self.peak = max(self.peak, self.now)
            self._changed.notify_all()
        try:
            if not self._opened.wait(self.timeout_s):
                raise TimeoutError(f"the gate was not opened within {self.timeout_s} s")
            yield
        finally:
            with self._changed:
                self.now -= 1
                self._changed.notify_all()

    def wait_for(self, count: int) -> bool:
        """Whether ``count`` callers were inside at once before the timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.now >= count, self.timeout_s)

    def held(self, count: int) -> int:
        """Wait until ``count`` callers are inside together, give another caller time to get in
        (as it would past a broken limit), and return how many are inside then."""
        assert self.wait_for(count), f"never {count} callers inside at once (only {self.peak})"
        time.sleep(SETTLE_S)  # not a timing assertion: a passing test passes however long this takes
        with self._changed:
            return self.now

    def open(self) -> None:
        self._opened.set()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.open()
