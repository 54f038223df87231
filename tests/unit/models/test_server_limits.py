"""Which limiter a model gets, the names of its server limits, and how slots are lent
(ape.tasks.models.limits.server). The server here is a small fake that counts slots as
Prefect's does; the real server is in tests/integration/test_server_limits.py."""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

from ape.schemas.config import ModelConfig
from ape.tasks.models.limits import server as server_limits
from ape.tasks.models.limits.policy import RateLimiter, limiter_for, uses_server_limits
from ape.tasks.models.limits.server import ServerRate, ServerSlots, SharedLimiter, limit_names, limit_notes


def test_names_are_valid_prefect_names_and_name_endpoint_and_model() -> None:
    cfg = ModelConfig(provider="openai", model="Qwen/Qwen2-7B<x>", base_url="http://gpu-1:8000/v1", max_concurrency=2)
    slots, rate = limit_names(cfg)
    assert slots == "ape:gpu-1:8000:Qwen_Qwen2-7B_x_"
    assert rate == slots + ":per-second"
    for name in (slots, rate):
        GlobalConcurrencyLimitCreate(name=name, limit=1)  # Prefect refuses / % & < > in names
    assert limit_names(ModelConfig(provider="mock", model="echo"))[0] == "ape:mock:echo"


def test_without_a_real_server_the_in_process_limiter_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    cfg = ModelConfig(provider="mock", model="echo", max_concurrency=3)
    with temporary_settings({PREFECT_API_URL: None}):
        assert not uses_server_limits(cfg)
        assert isinstance(limiter_for(cfg.model_id, cfg), RateLimiter)
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:1/api"}):
        assert uses_server_limits(cfg)
        assert not uses_server_limits(cfg.model_copy(update={"shared_limits": False}))
        assert not uses_server_limits(ModelConfig(provider="mock", model="echo"))  # no limit set: none taken
        assert not uses_server_limits(ModelConfig(provider="llama-cpp", model="x", max_concurrency=2))
        assert isinstance(limiter_for("other", cfg), SharedLimiter)


class FakeServer:
    """Counts slots of one limit like Prefect's server: an acquisition of more than are free is
    refused (423), more than the limit is refused (422)."""

    def __init__(self, name: str, limit: int | None) -> None:
        self.name = name
        self.limit = limit
        self.active = 0
        self.leases: dict[uuid.UUID, int] = {}
        self.lock = threading.Lock()
        self.acquisitions = 0
        self.releases = 0
        self.variables: dict[str, Any] = {}
        self.switched_on = True  # False: made inactive (the UI's toggle, `prefect gcl disable`)

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def _refuse(self, status: int) -> httpx.HTTPStatusError:
        request = httpx.Request("POST", "http://fake")
        return httpx.HTTPStatusError("no", request=request, response=httpx.Response(status, request=request))

    def read_global_concurrency_limit_by_name(self, name: str) -> Any:
        if self.limit is None:
            raise ObjectNotFound(http_exc=self._refuse(404))
        return SimpleNamespace(
            limit=self.limit, active=self.switched_on, active_slots=self.active, slot_decay_per_second=0.0
        )

    def create_global_concurrency_limit(self, create: GlobalConcurrencyLimitCreate) -> uuid.UUID:
        self.limit = create.limit
        return uuid.uuid4()

    def increment_concurrency_slots_with_lease(
        self, names: list[str], slots: int, mode: str, lease_duration: float
    ) -> Any:
        with self.lock:
            assert self.limit is not None
            if slots > self.limit:
                raise self._refuse(422)
            if self.active + slots > self.limit:
                raise self._refuse(423)
            self.active += slots
            self.acquisitions += 1
            lease = uuid.uuid4()
            self.leases[lease] = slots
        return SimpleNamespace(json=lambda: {"lease_id": str(lease), "limits": [{"name": self.name}]})

    def release_concurrency_slots_with_lease(self, lease_id: uuid.UUID) -> None:
        with self.lock:
            self.active -= self.leases.pop(lease_id)
            self.releases += 1

    def renew_concurrency_lease(self, lease_id: uuid.UUID, lease_duration: float) -> None:
        pass

    def read_variable_by_name(self, name: str) -> Any:
        return self.variables.get(name)

    def create_variable(self, variable: Any) -> None:
        if variable.name in self.variables:
            raise ObjectAlreadyExists(http_exc=self._refuse(409))
        self.variables[variable.name] = variable

    def update_variable(self, variable: Any) -> None:
        self.variables[variable.name] = variable


