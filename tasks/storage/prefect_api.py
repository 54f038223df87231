"""APE's conversation with Prefect's public API, in one place: the public half beside
:mod:`ape.tasks.storage.prefect_internals`.

Every module that talks to the Prefect server goes through here for

- the server's address in Prefect's settings (:func:`api_url`), and reading them again once
  APE has set them (:func:`refresh_settings`);
- a client (:func:`sync_client`), or None when none can be made (:func:`client_or_none`: a
  server that does not answer costs the caller one warning, never the run);
- the flow run the calling code belongs to (:func:`current_flow_run_id`: its task run first,
  then its flow run; one type, :class:`~uuid.UUID`);
- artifacts: their keys (:func:`artifact_key`, the one rule) and creating one or updating it
  in place (:func:`upsert_artifact`);
- variables (:func:`create_variable`, :func:`update_variable`), global concurrency limits
  (:func:`create_global_limit`), the Paused state (:func:`paused_state`), the client's own
  retries switched off (:func:`settings_without_retries`), Prefect's "not found" and
  "already exists" errors (:func:`object_errors`), and the automation that marks a silent
  flow run Crashed (:func:`ensure_silence_automation`);
- the events the server has stored (its events table, the UI's *Events* feed) for a flow run
  (:func:`count_flow_run_events`), and whether this side's settings switch the server's event
  persister off (:func:`event_persister_enabled`).

Prefect is imported inside these functions, and only here: Prefect reads its settings when it
is first imported, so APE imports it only after it has set them (the API URL of the server
it started or found, the result storage), and ``ape --help`` starts without it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

__all__ = [
    "api_url",
    "artifact_key",
    "client_or_none",
    "count_flow_run_events",
    "create_global_limit",
    "create_variable",
    "current_flow_run_id",
    "ensure_silence_automation",
    "event_persister_enabled",
    "object_errors",
    "paused_state",
    "refresh_settings",
    "settings_without_retries",
    "silence_automation",
    "sync_client",
    "update_variable",
    "upsert_artifact",
]

ClientFactory = Callable[[], Any]


# -- the server and its client -------------------------------------------------------------
def api_url() -> str | None:
    """The Prefect API URL in Prefect's current settings (environment or profile), or None
    for Prefect's temporary in-process server."""
    from prefect.settings import get_current_settings  # noqa: PLC0415 - APE sets Prefect's settings first

    return get_current_settings().api.url or None


def refresh_settings() -> None:
    """Make Prefect read the environment again: its settings are captured at import time."""
    from prefect import context  # noqa: PLC0415 - imported only once the environment is set

    refresh = getattr(context, "refresh_global_settings_context", None)
    if refresh is not None:
        refresh()


def sync_client() -> Any:
    """A synchronous Prefect client of the configured server (enter it with ``with``)."""
    from prefect.client.orchestration import get_client  # noqa: PLC0415 - APE sets Prefect's settings first

    return get_client(sync_client=True)


@contextmanager
def client_or_none(on_error: Callable[[BaseException], None], factory: ClientFactory = sync_client) -> Iterator[Any]:
    """An entered client from ``factory``, or None when none can be made (``on_error`` is
    told why): for the work beside a run (its live view, its control channel) that a server
    which does not answer must never stop. The client is closed afterwards, quietly."""
    try:
        client = factory()
        client.__enter__()
    except Exception as exc:
        on_error(exc)
        yield None
        return
    try:
        yield client
    finally:
        try:
            client.__exit__(None, None, None)
        except Exception:
            pass


def current_flow_run_id() -> UUID | None:
    """The flow run the calling code belongs to: its task run's (an item task on a Dask worker
    has no flow-run context), else its flow run's (a solver worker's copied context); None
    outside a flow run."""
    try:
        from prefect.context import FlowRunContext, TaskRunContext  # noqa: PLC0415 - settings first

        task: Any = TaskRunContext.get()
        if task is not None and task.task_run.flow_run_id is not None:
            return task.task_run.flow_run_id
        flow: Any = FlowRunContext.get()
        if flow is not None and flow.flow_run is not None:
            return flow.flow_run.id
    except Exception:
        return None
    return None


# -- artifacts -----------------------------------------------------------------------------
def artifact_key(*parts: str, fallback: str = "benchmark") -> str:
    """An artifact key from ``parts`` in what Prefect allows (lowercase ASCII letters, digits,
    dashes): each part lowered, every run of other characters one dash, empty parts left out,
    at most 200 characters; ``fallback`` when nothing is left."""
    slugs = [re.sub(r"[^a-z0-9]+", "-", part.lower()).strip("-") for part in parts]
    return "-".join(slug for slug in slugs if slug)[:200] or fallback


