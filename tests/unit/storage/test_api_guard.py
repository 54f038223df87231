"""The guard on Prefect's clients (prefect_internals.guard_api): once the server is gone, no
request of Prefect's HTTP or events clients is sent, a retry already under way included."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import prefect
import pytest
from prefect.client.base import PrefectHttpxAsyncClient, PrefectHttpxSyncClient
from prefect.events.clients import PrefectEventsClient

from ape.tasks.storage import prefect_internals
from ape.tasks.storage.prefect_internals import ApiRefused, guard_api


class Gone:
    """What the watchdog answers: None while the server is proven, else why not."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def __call__(self) -> str | None:
        return self.reason


@pytest.fixture
def gone() -> Iterator[Gone]:
    state = Gone()
    guard_api(state, holding=lambda: False)
    yield state
    prefect_internals._GUARD.clear()  # the hooks stay in, asking nothing


def test_checked_with_this_prefect() -> None:
    assert prefect.__version__ in prefect_internals.CHECKED_WITH


def test_sync_client_sends_nothing_once_gone(gone: Gone) -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json=True))
    with PrefectHttpxSyncClient(base_url="http://127.0.0.1:9/api", transport=transport) as client:
        assert client.get("/health").json() is True
        gone.reason = "APE's Prefect server (pid 1) died mid-run"
        with pytest.raises(ApiRefused, match=r"not sent to the Prefect API: APE's Prefect server \(pid 1\) died"):
            client.get("/flow_runs/x", headers={"Authorization": "Basic secret"})
    assert [request.url.path for request in sent] == ["/api/health"]


def test_a_retry_under_way_is_stopped_too(gone: Gone, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect's client retries a 503 by itself: the server dies between two tries (as a
    refused connection during a restart would be retried), the next try is not sent."""
    monkeypatch.setenv("PREFECT_CLIENT_MAX_RETRIES", "3")
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        gone.reason = "the server died"
        return httpx.Response(503, headers={"Retry-After": "0"})

    with PrefectHttpxSyncClient(base_url="http://127.0.0.1:9/api", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ApiRefused):
            client.post("/task_runs/", json={})
    assert len(sent) == 1


def test_async_client_sends_nothing_once_gone(gone: Gone) -> None:
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json=True))

    async def main() -> None:
        async with PrefectHttpxAsyncClient(base_url="http://127.0.0.1:9/api", transport=transport) as client:
            await client.get("/health")
            gone.reason = "port 9 is held by pid 2 (python3) of uid 1000 (eve)"
            with pytest.raises(ApiRefused, match="held by pid 2"):
                await client.get("/flow_runs/x")

    asyncio.run(main())
    assert len(sent) == 1


def test_events_client_opens_no_connection_once_gone(gone: Gone) -> None:
    client = PrefectEventsClient(api_url="http://127.0.0.1:9/api")
    opened: list[bool] = []

    class Connect:
        async def __aenter__(self) -> None:
            opened.append(True)

    client._connect = Connect()  # type: ignore[assignment]
    gone.reason = "the server died"
    with pytest.raises(ApiRefused):
        asyncio.run(client._reconnect())
    assert opened == []


def test_a_held_caller_waits_and_sends_nothing(gone: Gone) -> None:
    """While the watchdog ends the process, a refused caller is held instead of failing (its
    failure could be saved as a session's result); it never reaches the transport."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json=True))
    guard_api(gone, holding=lambda: True)
    gone.reason = "the server died"
    client = PrefectHttpxSyncClient(base_url="http://127.0.0.1:9/api", transport=transport)
    caller = threading.Thread(target=lambda: client.get("/flow_runs/x"), daemon=True)  # held for good
    caller.start()
    caller.join(0.5)
    assert caller.is_alive() and sent == []
