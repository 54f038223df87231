"""What every model call goes through: ``with limiter.acquire(): request()``.

A module of its own so that both limiters derive from it without importing each other:
:class:`ape.tasks.models.limits.policy.RateLimiter` holds the limits in this process,
:class:`ape.tasks.models.limits.server.SharedLimiter` takes them from the Prefect server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Limiter"]


class Limiter:
    """Holds one request slot for the duration of ``with limiter.acquire():``."""

    peak_concurrency: int = 0  # most requests seen in flight at once in this process

    @contextmanager
    def acquire(self) -> Iterator[None]:  # pragma: no cover - overridden
        raise NotImplementedError
        yield

    def close(self) -> None:
        """Give back what the limiter holds outside this process (the server's slots)."""
