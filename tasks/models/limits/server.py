"""Per-endpoint limits that live on the Prefect server: shared by every run, changed live.

With a real Prefect server (``PREFECT_API_URL`` set), a model's ``max_concurrency`` and
``requests_per_second`` become Prefect *global concurrency limits* named after the endpoint
and the model (:func:`limit_names`), for example ``ape:127.0.0.1:8000:qwen2`` and
``ape:127.0.0.1:8000:qwen2:per-second``. Every run that talks to that server and that
endpoint takes its slots from the same limit, so two runs (a nightly one and one by hand)
add up to the limit, not to twice it; a change made on the UI's Concurrency page or with
``prefect gcl update NAME --limit N`` reaches running evaluations within about a second
(:data:`POLL_S`), without a restart.

Ownership: the first run that finds no such limit creates it with its config's value; from
then on the server's value holds. A config that asks for another value does not change it:
one line says which value holds and why, and :func:`limit_notes` records it (and every
change seen mid-run) for the run's ``metadata.json``. To take the config's value, update or
delete the limit on the server.

Why leases of several slots, lent locally: one Prefect ``concurrency()`` call per request
costs an acquire, a lease renewal thread and a release (three HTTP requests and events) per
model call: at 256 workers and 0.5 s latency that is 1,500 requests a second to a server
on the same machine. :class:`ServerSlots` instead takes slots in blocks (one lease of up
to :data:`BLOCK` slots), lends them to this process's workers one request at a time, and
hands a lease back when

- the process no longer needs it (all its slots free, nobody waiting, for :data:`IDLE_S`),
- the server's limit went down below what this process holds (read every :data:`POLL_S`),
- the limit is full, another process waits for it and the lease is older than
  :data:`HOLD_S`: runs sharing a full limit take turns. Prefect's API does not say who waits
  (``denied_slots`` is not in its answers), so a process that holds no slot and is refused
  says so in a Prefect variable, ``ape_waiting_<hash of the limit's name>`` (:func:`waiting_variable`);
  holders read it only while the limit is full. The lease with the most free slots goes
  first, one per reading, and the holder leaves its slots to the others for a moment. A
  process alone at its limit never hands back a slot it needs.

A slot is only ever lent while its lease is held, so the requests in flight across all
processes never exceed the server's limit. A lease lasts :data:`LEASE_S` and is renewed
while held: a crashed process's slots come back when its leases expire.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import math
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID, uuid4

from ape.schemas.config import ModelConfig
from ape.tasks.models.limits.limiter import Limiter
from ape.tasks.storage import prefect_api

log = logging.getLogger("ape.models")

__all__ = [
    "ServerRate",
    "close_all",
    "ServerSlots",
    "SharedLimiter",
    "limit_names",
    "limit_notes",
    "server_limits_enabled",
]

BLOCK = 16  # most slots one lease takes
HOLD_S = 5.0  # a lease older than this is handed back when another process waits (turns)
WAIT_SIGNAL_S = 3.0  # how long a waiting process's signal counts
FAILURES = 5  # the server failing this many times in a row (1 + 2 + ... s apart) fails the calls
TURN_S = 2.0  # after handing a lease back for a turn, the others have this long to take it
IDLE_S = 0.5  # a lease no worker used for this long is handed back
POLL_S = 0.5  # how often the limit is read and a refused acquisition asked again
LEASE_S = 60.0  # a lease's time to live on the server (renewed while held; Prefect's least):
# a process killed before it handed its leases back blocks their slots this long at most

BUSY = frozenset({408, 429, 502, 503})  # answers Prefect's client retries: the server is busy
BUSY_RETRY_S = 0.2  # a rate acquisition the server was too busy for is asked again this soon
BUSY_GIVE_UP_S = 60.0  # ... until it has been busy this long: then the call fails

# Prefect refuses these characters in names (prefect.types.names.BANNED_CHARACTERS)
_BANNED = re.compile(r"[/%&<>]")


def _endpoint(cfg: ModelConfig) -> str:
    """Where the model's requests go: the host:port of ``base_url``, else the provider or class."""
    if cfg.base_url:
        parts = urlsplit(cfg.base_url)
        return parts.netloc or cfg.base_url
    return (cfg.provider or cfg.class_ or "model").strip().lower()


