"""Where APE leans on Prefect's internals, in one place, with the version it was checked with.

APE records a session's stages as task runs without Prefect's task engine, and reads and
writes the engine's result cache itself (:mod:`ape.tasks.recording.stage_runs`,
:mod:`ape.tasks.session.cache`), and stops Prefect's clients from talking to a port its
server no longer holds (:mod:`ape.watchdog`). That needs five pieces Prefect does not
document as API:

- :func:`task_run_event`: the ``prefect.task-run.<State>`` event the engine emits for a
  task run's state change, built by hand so one event records a whole stage;
- :func:`task_result_store`: the result store the engine would use for a task, obtained
  synchronously (``update_for_task(..., _sync=True)``, a private keyword);
- :func:`task_context`: the one attribute of a task-run context a cache policy reads;
- :class:`CacheRecords`: the cache-record folder as a ``LocalFileSystem`` block, so the
  engine's own cache lookups pass APE's JSON check first;
- :func:`guard_api`: one check before every request Prefect's clients put on the wire: the
  HTTP clients :func:`prefect.get_client` builds (``PrefectHttpxAsyncClient`` and
  ``PrefectHttpxSyncClient``; their ``_send_single_request``, which httpx calls for each
  request, redirect and retry, so a retry loop already running is caught too) and the
  events websocket clients (their ``_reconnect``, where a connection and its credentials go
  out, and ``_emit``).

Checked with the Prefect versions in :data:`CHECKED_WITH`. ``tests/integration/test_stage_run_contract.py``
(a chain recorded by the engine and by APE, compared on a real server) and the cache
tests (``tests/integration/test_cache_code.py``, ``tests/integration/test_relocate.py``)
fail on an upgrade that changes any of them: re-check this module then; so does
``tests/unit/storage/test_api_guard.py`` for :func:`guard_api` (with the httpx version in
:data:`CHECKED_WITH`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
from prefect.client.base import PrefectHttpxAsyncClient, PrefectHttpxSyncClient
from prefect.events.clients import PrefectEventsClient, PrefectEventSubscriber
from prefect.results import ResultStore

from ape.tasks.storage.cache_format import REFUSED, ForeignRecord, checked_record
from ape.tasks.storage.local_results import ResolvedLocalFileSystem
from ape.tasks.storage.runs import CACHE_DIR

CHECKED_WITH = ("3.9.1",)  # Prefect versions this module was checked against (with httpx 0.29)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()


def task_run_event(
    flow_run_id: str,
    run_id: uuid.UUID,
    *,
    name: str,
    task_key: str,
    dynamic_key: str,
    tags: tuple[str, ...],
    inputs: dict[str, list[dict[str, str]]],
    state: tuple[str, str, str],
    start: float,
    end: float | None,
    at: float,
) -> dict[str, Any]:
    """The ``emit_event`` arguments of task run ``run_id`` of ``flow_run_id`` entering
    ``state`` (type, name, message) at ``at``: the fields Prefect's engine sends, so the
    server builds the same task run from it (``end`` None: still running)."""
    state_type, state_name, message = state
    task_run = {
        "name": name,
        "task_key": task_key,
        "dynamic_key": dynamic_key,
        "task_version": None,
        "empirical_policy": {"retries": 0, "retry_delay": 0},  # as the engine records a task without retries
        "tags": list(tags),
        "labels": {},
        "task_inputs": inputs,
        "run_count": 1,
        "flow_run_run_count": 1,
        "expected_start_time": _iso(start),
        "start_time": _iso(start),
        "end_time": None if end is None else _iso(end),
        "total_run_time": 0.0 if end is None else max(0.0, end - start),
    }
    validated: dict[str, Any] = {
        "type": state_type,
        "name": state_name,
        "message": message,
        "state_details": {},
        "data": None,
    }
    return {
        "event": f"prefect.task-run.{state_name}",
        "id": uuid.uuid4(),
        "occurred": datetime.fromtimestamp(at, tz=UTC),
        "resource": {
            "prefect.resource.id": f"prefect.task-run.{run_id}",
            "prefect.resource.name": name,
            "prefect.run-count": "1",
            "prefect.state-message": message,
            "prefect.state-name": state_name,
            "prefect.state-timestamp": _iso(at),
            "prefect.state-type": state_type,
            "prefect.orchestration": "client",
        },
        "related": [{"prefect.resource.id": f"prefect.flow-run.{flow_run_id}", "prefect.resource.role": "flow-run"}],
        "payload": {
            "intended": {"from": None, "to": state_type},
            "initial_state": None,
            "validated_state": validated,
            "task_run": task_run,
        },
    }


def task_context(task: Any) -> Any:
    """What a cache policy's ``compute_key`` reads of its task-run context: the task (its name
    and source), without a task run."""
    return SimpleNamespace(task=task)


def task_result_store(task: Any) -> ResultStore:
    """The result store Prefect's engine would use for ``task`` (its storage and serializer),
    built synchronously outside a task run."""
    return cast(ResultStore, ResultStore().update_for_task(task, _sync=True))  # type: ignore[call-arg]


class CacheRecords(ResolvedLocalFileSystem):
    """The folder of a run's cache records (``.cache/<key>``), as Prefect's task engine reads
    it: only APE's JSON records, pointed at this folder's results.

    Every record the engine reads passes :func:`ape.tasks.storage.cache_format.checked_record`
    first: one that is not APE's JSON record (a pickle, a record naming another serializer,
    a result file that does not validate) raises before Prefect parses it, so the engine
    counts it as no cache entry and runs the stage; nothing a record names is imported or
    unpickled. The refusal is counted and warned once per run
    (:data:`~ape.tasks.storage.cache_format.REFUSED`).

    Prefect's record names its result file by its absolute path, and its local result
    storage refuses any path outside its own folder: after ``cp -r out copy`` or ``mv``,
    every cached session failed with "Provided path ... is outside of the base path". A
    record read through this class names the file of the same name in the current result
    storage instead (:func:`~ape.tasks.storage.cache_format.relocated`).
    """

    _block_type_name = "APE cache records"  # its own block type: never mistaken for LocalFileSystem

    async def aread_path(self, path: str) -> bytes:
        return self._checked(await super().aread_path(path), path)

    def read_path(self, path: str, **options: Any) -> Any:
        """Prefect's ``read_path`` (sync, or a coroutine in async code), checked and relocated."""
        content = super().read_path(path, **options)
        if inspect.isawaitable(content):
            return self._checked_later(content, path)
        return self._checked(content, path)

    async def _checked_later(self, pending: Awaitable[bytes], path: str) -> bytes:
        return self._checked(await pending, path)

    def _checked(self, content: bytes, path: str) -> bytes:
        try:
            return checked_record(content, f"{CACHE_DIR}/{Path(path).name}")[0]
        except ForeignRecord as exc:
            REFUSED.note(str(self.basepath), str(exc))
            raise


