"""Ends a run whose Prefect API went away, within seconds and with one line, and sends
nothing, credentials least of all, to whatever takes the port of a server that died.

Measured with prefect 3.9.1 (``prefect server start`` killed with SIGKILL while
``ape run`` was saving items): the run saved nothing more and never ended (over
three minutes, twice); worker threads block inside the Prefect client's state
reporting for task runs, and the events worker prints a multi-kilobyte error every
few seconds. Those threads cannot be taken back, so finishing the evaluation
locally is not feasible without replacing Prefect's task engine; ending the run is.
A run whose server is gone therefore still ends: exit code 1, results intact, and the
same command resumes once a server runs again.

The server APE started (``server.json``, :func:`ape.server.own_server`) is watched as a
process, not only as a URL. Its port is in a command line every local user can read, and
Prefect's clients retry: once it died, a process that bound its port and answered
``/health`` with ``true`` kept the run going and received hundreds of requests carrying
the server's credentials. So, for that server:

- its death is seen at once (:class:`ape.tasks.common.exits.ProcessExit`: a pidfd on Linux,
  polled liveness elsewhere), and a guard in this process
  (:func:`ape.tasks.storage.prefect_internals.guard_api`) asks before every request of
  Prefect's HTTP and events clients whether the server is gone: from the moment it exited,
  nothing more is sent and the asking thread is held until the process ends;
- every probe first proves that the socket listening on its port is held by that process or
  its children (:mod:`ape.tasks.common.ownership`); a port held by anyone else ends the
  run, naming the holder. The probe itself (``/health``) carries no credentials, and goes
  out only after that proof;
- a server proven alive and holding its port whose ``/health`` does not answer is busy, not
  dead: it gets ``owned_failures`` probes in a row (30, about five minutes when each takes
  its ten-second timeout) instead of ``failures``.

Any other API (a user's own ``PREFECT_API_URL``) has no process to watch: :class:`ApiWatchdog`
probes its ``/health`` once a second and ends the run after ``failures`` failed probes in a
row (five: a refused connection fails at once, a server too busy to answer gets ten seconds
per probe, so a loaded machine is not mistaken for a dead server and the run still ends
within a minute).

Ending the run silences Prefect's loggers, waits for a save in progress to finish
(:data:`ape.tasks.storage.save.WRITE_GUARD`, so no line is torn), prints one line naming
what was seen and ends the process with exit code 1. Everything saved before is intact
(results.jsonl is fsynced per group; metadata.json is rebuilt from it on start), the output
folder's lock is released by the kernel, and the same command resumes once the server is back.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from ape.server import OwnServer, healthy, own_server, process_alive
from ape.tasks.common import ownership
from ape.tasks.common.exits import ProcessExit
from ape.tasks.storage import prefect_api
from ape.tasks.storage.save import WRITE_GUARD

EXIT_API_LOST = 1


class ApiWatchdog:
    """A daemon thread that ends the process when the Prefect API is gone (see above);
    ``owner`` is the server process APE started, None for an API it did not start."""

    def __init__(
        self,
        api_url: str,
        output: Path,
        *,
        owner: OwnServer | None = None,
        interval_s: float = 1.0,
        failures: int = 5,
        owned_failures: int = 30,
        probe_timeout_s: float = 10.0,
        last_words: Callable[[str], None] | None = None,
    ):
        self.api_url = api_url.rstrip("/")
        self.output = output
        self.owner = owner
        self.interval_s = interval_s
        self.failures = failures
        self.owned_failures = owned_failures
        self.probe_timeout_s = probe_timeout_s
        self.last_words = last_words
        self._gone: str | None = None
        self._lock = threading.Lock()
        self._exit: ProcessExit | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ape-api-watchdog", daemon=True)

    # ------------------------------------------------------------------ what the guard asks

    def gone(self) -> str | None:
        """Why nothing more may be sent to the API (None while it may): asked by the guard
        before every request, so it never blocks (a zero-timeout poll of the pidfd)."""
        if self._gone is None and self._exit is not None and self._exit.exited():
            assert self.owner is not None
            self._lose(f"APE's Prefect server (pid {self.owner.pid}) died mid-run")
        return self._gone

    def _holding(self) -> bool:
        """While the watch runs, a refused request is held: this watchdog ends the process."""
        return not self._stop.is_set()

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self._gone is not None:
                return
            self._gone = reason
        prefect = logging.getLogger("prefect")
        prefect.setLevel(logging.CRITICAL + 1)
        prefect.propagate = False

    # ------------------------------------------------------------------ the watch

    def _watch(self) -> None:
        missed = 0
        while not self._pause():
            patience = self._probe()
            missed = 0 if patience == 0 else missed + 1
            if self.gone() is None and patience and missed >= patience:
                self._lose(f"lost the Prefect API ({self.api_url}) mid-run")
        if self._gone is not None and not self._stop.is_set():
            self._end(self._gone)

    def _pause(self) -> bool:
        """Wait one interval; True when the watch is over (stopped, or the server gone). A
        watched server's exit ends the wait at once."""
        if self._exit is not None:
            self._exit.wait(self.interval_s)
        else:
            self._stop.wait(self.interval_s)
        return self._stop.is_set() or self.gone() is not None

    def _probe(self) -> int:
        """0 when the API answered; else how many failed probes in a row end the run."""
        owner = self.owner
        proven = False
        if owner is not None and ownership.supported():
            check = ownership.check_port(owner.pid, owner.host, owner.port)
            if self.gone() is not None:
                return self.failures
            if check.stranger is not None:
                self._lose(f"port {owner.port} of APE's Prefect server (pid {owner.pid}) is held by {check.stranger}")
                return self.failures
            if not check.owned:
                return self.failures  # nothing listens there: nothing to ask
            proven = True
        elif owner is not None:
            proven = process_alive(owner.pid)  # no socket table to read: alive is all we know
        if healthy(self.api_url, timeout=self.probe_timeout_s) and self.gone() is None:
            return 0
        return self.owned_failures if proven else self.failures

    def _end(self, reason: str) -> None:
        WRITE_GUARD.acquire(timeout=30)  # never exit in the middle of a save
        if self.last_words is not None:  # a command with its own line (``ape record``)
            self.last_words(reason)
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(EXIT_API_LOST)
        sent = ", and nothing more was sent to its port" if self.owner is not None else ""
        sys.stderr.write(
            f"error: {reason}; stopped{sent}. Results saved so far "
            f"in {self.output} are intact: start the server again and rerun the same command to "
            "resume\n"
        )
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(EXIT_API_LOST)

    def __enter__(self) -> ApiWatchdog:
        if self.owner is not None:
            from ape.tasks.storage.prefect_internals import guard_api  # deferred: imports Prefect

            self._exit = ProcessExit(self.owner.pid, process_alive)
            guard_api(self.gone, holding=self._holding)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # the guard stays: a request after the run's flow, to a server that died, is refused
        self._stop.set()


def api_watchdog(output: Path, last_words: Callable[[str], None] | None = None) -> ApiWatchdog | None:
    """A watchdog for the configured PREFECT_API_URL (None with Prefect's in-process server,
    which cannot be lost), watching the server's process when APE started it; ``last_words``
    replaces the run's closing line (it is told why) before the process ends."""
    url = prefect_api.api_url()
    if not url:
        return None
    return ApiWatchdog(url, output, owner=own_server(url), last_words=last_words)