def limit_names(cfg: ModelConfig) -> tuple[str, str]:
    """The names of the concurrency limit and the rate limit of a model: ``ape:<endpoint>:<model>``
    and the same with ``:per-second``; characters Prefect refuses in names (``/ % & < >``) become ``_``."""
    base = _BANNED.sub("_", f"ape:{_endpoint(cfg)}:{cfg.model or cfg.model_id}")
    return base, f"{base}:per-second"


def waiting_variable(name: str) -> str:
    """The Prefect variable in which processes waiting for the limit ``name`` say so (variable
    names allow letters, digits, ``-`` and ``_`` only)."""
    return "ape_waiting_" + hashlib.sha256(name.encode()).hexdigest()[:16]


def server_limits_enabled() -> bool:
    """True when a real Prefect server is configured; Prefect's temporary server keeps no
    limits between processes, so the in-process limiter stays then."""
    return bool(prefect_api.api_url())


# -- what the run records ------------------------------------------------------------------
_NOTES: dict[str, dict[str, Any]] = {}
_NOTES_LOCK = threading.Lock()


def _note(name: str, **values: Any) -> None:
    with _NOTES_LOCK:
        _NOTES.setdefault(name, {"name": name, "changes": []}).update(values)


def _note_change(name: str, change: dict[str, Any]) -> None:
    with _NOTES_LOCK:
        _NOTES.setdefault(name, {"name": name, "changes": []})["changes"].append(change)


