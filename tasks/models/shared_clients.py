"""One OpenAI-compatible client per model section and process, shared by every worker.

A run builds its model once per solver worker (:class:`ape.tasks.session.stages.Worker`)
and once per judge checker, because a model a user names by ``class`` may keep state
per instance. A ``ChatOpenAI`` keeps none between requests: it holds an ``openai.OpenAI``
client (and an async one), whose requests are thread-safe and go through one ``httpx``
connection pool. Building it per worker cost about a millisecond of CPU each time
(two SDK clients, pydantic validation, the model profile look-up) and far more for the
first one, with every worker building at once at the start of the run; at 256 workers
that is a quarter of a second of CPU before the first session, and again for every run
of a served deployment.

:func:`shared_client` builds a client once for the exact constructor arguments (the
class, the endpoint, the key read from the environment, the time-out, the sampling
settings and ``args``) and hands the same object to every later caller in the process.
Any change to those arguments, the key included, makes a new client; a changed class
(a test's stand-in) too. Only the arguments' digest is kept as the key, never the key
itself in another place. A forked child starts with none (its parent's pooled
connections are not its own). The cache holds at most :data:`MAX_CLIENTS` clients, the least
recently used leaving first.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_CLIENTS", "clear_shared_clients", "shared_client"]

MAX_CLIENTS = 32

_CLIENTS: OrderedDict[tuple[Any, str], Any] = OrderedDict()
_LOCK = threading.Lock()


def _digest(kwargs: dict[str, Any]) -> str:
    """The constructor arguments as one hash; an argument that is not JSON goes in by
    ``repr`` (an object's address), so two such builds never share."""
    text = json.dumps(kwargs, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def shared_client(factory: Callable[..., Any], kwargs: dict[str, Any], build: Callable[[], Any]) -> Any:
    """The client ``build()`` makes for ``factory(**kwargs)``, built once per process.

    ``build`` is called under a lock, so workers that start together wait for the first
    one's client instead of each building their own. An exception from ``build`` leaves
    nothing cached.
    """
    key = (factory, _digest(kwargs))
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is not None:
            _CLIENTS.move_to_end(key)
            return client
        client = build()
        _CLIENTS[key] = client
        while len(_CLIENTS) > MAX_CLIENTS:
            _CLIENTS.popitem(last=False)
        return client


def clear_shared_clients() -> None:
    """Forget every shared client (tests; a process that wants fresh connections)."""
    with _LOCK:
        _CLIENTS.clear()


def _forget_after_fork() -> None:
    """A forked child must not talk over its parent's pooled connections: start afresh."""
    global _LOCK
    _LOCK = threading.Lock()
    _CLIENTS.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
