"""Small file writes done by one thread for many: a run's solver threads hand their session
cache writes here instead of making the system calls themselves.

Why: every system call releases the interpreter lock, and at 256 solver workers a thread
that gives it up for an ``open`` or ``write`` waits behind the others to get it back; the
session cache's two small files a session (about eight calls) made a 256-worker run on a
0.5 s model take 9.1 s instead of 7.0 s for its 2,560 sessions (docs/performance.md). One
writer thread makes the same calls back to back while the solver threads go on.

Nothing is lost to it: the runner saves an item's results only after the writes its
sessions handed over are done (:meth:`WriteBehind.wait` for the item's last ticket), so a
saved result has its cache record on disk as before; a crash loses only what an unsaved
item had queued, and that item runs again anyway. A failed write is kept and raised to the
waiter (the run stops with it, as a failed save does), never dropped.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

# writes waiting at most (a solver thread that would queue more waits for the disk)
DEFAULT_LIMIT = 1024


class WriteBehind:
    """One daemon thread running the writes handed to :meth:`submit`, in order.

    Each write gets a ticket (1, 2, ...); :meth:`mine` is the last ticket the calling thread
    took, :meth:`wait` blocks until every write up to a ticket has run, :meth:`close`
    drains the queue and stops the thread. The first write that raised is raised again by
    every later ``submit``, ``wait`` and ``close``; the writes after it are not run.
    """

    def __init__(self, name: str = "ape-write-behind", limit: int = DEFAULT_LIMIT) -> None:
        self._limit = limit
        self._queue: deque[tuple[int, Callable[[], None]]] = deque()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # queued, written, closing
        self._issued = 0  # the last ticket handed out
        self._written = 0  # every write up to this ticket has run
        self._closing = False
        self._failure: BaseException | None = None
        self._tickets = threading.local()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, write: Callable[[], None]) -> int:
        """Queue ``write`` (waiting while ``limit`` writes wait already); its ticket."""
        with self._changed:
            while len(self._queue) >= self._limit and self._failure is None:
                self._changed.wait()
            if self._failure is not None:
                raise self._failure
            if self._closing:
                raise RuntimeError("the write-behind thread is closed")
            self._issued += 1
            self._queue.append((self._issued, write))  # under the lock: queued in ticket order
            self._tickets.last = self._issued
            self._changed.notify_all()
            return self._issued

    def mine(self) -> int:
        """The last ticket this thread took (0: none)."""
        return int(getattr(self._tickets, "last", 0))

    def wait(self, ticket: int) -> None:
        """Block until every write up to ``ticket`` has run; raise the first that failed."""
        with self._changed:
            while self._written < ticket and self._failure is None:
                self._changed.wait()
            if self._failure is not None:
                raise self._failure

    def close(self) -> None:
        """Run what is queued, then stop the thread; raise the first write that failed."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._closing:
                    self._changed.wait()
                if not self._queue:
                    return  # closing, and nothing left
                ticket, write = self._queue.popleft()
                self._changed.notify_all()  # room for a waiting submit
                failed = self._failure is not None
            failure: BaseException | None = None
            if not failed:
                try:
                    write()
                except BaseException as exc:  # kept for the waiter: a write never fails unseen
                    failure = exc
            with self._changed:
                if failure is not None and self._failure is None:
                    self._failure = failure
                self._written = ticket
                self._changed.notify_all()
