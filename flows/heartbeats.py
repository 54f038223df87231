"""Heartbeats for a model's flow run, so that it too is marked Crashed when its process dies.

Prefect's flow engine sends a flow run's heartbeats (``prefect.flow-run.heartbeat`` events,
every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds) from a thread that it joins when the
flow run ends, which costs a subflow up to a second at its exit. The benchmark flow keeps
Prefect's heartbeats and switches them off for its model subflows
(:mod:`ape.flows.benchmark`), whose flow runs then sent none: after ``kill -9`` the
benchmark's flow run became Crashed (:mod:`ape.crash_marking`) and the model's stayed
Running for good.

:func:`model_heartbeats` sends the same event for the model's flow run from a thread that
stops at once when the flow's body returns (an :class:`threading.Event` wait, not one-second
sleeps) and before the engine writes the final state, so no heartbeat follows it. It sends
nothing when Prefect's own heartbeats already run for this flow run (a model flow started on
its own) or when heartbeats are off.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator

from prefect.context import FlowRunContext
from prefect.events import emit_event
from prefect.flow_engine import MINIMUM_HEARTBEAT_INTERVAL
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings


def _interval() -> int | None:
    """The heartbeat interval the process was given (the environment: the benchmark flow's
    ``temporary_settings`` override switches Prefect's own off for subflows only)."""
    raw = os.environ.get(PREFECT_FLOWS_HEARTBEAT_FREQUENCY.name, "").strip()
    try:
        value = int(raw)
    except ValueError:
        return None
    return max(value, MINIMUM_HEARTBEAT_INTERVAL) if value > 0 else None


@contextlib.contextmanager
def model_heartbeats() -> Iterator[None]:
    """Heartbeat events for the current flow run while the block runs (see above)."""
    interval = _interval()
    context = FlowRunContext.get()
    flow_run = context.flow_run if context is not None else None
    if interval is None or flow_run is None or get_current_settings().flows.heartbeat_frequency is not None:
        yield
        return
    resource = {"prefect.resource.id": f"prefect.flow-run.{flow_run.id}", "prefect.resource.name": flow_run.name}
    related = [{"prefect.resource.id": f"prefect.flow.{flow_run.flow_id}", "prefect.resource.role": "flow"}]
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # a heartbeat lost is one missed, never the run's end
                emit_event(event="prefect.flow-run.heartbeat", resource=resource, related=related)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=contextvars.copy_context().run, args=(beat,), name="ape-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)  # an emit in progress is queued before the final state's event


__all__ = ["model_heartbeats"]