def limit_notes(names: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """What this process saw of the server limits ``names``: the config's value, the value
    that held and why, and each change seen while the run went (for ``metadata.json``)."""
    with _NOTES_LOCK:
        return [{**_NOTES[name], "changes": list(_NOTES[name]["changes"])} for name in names if name in _NOTES]


SWITCHED_OFF = 10**9  # what a limit switched off (inactive) on the server lends: no limit


def shown_limit(value: float) -> float | str:
    """A limit as the log and ``metadata.json`` show it: its number, or "switched off" for a
    limit made inactive on the server (lent internally as :data:`SWITCHED_OFF` slots, a number
    nobody set)."""
    return "switched off" if value >= SWITCHED_OFF else value


def change_line(name: str, before: float, after: float) -> str:
    """The log line of a limit changed on the server while a run goes."""
    if after >= SWITCHED_OFF:
        return f"the server's limit {name} was switched off (it was {before}): it no longer limits the calls"
    if before >= SWITCHED_OFF:
        return f"the server's limit {name} was switched on again, at {after}"
    return f"the server's limit {name} changed from {before} to {after}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- the limits themselves ---------------------------------------------------------------
ClientFactory = Callable[[], Any]


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _retry_after(exc: BaseException, default: float) -> float:
    try:
        return float(exc.response.headers.get("Retry-After", default))  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return default


def _ensure(client: Any, name: str, model_id: str, key: str, wanted: float, decay: float | None) -> Any:
    """Read the limit ``name``, creating it with the config's value when the server has none;
    log and note which value holds when they differ. Returns the server's limit."""
    not_found, already_exists = prefect_api.object_errors()
    try:
        current = client.read_global_concurrency_limit_by_name(name)
    except not_found:
        create: dict[str, Any] = {"name": name, "limit": int(math.ceil(wanted)) if decay else int(wanted)}
        if decay:
            create["slot_decay_per_second"] = decay
        try:
            prefect_api.create_global_limit(client, create)
            log.info("%s: created the server's limit %s from [model] %s = %s", model_id, name, key, wanted)
            _note(name, config_value=wanted, server_value=wanted, holds="config", why="created by this run")
        except already_exists:  # another run created it a moment ago: its value holds
            pass
        current = client.read_global_concurrency_limit_by_name(name)
    server_value = current.slot_decay_per_second if decay else current.limit
    if name not in _NOTES:
        if server_value == wanted:
            _note(name, config_value=wanted, server_value=server_value, holds="both", why="the values agree")
        else:
            why = (
                "the server owns the limit once created; update it there (Concurrency page or "
                "`prefect gcl update`) or delete it to take the config's value"
            )
            log.warning(
                "%s: the server's limit %s is %s, [model] %s is %s: the server's value holds (%s)",
                model_id,
                name,
                server_value,
                key,
                wanted,
                why,
            )
            _note(name, config_value=wanted, server_value=server_value, holds="server", why=why)
    return current


@dataclass
class _Lease:
    id: UUID
    slots: int
    taken_at: float
    renewed_at: float
    free: int = 0
    retiring: bool = False
    turn: bool = False  # handed back so that another process gets a turn
    idle_since: float = field(default_factory=time.monotonic)


class ServerSlots:
    """Concurrency slots of one global concurrency limit, taken in leases and lent to this
    process's workers (module docstring). Same ``acquire()`` as the in-process limiter."""

    def __init__(self, name: str, model_id: str, config_value: int, client: ClientFactory = prefect_api.sync_client):
        self.name = name
        self.model_id = model_id
        self.config_value = config_value
        self._client_factory = client
        self._cond = threading.Condition()
        self._leases: list[_Lease] = []
        self._waiting = 0
        self._active = 0
        self.peak_concurrency = 0
        self.limit: int | None = None  # the server's, as last read
        self._full = False  # every slot of the limit taken, as last read
        self._others_wait = False  # ... and another process said it waits (waiting_variable)
        self._token = uuid4().hex  # this limiter's own waiting signals are not others'
        self._signalled = 0.0
        self._started = False
        self._closed = False
        self._error: BaseException | None = None
        self._wake = threading.Event()  # a worker found no free slot, or close()
        self._stop = threading.Event()  # close(): the keeper's waits end at once
        self._refused_until = 0.0  # the server said no: the next try waits till then
        self._refused = False  # ... and the next try asks for one slot

    # -- the workers' side -----------------------------------------------------------------
    @contextmanager
    def acquire(self) -> Iterator[None]:
        """Hold one request slot for the duration of the ``with`` block."""
        lease = self._take()
        try:
            with self._cond:
                self._active += 1
                self.peak_concurrency = max(self.peak_concurrency, self._active)
            yield
        finally:
            with self._cond:
                self._active -= 1
                lease.free += 1
                lease.idle_since = time.monotonic()
                self._cond.notify_all()

    def _take(self) -> _Lease:
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()
            try:
                while True:
                    self._start()
                    if self._error is not None:
                        raise self._error
                    lease = next((le for le in self._leases if le.free > 0 and not le.retiring), None)
                    if lease is not None:
                        lease.free -= 1
                        return lease
                    self._wake.set()  # the keeper asks the server for more
                    self._cond.wait(POLL_S)
            finally:
                self._waiting -= 1

    def _start(self) -> None:
        if not self._started:
            self._started = True
            self._thread = threading.Thread(target=self._keeper, name=f"ape-limit {self.name}", daemon=True)
            self._thread.start()
            _OPEN.add(self)

    # -- the keeper thread: takes, renews and hands back leases -----------------------------
    def _keeper(self) -> None:
        try:
            with self._client_factory() as client:
                current = _ensure(client, self.name, self.model_id, "max_concurrency", self.config_value, None)
                self._set_limit(current.limit)
                self._full = current.active_slots >= current.limit
                read_at = time.monotonic()
                failures = 0
                while not self._closed:
                    try:
                        if time.monotonic() - read_at >= POLL_S:
                            self._read(client)
                            read_at = time.monotonic()
                        self._hand_back(client)
                        self._renew(client)
                        fetched = self._fetch(client)
                        failures = 0
                    except Exception as exc:  # a busy or restarting server: a few tries, then the workers fail
                        failures += 1
                        if failures > FAILURES:
                            raise
                        log.warning(
                            "%s: the server's limit %s: %s: %s; asking again",
                            self.model_id,
                            self.name,
                            type(exc).__name__,
                            exc,
                        )
                        self._stop.wait(failures)
                        continue
                    if not fetched:  # nothing wanted, or refused: ask again later
                        self._wake.wait(POLL_S * random.uniform(0.5, 1.0))
                        if not self._closed:  # a refusal waits out its time, unless closed
                            self._stop.wait(max(0.0, self._refused_until - time.monotonic()))
                    self._wake.clear()
                for lease in self._leases:  # closed: hand everything back now
                    client.release_concurrency_slots_with_lease(lease.id)
                self._leases.clear()
        except BaseException as exc:  # the workers raise it: a limit that cannot be taken must not pass silently
            log.error("%s: the server's limit %s failed: %s: %s", self.model_id, self.name, type(exc).__name__, exc)
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _set_limit(self, value: int) -> None:
        if self.limit is not None and value != self.limit:
            log.warning("%s: %s", self.model_id, change_line(self.name, self.limit, value))
            was, now = shown_limit(self.limit), shown_limit(value)
            _note_change(self.name, {"at": _now(), "from": was, "to": now, "by": "the Prefect server"})
            _note(self.name, server_value=now)
        self.limit = value

    def _read(self, client: Any) -> None:
        not_found, _ = prefect_api.object_errors()
        try:
            current = client.read_global_concurrency_limit_by_name(self.name)
        except not_found:  # deleted mid-run: created again with the config's value
            current = _ensure(client, self.name, self.model_id, "max_concurrency", self.config_value, None)
        self._set_limit(current.limit if current.active else SWITCHED_OFF)
        self._full = current.active and current.active_slots >= current.limit
        self._others_wait = self._full and bool(self._leases) and self._waiting_signal(client)

    def _held(self) -> int:
        return sum(le.slots for le in self._leases)

    def _hand_back(self, client: Any) -> None:
        now = time.monotonic()
        release: list[_Lease] = []
        with self._cond:
            over = self._held() - (self.limit or 0)
            for lease in sorted(self._leases, key=lambda le: le.taken_at, reverse=True):
                if lease.retiring:
                    continue
                if over > 0:  # the limit went down: newest leases first
                    lease.retiring = True
                    over -= lease.slots
                elif lease.free == lease.slots and not self._waiting and now - lease.idle_since >= IDLE_S:
                    lease.retiring = True
            old = [le for le in self._leases if not le.retiring and now - le.taken_at >= HOLD_S]
            if self._others_wait and old:  # take turns: the one that drains soonest, one per reading
                turn = max(old, key=lambda le: le.free)
                turn.retiring = turn.turn = True
                self._others_wait = False
            for lease in self._leases:
                if lease.retiring and lease.free == lease.slots:
                    release.append(lease)
            for lease in release:
                self._leases.remove(lease)
                if lease.turn:  # the others get the first chance at its slots: ask again later
                    self._refused_until = time.monotonic() + TURN_S
        for lease in release:
            client.release_concurrency_slots_with_lease(lease.id)

    def _renew(self, client: Any) -> None:
        now = time.monotonic()
        for lease in list(self._leases):
            if now - lease.renewed_at >= LEASE_S / 2:
                client.renew_concurrency_lease(lease_id=lease.id, lease_duration=LEASE_S)
                lease.renewed_at = now

    def _fetch(self, client: Any) -> bool:
        """Take one lease for the workers that wait and have no slot; False when there is
        nothing to do or the server refused (the caller waits before asking again)."""
        with self._cond:
            lendable = sum(le.free for le in self._leases if not le.retiring)
            need = self._waiting - lendable
            limit = self.limit or 0
        if need <= 0 or limit <= 0 or time.monotonic() < self._refused_until:
            return False
        # refused last time: one slot is what a turn frees first, and asks the server once
        slots = 1 if self._refused else max(1, min(need, BLOCK, limit))
        while True:
            try:
                response = client.increment_concurrency_slots_with_lease(
                    names=[self.name], slots=slots, mode="concurrency", lease_duration=LEASE_S
                )
            except Exception as exc:
                status = _status(exc)
                if status == 423 and slots > 1:
                    slots //= 2
                    continue
                if status in (422, 423):  # busy, or the limit went down below the block
                    self._refused = True
                    self._refused_until = time.monotonic() + POLL_S * random.uniform(0.5, 1.0)
                    if status == 423 and not self._leases:
                        self._signal_waiting(client)
                    return False
                raise
            body = response.json()
            if not body.get("limits"):  # switched off on the server: the lease holds nothing
                slots = max(slots, self._waiting)
            self._refused = False
            now = time.monotonic()
            with self._cond:
                self._leases.append(_Lease(UUID(body["lease_id"]), slots, now, now, free=slots))
                self._cond.notify_all()
            return True

    def _waiting_signal(self, client: Any) -> bool:
        """True when another process said, within :data:`WAIT_SIGNAL_S`, that it waits."""
        variable = client.read_variable_by_name(waiting_variable(self.name))
        value = getattr(variable, "value", None)
        if not isinstance(value, dict) or value.get("token") == self._token:
            return False
        return time.time() - float(value.get("at", 0.0)) <= WAIT_SIGNAL_S

    def _signal_waiting(self, client: Any) -> None:
        """Say that this process waits for the limit and holds none of it (at most once a second)."""
        _, already_exists = prefect_api.object_errors()
        if time.monotonic() - self._signalled < 1.0:
            return
        self._signalled = time.monotonic()
        name, value = waiting_variable(self.name), {"token": self._token, "at": time.time()}
        try:
            prefect_api.create_variable(client, name, value, ["ape"])
        except already_exists:
            prefect_api.update_variable(client, name, value)

    def close(self, timeout_s: float = 60.0) -> None:
        """Hand every lease back and stop the keeper (at the process's end: :func:`close_all`).
        Waits for the keeper, whose last act is to hand the leases back: a process that ended
        first would leave its slots taken until their leases expire."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._wake.set()
        self._stop.set()
        if self._started:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning(
                    "%s: the server's limit %s: slots not handed back within %.0f s (the server "
                    "frees them when their leases expire, within %.0f s)",
                    self.model_id,
                    self.name,
                    timeout_s,
                    LEASE_S,
                )
                return  # the keeper hands them back when it gets there; it must not start again
        _OPEN.discard(self)
        with self._cond:  # the next request starts a new keeper (``ape serve`` runs on)
            self._started = self._closed = False
            self._error = None
            self._stop.clear()


_OPEN: weakref.WeakSet[ServerSlots] = weakref.WeakSet()


EXIT_WAIT_S = 10.0  # at the interpreter's exit: a server gone away must not hold the process


@atexit.register
def close_all(timeout_s: float | None = None) -> None:
    """Hand back the slots this process holds, so other runs need not wait for the leases to
    expire; runs at the interpreter's exit (``ape run`` ends) and after each evaluation. The
    wait is short: a server that no longer answers frees the slots itself when their leases
    expire, and the process should not sit a minute at its end for it."""
    wait_s = EXIT_WAIT_S if timeout_s is None else timeout_s
    for slots in list(_OPEN):
        slots.close(wait_s)


class ServerRate:
    """Requests per second from a global concurrency limit with slot decay (a Prefect rate
    limit): one slot taken from the server per call.

    One caller at a time asks the server, on one connection kept open, and the process's
    other workers queue behind it. Before, every waiting worker asked on its own new
    connection every 1/R s; a server busy with the runs' own reports answered some of those
    acquisitions 503 (SQLite busy, after about 2 s), and Prefect's client retried them 2, 4,
    8, 16 and 32 s later: calls waited up to 63 s while the rate was free. Now a busy answer
    is asked again after :data:`BUSY_RETRY_S` (:meth:`_no_client_retries`); measured in
    tests/integration/test_server_rate.py, the longest call of two runs at 4 per second went
    from 63.7 s to 8.9 s. The turn also reads the limit every :data:`POLL_S`, so a rate
    changed on the server is logged and recorded like a concurrency limit's change."""

    def __init__(self, name: str, model_id: str, per_second: float, client: ClientFactory = prefect_api.sync_client):
        self.name = name
        self.model_id = model_id
        self.per_second = per_second
        self._client_factory = client
        self._turn = threading.Lock()  # the caller holding it asks the server; the others queue
        self._client: Any = None  # opened by the first call, kept for the next
        self.rate: float | None = None  # the server's, as last read
        self._read_at = 0.0
        self._settings: Any = None  # Prefect's settings without the client's own retries

    def wait(self) -> None:
        """Return once this call may go: one slot taken from the server's rate limit."""
        with self._turn:
            if self._client is None:
                client = self._client_factory()
                client.__enter__()
                self._client = client
                self._set_rate(self._ensure(client))
                self._read_at = time.monotonic()
            client = self._client
            busy_since: float | None = None
            while True:
                if time.monotonic() - self._read_at >= POLL_S:
                    self._read(client)
                try:
                    with self._no_client_retries():
                        client.increment_concurrency_slots(names=[self.name], slots=1, mode="rate_limit")
                    return
                except Exception as exc:
                    status = _status(exc)
                    if status in (422, 423):  # the rate is spent: as long as the server says
                        busy_since = None
                        time.sleep(min(_retry_after(exc, POLL_S), 1.0))
                        continue
                    if status not in BUSY and not _transport_error(exc):
                        raise
                    busy_since = busy_since or time.monotonic()  # busy (SQLite) or restarting
                    if time.monotonic() - busy_since > BUSY_GIVE_UP_S:
                        raise
                    time.sleep(BUSY_RETRY_S * random.uniform(0.5, 1.5))

    def _no_client_retries(self) -> Any:
        """A settings context in which Prefect's client does not retry by itself: it would
        wait 2, 4, 8, 16 and 32 s after a busy answer while the turn (and every call of this
        process) waits behind it; :meth:`wait` asks again after :data:`BUSY_RETRY_S`."""
        context, self._settings = prefect_api.settings_without_retries(self._settings)  # the copy made once
        return context

    def _read(self, client: Any) -> None:
        not_found, _ = prefect_api.object_errors()
        try:
            current = client.read_global_concurrency_limit_by_name(self.name)
        except not_found:  # deleted mid-run: created again with the config's value
            current = self._ensure(client)
        self._set_rate(current)
        self._read_at = time.monotonic()

    def _ensure(self, client: Any) -> Any:
        return _ensure(client, self.name, self.model_id, "requests_per_second", self.per_second, self.per_second)

    def _set_rate(self, current: Any) -> None:
        value: float = current.slot_decay_per_second if current.active else float(SWITCHED_OFF)
        if self.rate is not None and value != self.rate:
            log.warning("%s: %s", self.model_id, change_line(self.name, _number(self.rate), _number(value)))
            was, now = shown_limit(_number(self.rate)), shown_limit(_number(value))
            _note_change(self.name, {"at": _now(), "from": was, "to": now, "by": "the Prefect server"})
            _note(self.name, server_value=now)
        self.rate = value

    def close(self) -> None:
        """Close the connection to the server (the next call opens another). A call still
        waiting for the rate (a limit of 0) keeps it: closing must not wait for that."""
        if not self._turn.acquire(timeout=1.0):
            return
        try:
            client, self._client = self._client, None
        finally:
            self._turn.release()
        if client is not None:
            client.__exit__(None, None, None)


def _transport_error(exc: BaseException) -> bool:
    """The request did not reach the server, or its answer did not come back (httpx)."""
    import httpx  # noqa: PLC0415 - Prefect's client brings it; only runs with a server need it

    return isinstance(exc, httpx.TransportError)


def _number(value: float) -> float:
    """A rate as the log shows it: 4, not 4.0; 0.5 as it is."""
    return int(value) if float(value).is_integer() else value


class SharedLimiter(Limiter):
    """The server's rate limit, then the server's concurrency limit, around each request."""

    def __init__(self, cfg: ModelConfig, client: ClientFactory = prefect_api.sync_client):
        slots_name, rate_name = limit_names(cfg)
        self.names = tuple(n for n, v in ((slots_name, cfg.max_concurrency), (rate_name, cfg.requests_per_second)) if v)
        self.slots = ServerSlots(slots_name, cfg.model_id, cfg.max_concurrency, client) if cfg.max_concurrency else None
        per_second = cfg.requests_per_second
        self.rate = ServerRate(rate_name, cfg.model_id, per_second, client) if per_second else None

    @property
    def peak_concurrency(self) -> int:  # type: ignore[override]
        return self.slots.peak_concurrency if self.slots is not None else 0

    def close(self) -> None:
        if self.slots is not None:
            self.slots.close()
        if self.rate is not None:
            self.rate.close()

    @contextmanager
    def acquire(self) -> Iterator[None]:
        if self.rate is not None:
            self.rate.wait()
        if self.slots is None:
            yield
            return
        with self.slots.acquire():
            yield