# --------------------------------------------------------------------------- the API guard


class ApiRefused(RuntimeError):
    """Raised in place of a request to the Prefect API after its server was proven gone."""


@dataclass
class _Guard:
    gone: Callable[[], str | None]
    holding: Callable[[], bool]


_GUARD: list[_Guard] = []  # the one guard installed (a list, so the hooks read it without a global)
_INSTALLED: list[bool] = []  # the hooks are in Prefect's classes


def guard_api(gone: Callable[[], str | None], *, holding: Callable[[], bool]) -> None:
    """Ask ``gone()`` before every request of Prefect's clients in this process (see the
    module's docstring): None lets it go; a reason (the server died, another process holds
    its port) stops it before anything is sent, so no credentials leave the process.

    A stopped caller is held for good while ``holding()`` is True (the process is being
    ended, :mod:`ape.watchdog`): an exception would fail the task run or session that asked,
    and a failure must not be saved as the run's result. Otherwise it gets
    :class:`ApiRefused`. ``gone`` runs on every request, in any thread: it must not block.
    Installing again replaces the checks; the hooks are put in once.
    """
    _GUARD[:] = [_Guard(gone, holding)]
    if _INSTALLED:
        return
    sync_send = httpx.Client._send_single_request
    async_send = httpx.AsyncClient._send_single_request

    def guarded_sync(self: httpx.Client, request: httpx.Request) -> httpx.Response:
        if _stopped():
            threading.Event().wait()  # held until the process ends (never set)
        return sync_send(self, request)

    async def guarded_async(self: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
        if _stopped():
            await asyncio.Event().wait()
        return await async_send(self, request)

    hooks: list[tuple[type, str, Callable[..., Any]]] = [
        (PrefectHttpxSyncClient, "_send_single_request", guarded_sync),
        (PrefectHttpxAsyncClient, "_send_single_request", guarded_async),
    ]
    events: list[tuple[type, str]] = [
        (PrefectEventsClient, "_reconnect"),  # a connection, with the credentials in its headers
        (PrefectEventsClient, "_emit"),
        (PrefectEventSubscriber, "_reconnect"),
    ]
    hooks += [(owner, name, _guarded_coroutine(getattr(owner, name))) for owner, name in events]
    for owner, name, hook in hooks:
        setattr(owner, name, hook)
    _INSTALLED.append(True)


def _stopped() -> bool:
    """True when the caller must be held; raises :class:`ApiRefused` when it must be refused."""
    for guard in _GUARD:
        reason = guard.gone()
        if reason is not None:
            if guard.holding():
                return True
            raise ApiRefused(f"not sent to the Prefect API: {reason}")
    return False


def _guarded_coroutine(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _stopped():
            await asyncio.Event().wait()
        return await method(self, *args, **kwargs)

    return guarded
