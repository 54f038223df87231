"""Ends a run whose Prefect API went away, within seconds and with one line.

Measured with prefect 3.9.1 (``prefect server start`` killed with SIGKILL while
``ape run`` was saving items): the run saved nothing more and never ended (over
three minutes, twice); worker threads block inside the Prefect client's state
reporting for task runs, and the events worker prints a multi-kilobyte error every
few seconds. Those threads cannot be taken back, so finishing the evaluation
locally is not feasible without replacing Prefect's task engine; ending the run is.

:class:`ApiWatchdog` probes the API's ``/health`` once a second. After
``failures`` failed probes in a row (five: a refused connection fails at once, a
server too busy to answer gets ten seconds per probe, so a loaded machine is not
mistaken for a dead server and the run still ends within a minute) it silences
Prefect's loggers, waits for a save in progress to finish
(:data:`ape.tasks.storage.save.WRITE_GUARD`, so no line is torn),
prints one line and ends the process with exit code 1. Everything saved before is
intact (results.jsonl is fsynced per group; metadata.json is rebuilt from it on
start), the output folder's lock is released by the kernel, and the same command
resumes once the server is back.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import urllib.request
from pathlib import Path

from ape.tasks.storage.save import WRITE_GUARD

EXIT_API_LOST = 1


class ApiWatchdog:
    """A daemon thread that ends the process when the Prefect API is gone (see above)."""

    def __init__(
        self, api_url: str, output: Path, *, interval_s: float = 1.0, failures: int = 5, probe_timeout_s: float = 10.0
    ):
        self.health = api_url.rstrip("/") + "/health"
        self.api_url = api_url
        self.output = output
        self.interval_s = interval_s
        self.failures = failures
        self.probe_timeout_s = probe_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ape-api-watchdog", daemon=True)

    def _alive(self) -> bool:
        try:
            with urllib.request.urlopen(self.health, timeout=self.probe_timeout_s) as response:
                return response.status == 200
        except Exception:
            return False

    def _watch(self) -> None:
        missed = 0
        while not self._stop.wait(self.interval_s):
            missed = 0 if self._alive() else missed + 1
            if missed >= self.failures and not self._stop.is_set():
                self._end()

    def _end(self) -> None:

        prefect = logging.getLogger("prefect")
        prefect.setLevel(logging.CRITICAL + 1)
        prefect.propagate = False
        WRITE_GUARD.acquire(timeout=30)  # never exit in the middle of a save
        sys.stderr.write(
            f"error: lost the Prefect API ({self.api_url}) mid-run; stopped. Results saved so far "
            f"in {self.output} are intact: start the server again and rerun the same command to "
            "resume\n"
        )
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(EXIT_API_LOST)

    def __enter__(self) -> ApiWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def api_watchdog(output: Path) -> ApiWatchdog | None:
    """A watchdog for the configured PREFECT_API_URL (None with Prefect's in-process server,
    which cannot be lost)."""
    from prefect.settings import PREFECT_API_URL  # deferred: Prefect is imported after APE sets its settings

    url = PREFECT_API_URL.value()
    if not url:
        return None

    return ApiWatchdog(url, output)