def _until(condition: Any, timeout_s: float = 20.0) -> None:
    """Wait for ``condition()``; a generous timeout that only a broken limiter runs into."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


CALLS = [0]  # calls made inside a slot by _hammer's workers, all tests together


def _hammer(
    slots: ServerSlots, workers: int, stop: threading.Event, inside: list[int], peak: list[int]
) -> list[threading.Thread]:
    lock = threading.Lock()
    calls = CALLS

    def work() -> None:
        while not stop.is_set():
            with slots.acquire():
                with lock:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                    calls[0] += 1
                time.sleep(0.01)
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for thread in threads:
        thread.start()
    return threads


def test_slots_come_in_blocks_follow_the_servers_limit_and_go_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_limits, "POLL_S", 0.05)
    server = FakeServer("ape:x:m", limit=None)
    slots = ServerSlots("ape:x:m", "m", 6, client=lambda: server)
    stop, inside, peak = threading.Event(), [0], [0]
    threads = _hammer(slots, 20, stop, inside, peak)
    try:
        _until(lambda: peak[0] == 6)
        CALLS[0] = 0
        before = server.acquisitions
        _until(lambda: CALLS[0] >= 120)
        assert server.limit == 6  # created with the config's value
        assert server.active <= 6
        # blocks, not one acquisition per call (timing on a busy machine may hand a lease back and take it again)
        assert server.acquisitions - before <= CALLS[0] // 10, (server.acquisitions - before, CALLS[0])
        server.limit = 2  # lowered on the server: the process hands slots back
        _until(lambda: server.active <= 2 and slots.limit == 2)
        time.sleep(0.3)
        peak[0] = 0
        time.sleep(0.5)
        assert peak[0] <= 2 and server.active <= 2
        server.limit = 12  # raised: reached without a restart
        _until(lambda: peak[0] == 12)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        slots.close()
    assert server.active == 0  # closed: every lease handed back
    (note,) = limit_notes(["ape:x:m"])
    assert note["holds"] == "config" and [(c["from"], c["to"]) for c in note["changes"]] == [(6, 2), (2, 12)]


def test_a_limit_switched_off_and_on_is_said_so_not_shown_as_a_number(
    monkeypatch: pytest.MonkeyPatch, ape_log: pytest.LogCaptureFixture
) -> None:
    """A limit made inactive on the server no longer limits; the log and metadata.json said it
    "changed from 3 to 1000000000" (the number lent internally), now "switched off"."""
    monkeypatch.setattr(server_limits, "POLL_S", 0.05)
    server = FakeServer("ape:off:m", limit=3)
    slots = ServerSlots("ape:off:m", "m", 3, client=lambda: server)
    try:
        with slots.acquire():
            pass
        server.switched_on = False
        _until(lambda: slots.limit == server_limits.SWITCHED_OFF)
        server.switched_on, server.limit = True, 5
        _until(lambda: slots.limit == 5)
    finally:
        slots.close()
    lines = [r.getMessage() for r in ape_log.records if "ape:off:m" in r.getMessage()]
    assert "m: the server's limit ape:off:m was switched off (it was 3): it no longer limits the calls" in lines
    assert "m: the server's limit ape:off:m was switched on again, at 5" in lines
    assert not any("1000000000" in line for line in lines), lines
    (note,) = limit_notes(["ape:off:m"])
    assert [(c["from"], c["to"]) for c in note["changes"]] == [(3, "switched off"), ("switched off", 5)]
    assert note["server_value"] == 5


def test_a_limit_someone_changed_holds_over_the_config(ape_log: pytest.LogCaptureFixture) -> None:
    server = FakeServer("ape:y:m", limit=3)
    slots = ServerSlots("ape:y:m", "m", 5, client=lambda: server)
    with slots.acquire():
        assert server.active <= 3
    slots.close()
    lines = [r.getMessage() for r in ape_log.records if "holds" in r.getMessage()]
    assert lines == [
        "m: the server's limit ape:y:m is 3, [model] max_concurrency is 5: the server's value holds (the server "
        "owns the limit once created; update it there (Concurrency page or `prefect gcl update`) or delete it "
        "to take the config's value)"
    ]
    (note,) = limit_notes(["ape:y:m"])
    assert note["holds"] == "server" and note["server_value"] == 3 and note["config_value"] == 5


def test_a_process_that_waits_gets_a_turn_and_one_alone_keeps_its_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_limits, "POLL_S", 0.05)
    monkeypatch.setattr(server_limits, "HOLD_S", 0.5)
    server = FakeServer("ape:z:m", limit=4)
    first = ServerSlots("ape:z:m", "m", 4, client=lambda: server)
    stop, inside, peak = threading.Event(), [0], [0]
    threads = _hammer(first, 8, stop, inside, peak)
    second = ServerSlots("ape:z:m", "m", 4, client=lambda: server)
    try:
        time.sleep(1.5)  # alone at a full limit, past HOLD_S: nobody waits, so no lease went back
        assert server.releases == 0 and first.peak_concurrency == 4
        got = threading.Event()

        def one_call() -> None:
            with second.acquire():
                got.set()

        caller = threading.Thread(target=one_call)
        caller.start()
        assert got.wait(10), "the waiting process never got a turn"
        caller.join()
        assert server.active <= 4
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        first.close()
        second.close()
    assert server.active == 0


def test_the_process_does_not_sit_at_its_end_for_a_server_that_stopped_answering(
    monkeypatch: pytest.MonkeyPatch, ape_log: pytest.LogCaptureFixture
) -> None:
    """Handing the slots back at exit waits briefly: a server that no longer answers frees
    them itself when their leases expire (it used to hold the process a whole minute)."""
    assert server_limits.EXIT_WAIT_S <= 10.0
    monkeypatch.setattr(server_limits, "EXIT_WAIT_S", 0.3)
    answer = threading.Event()

    class Gone(FakeServer):
        def release_concurrency_slots_with_lease(self, lease_id: uuid.UUID) -> None:
            answer.wait(30)  # the request hangs: nothing answers
            super().release_concurrency_slots_with_lease(lease_id)

    server = Gone("ape:x:gone", limit=2)
    slots = ServerSlots("ape:x:gone", "m", 2, client=lambda: server)
    try:
        with slots.acquire():
            pass
        started = time.monotonic()
        server_limits.close_all()
        assert time.monotonic() - started < 5.0
        assert "frees them when their leases expire" in ape_log.text
    finally:
        answer.set()
        slots._thread.join(30)


class FakeRate(FakeServer):
    """A rate limit (slot decay) that refuses every other acquisition (423, Retry-After) and
    counts its clients and the acquisitions asked at the same moment."""

    def __init__(self, name: str, per_second: float) -> None:
        super().__init__(name, limit=int(per_second))
        self.per_second = per_second
        self.clients = 0
        self.asking = 0
        self.most_asking = 0
        self.granted = 0
        self.refused = 0

    def read_global_concurrency_limit_by_name(self, name: str) -> Any:
        limit = super().read_global_concurrency_limit_by_name(name)
        limit.slot_decay_per_second = self.per_second
        return limit

    def increment_concurrency_slots(self, names: list[str], slots: int, mode: str) -> None:
        assert mode == "rate_limit" and slots == 1
        with self.lock:
            self.asking += 1
            self.most_asking = max(self.most_asking, self.asking)
            refuse = (self.granted + self.refused) % 2 == 0
            self.refused += refuse
            self.granted += not refuse
        try:
            time.sleep(0.01)  # the server's answer takes a moment: callers asking together overlap
            if refuse:
                request = httpx.Request("POST", "http://fake")
                response = httpx.Response(423, request=request, headers={"Retry-After": "0.01"})
                raise httpx.HTTPStatusError("locked", request=request, response=response)
        finally:
            with self.lock:
                self.asking -= 1


def test_one_caller_at_a_time_asks_for_the_rate_on_one_connection() -> None:
    """Sixteen workers waiting for the rate: one asks the server at a time, on one client.
    Before, each waiting worker asked on its own new connection every 1/R s; on a real server
    the refusals made SQLite busy, and Prefect's client retried the 503s up to 62 s later."""
    server = FakeRate("ape:r:m:per-second", per_second=4)

    def client() -> FakeRate:
        server.clients += 1
        return server

    rate = ServerRate("ape:r:m:per-second", "m", 4, client=client)
    workers = [threading.Thread(target=rate.wait) for _ in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert server.granted == 16 and server.refused >= 15
    assert server.most_asking == 1
    assert server.clients == 1
    rate.close()
    rate.wait()  # closed: the next call opens another connection
    assert server.clients == 2


def test_a_rate_changed_on_the_server_is_logged_and_recorded(
    monkeypatch: pytest.MonkeyPatch, ape_log: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(server_limits, "POLL_S", 0.0)
    server = FakeRate("ape:c:m:per-second", per_second=4)
    rate = ServerRate("ape:c:m:per-second", "m", 4, client=lambda: server)
    rate.wait()
    server.per_second = 20
    rate.wait()
    server.per_second = 0.5
    rate.wait()
    server.switched_on = False
    rate.wait()
    lines = [r.getMessage() for r in ape_log.records if "ape:c:m:per-second" in r.getMessage()]
    assert lines == [
        "m: the server's limit ape:c:m:per-second changed from 4 to 20",
        "m: the server's limit ape:c:m:per-second changed from 20 to 0.5",
        "m: the server's limit ape:c:m:per-second was switched off (it was 0.5): it no longer limits the calls",
    ], lines
    (note,) = limit_notes(["ape:c:m:per-second"])
    assert [(c["from"], c["to"]) for c in note["changes"]] == [(4, 20), (20, 0.5), (0.5, "switched off")]
    assert note["server_value"] == "switched off" and note["config_value"] == 4


def test_a_busy_server_is_asked_again_at_once_not_after_prefects_backoff() -> None:
    """A rate acquisition the server answers 503 (SQLite busy) is asked again within a
    fraction of a second: Prefect's client, left to retry it, waited 2, 4, 8... s while every
    call of the process queued behind it (measured: increments of 2.0-6.0 s on a real server)."""
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES

    retries_seen: list[int] = []

    class Busy(FakeRate):
        def increment_concurrency_slots(self, names: list[str], slots: int, mode: str) -> None:
            retries_seen.append(PREFECT_CLIENT_MAX_RETRIES.value())
            if len(retries_seen) <= 3:
                request = httpx.Request("POST", "http://fake")
                raise httpx.HTTPStatusError("busy", request=request, response=httpx.Response(503, request=request))

    server = Busy("ape:b:m:per-second", per_second=4)
    rate = ServerRate("ape:b:m:per-second", "m", 4, client=lambda: server)
    started = time.monotonic()
    rate.wait()
    assert time.monotonic() - started < 2.0
    assert retries_seen == [0, 0, 0, 0]  # the client did not retry by itself
    assert PREFECT_CLIENT_MAX_RETRIES.value() > 0  # ... only inside the acquisition


def test_closing_does_not_wait_for_a_call_held_by_a_rate_of_zero() -> None:
    raised = threading.Event()  # the limit goes up from 0 at the end: the call gets its slot

    class Zero(FakeRate):
        def increment_concurrency_slots(self, names: list[str], slots: int, mode: str) -> None:
            if raised.is_set():
                return
            request = httpx.Request("POST", "http://fake")
            response = httpx.Response(423, request=request, headers={"Retry-After": "0.05"})
            raise httpx.HTTPStatusError("locked", request=request, response=response)

    server = Zero("ape:z:m:per-second", per_second=1)
    rate = ServerRate("ape:z:m:per-second", "m", 1, client=lambda: server)
    held = threading.Thread(target=rate.wait, daemon=True)  # never gets a slot
    held.start()
    _until(lambda: rate._client is not None)
    started = time.monotonic()
    rate.close()
    assert time.monotonic() - started < 3.0
    assert held.is_alive() and rate._client is server  # the waiting call keeps its connection
    raised.set()
    held.join(10)
    assert not held.is_alive()
