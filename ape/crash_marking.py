"""Marks a run whose process died as Crashed in the Prefect UI, with Prefect's own mechanism.

A flow run's state is written by the process that runs it. When that process dies without
a word (``kill -9``, the machine lost, the kernel's OOM killer) nothing writes the last
state, and the UI shows the run as Running for good, next to the resumed run's Completed
one. Prefect (3.1.8 and newer) has the parts to fix this and APE uses them rather than a
watcher of its own:

- **Heartbeats.** With ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` set, every flow run (the
  benchmark flow and each model's flow alike, subflows included) emits a
  ``prefect.flow-run.heartbeat`` event from a daemon thread of its process.
  :func:`enable_heartbeats` sets it to :data:`HEARTBEAT_S` (Prefect's minimum) unless the
  user chose a value.
- **An automation on the server.** :func:`ensure_crash_automation` creates, once per
  server, a proactive trigger (Prefect's documented "zombie flow" recipe): after a flow
  run's heartbeat, if neither another heartbeat nor a terminal state arrives within
  :data:`SILENCE_S`, the server changes that flow run's state to Crashed. Runs that end
  normally send their terminal state in time and are never touched.

The bound: a run whose process died is marked Crashed at most :data:`SILENCE_S` after its
last heartbeat, plus the server's proactive-trigger pass (a few seconds), so within about
two minutes of its death. :data:`SILENCE_S` is three heartbeats, so a busy server or a
stalled heartbeat thread is not taken for a dead run.

The automation is created only on the server APE starts and owns; a server the user
configured (``PREFECT_API_URL``) is left as it is (docs/server.md says how to add the same
automation there).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from ape.tasks.storage import prefect_api

if TYPE_CHECKING:
    from prefect.events.schemas.automations import AutomationCore

log = logging.getLogger("ape")

HEARTBEAT_ENV = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"
HEARTBEAT_S = 30  # Prefect's minimum interval between a flow run's heartbeats
SILENCE_S = 90  # no heartbeat for this long, and no terminal state: the run's process is gone
AUTOMATION_NAME = "ape: mark flow runs whose heartbeats stopped as Crashed"
_TERMINAL = ("Completed", "Failed", "Cancelled", "Crashed")


def enable_heartbeats() -> None:
    """Every flow run of this process and its children emits heartbeats (a value the user set
    is kept). Set before the flows start: Prefect reads its settings when a flow run begins
    from the settings context, which the caller refreshes with the API URL."""
    os.environ.setdefault(HEARTBEAT_ENV, str(HEARTBEAT_S))


def crash_automation() -> AutomationCore:
    """The automation that marks a flow run Crashed when its heartbeats stop (see above)."""
    return prefect_api.silence_automation(
        AUTOMATION_NAME,
        description=(
            "Created by APE: a flow run that sent heartbeats and then fell silent for "
            f"{SILENCE_S} s without a final state lost its process (killed, out of memory, "
            "machine lost)."
        ),
        message=(
            f"No heartbeat for {SILENCE_S} s: the run's process died (killed, out of "
            "memory or the machine lost). Rerun the same command to resume it."
        ),
        silence_s=SILENCE_S,
        terminal=_TERMINAL,
    )


def ensure_crash_automation() -> bool:
    """Create the automation on the configured server unless one of that name is there;
    True when it is there afterwards. A failure is one warning, never the run's end: the run
    is the point, the mark is a courtesy to the UI."""
    try:
        prefect_api.ensure_silence_automation(crash_automation())
        return True
    except Exception as exc:  # noqa: BLE001 - any client or server error: warn and go on
        reason = str(exc).splitlines()[0][:200] if str(exc) else ""
        log.warning(
            "could not set up the Prefect automation that marks killed runs as Crashed (%s: %s); "
            "a run whose process is killed stays Running in the UI",
            type(exc).__name__,
            reason,
        )
        return False


__all__ = [
    "AUTOMATION_NAME",
    "HEARTBEAT_ENV",
    "HEARTBEAT_S",
    "SILENCE_S",
    "crash_automation",
    "enable_heartbeats",
    "ensure_crash_automation",
]