def upsert_artifact(
    client: Any,
    artifact_id: UUID | None,
    *,
    key: str | None,
    kind: str,
    data: Any,
    description: str,
    flow_run_id: UUID | None,
) -> UUID:
    """Create the artifact (``artifact_id`` None) or update its data in place; its id.
    Updating keeps the UI's list at one entry per artifact and run."""
    from prefect.client.schemas.actions import ArtifactCreate, ArtifactUpdate  # noqa: PLC0415

    if artifact_id is not None:
        client.update_artifact(artifact_id, ArtifactUpdate(data=data))
        return artifact_id
    created = client.create_artifact(
        ArtifactCreate(key=key, type=kind, data=data, description=description, flow_run_id=flow_run_id)
    )
    return created.id


# -- variables, limits, states, settings ---------------------------------------------------
def object_errors() -> tuple[type[Exception], type[Exception]]:
    """Prefect's ``ObjectNotFound`` and ``ObjectAlreadyExists``, for an ``except`` clause."""
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound  # noqa: PLC0415

    return ObjectNotFound, ObjectAlreadyExists


def create_variable(client: Any, name: str, value: Any, tags: list[str]) -> None:
    """A new variable (``ObjectAlreadyExists`` when one of that name is there)."""
    from prefect.client.schemas.actions import VariableCreate  # noqa: PLC0415

    client.create_variable(VariableCreate(name=name, value=value, tags=tags))


def update_variable(client: Any, name: str, value: Any, tags: list[str] | None = None) -> None:
    """A variable's new value, and its tags when given (left as they are when not)."""
    from prefect.client.schemas.actions import VariableUpdate  # noqa: PLC0415

    fields: dict[str, Any] = {"name": name, "value": value} | ({} if tags is None else {"tags": tags})
    client.update_variable(VariableUpdate(**fields))


def create_global_limit(client: Any, fields: dict[str, Any]) -> None:
    """A global concurrency limit of ``fields`` (name, limit, slot_decay_per_second)."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate  # noqa: PLC0415

    client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(**fields))


def paused_state(pause_key: str) -> Any:
    """A Paused state with no timeout, not rescheduled: the process that set it waits."""
    from prefect.states import Paused  # noqa: PLC0415

    return Paused(reschedule=False, pause_key=pause_key)


def settings_without_retries(cached: Any = None) -> tuple[Any, Any]:
    """A settings context in which Prefect's client does not retry by itself, and the settings
    it holds (pass them back as ``cached``: a copy of Prefect's settings takes about 50 ms)."""
    from prefect.context import SettingsContext, get_settings_context  # noqa: PLC0415
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES  # noqa: PLC0415

    context = get_settings_context()
    settings = cached or context.settings.copy_with_update(updates={PREFECT_CLIENT_MAX_RETRIES: 0})
    return SettingsContext(profile=context.profile, settings=settings), settings


# -- automations ---------------------------------------------------------------------------
def silence_automation(name: str, description: str, message: str, silence_s: int, terminal: tuple[str, ...]) -> Any:
    """The automation that sets a flow run Crashed (with ``message``) when its heartbeats stop
    for ``silence_s`` seconds before one of the ``terminal`` state events."""
    from prefect.client.schemas.objects import StateType  # noqa: PLC0415
    from prefect.events.actions import ChangeFlowRunState  # noqa: PLC0415
    from prefect.events.schemas.automations import (  # noqa: PLC0415
        AutomationCore,
        EventTrigger,
        Posture,
        ResourceSpecification,
    )

    return AutomationCore(
        name=name,
        description=description,
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{state}" for state in terminal)},
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=silence_s),
        ),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=message)],
    )


def ensure_silence_automation(automation: Any) -> None:
    """Create ``automation`` on the configured server unless one of its name is there."""
    with sync_client() as client:
        if client.read_automations_by_name(automation.name):
            return
        client.create_automation(automation)


# -- the events the server stored --------------------------------------------------------------
def count_flow_run_events(client: Any, flow_run_id: str, since: datetime, prefix: str = "prefect.task-run.") -> int:
    """Events named ``prefix``... related to flow run ``flow_run_id`` in its ``flow-run`` role,
    occurred from ``since`` on, that the server has stored (``POST /events/filter``, one
    event asked for, its ``total`` read).

    Why the flow run and ``since``, not "the last day": events recorded after a run carry the
    times the stages ran (``ape record``), so the filter names the flow run they belong to and
    reaches back to its first stage; Prefect's own default would cut at 180 days.
    """
    body = {
        "filter": {
            "occurred": {"since": since.isoformat(), "until": (datetime.now(UTC) + timedelta(days=1)).isoformat()},
            "event": {"prefix": [prefix]},
            "related": {"resources_in_roles": [[f"prefect.flow-run.{flow_run_id}", "flow-run"]]},
        },
        "limit": 1,
    }
    response = client.request("POST", "/events/filter", json=body)
    response.raise_for_status()
    return int(response.json()["total"])


def event_persister_enabled() -> bool:
    """Whether Prefect's settings here leave the server's event persister on (a server APE
    starts inherits them: ``PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED``)."""
    from prefect.settings import get_current_settings  # noqa: PLC0415 - APE sets Prefect's settings first

    return bool(get_current_settings().server.services.event_persister.enabled)
