"""Know at once when a process another part of APE started has ended.

Why: a run whose Prefect server dies must stop sending that server's credentials to its
port before anyone else can bind it. Polling liveness once a second leaves a second for
another process to take the port and receive requests; Linux's ``pidfd_open`` gives a file
descriptor that becomes readable the moment the process exits (a zombie counts: it no
longer holds any socket), so a blocked ``poll`` wakes at once and a zero-timeout ``poll``
answers in a microsecond, cheap enough to ask before every request. The descriptor names
that very process, never a later one that reuses its pid.

Without ``pidfd_open`` (not Linux, or an old kernel) the caller's ``alive`` check is asked
instead, and :meth:`ProcessExit.wait` sleeps between checks.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable

__all__ = ["ProcessExit"]


class ProcessExit:
    """Whether process ``pid`` has exited, from a pidfd where the system has them."""

    def __init__(self, pid: int, alive: Callable[[int], bool], *, poll_s: float = 0.2) -> None:
        self.pid = pid
        self._alive = alive
        self._poll_s = poll_s
        self._exited = False
        self._fd: int | None = None
        opener = getattr(os, "pidfd_open", None)
        if opener is None or not hasattr(select, "poll"):
            return
        try:
            self._fd = opener(pid)
        except ProcessLookupError:
            self._exited = True
            return
        except OSError:  # no pidfd support in this kernel: fall back to ``alive``
            return

    @property
    def pidfd(self) -> bool:
        """Whether exits are seen through a pidfd (at once) rather than by polling ``alive``."""
        return self._fd is not None

    def exited(self) -> bool:
        """True once the process has exited; never blocks."""
        return self.wait(0)

    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` seconds for the process to exit; True once it has."""
        if self._exited:
            return True
        fd = self._fd
        if fd is not None:
            # a poll object per call: one object polled from two threads at once raises
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            self._exited = bool(poller.poll(max(0, int(timeout_s * 1000))))
            return self._exited
        deadline = time.monotonic() + timeout_s
        while True:
            if not self._alive(self.pid):
                self._exited = True
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(self._poll_s, left))

    def close(self) -> None:
        """Release the pidfd (later calls fall back to ``alive``)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
