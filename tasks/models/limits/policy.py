"""Retries with backoff and per-model rate limits, usable without a Prefect server.

Every model call of a run goes through one :class:`RetryPolicy` (built from the
``[model]`` section) and one :class:`RateLimiter` shared by all worker threads of
the process that use the same model. Both live here, in one place, so that
provider clients can be told not to retry on their own (their retries would
multiply ours and ignore the user's settings).

Whether an error is worth retrying is decided by :func:`classify_error`:
rate limits (429), server errors (5xx), timeouts and dropped connections are
transient; everything else (400, 401, 403, 404, bad arguments, bugs) is
permanent and raised at once.

A connection failure names its endpoint: the provider's own message ("Connection
error.") gets a note (:meth:`BaseException.add_note`) with the request's method, URL and
the cause at the bottom of the chain (:func:`endpoint_note`), which the session's error
shows; so does a 404 (a ``base_url`` without ``/v1`` is the usual reason: :func:`v1_hint`).
Retry lines repeat on the terminal once per model and kind of error (:data:`RETRY_LINES`);
every one goes to run.log.
"""

from __future__ import annotations

import errno
import logging
import math
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from ape.schemas.config import ModelConfig
from ape.tasks.common.console import CONSOLE_SKIP, Repeats
from ape.tasks.models.limits.limiter import Limiter

log = logging.getLogger("ape.models")

T = TypeVar("T")
ErrorKind = Literal["transient", "permanent"]

# 408 request timeout, 409 conflict (a lock on the provider's side), 425 too early, 429 rate limit.
TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
# Exception class names of provider SDKs we do not import (anthropic, google, mistral, ...).
_TRANSIENT_NAME_PARTS = (
    "ratelimit",
    "timeout",
    "serviceunavailable",
    "overloaded",
    "internalserver",
    "apiconnection",
    "connectionerror",
    "remoteprotocol",
    "temporar",
)


def status_is_transient(status: int) -> bool:
    """True for HTTP statuses a retry can fix: 408, 409, 425, 429 and every 5xx."""
    return status in TRANSIENT_STATUS or 500 <= status <= 599


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status an SDK exception carries (openai, httpx, requests, anthropic ...)."""
    for owner in (exc, getattr(exc, "response", None)):
        for attr in ("status_code", "status"):
            value = getattr(owner, attr, None)
            if isinstance(value, int) and 100 <= value <= 599:
                return value
    return None


def _classify_one(exc: BaseException) -> ErrorKind | None:
    """Classify one exception, or None when it says nothing either way."""
    status = _status_of(exc)
    if status is not None:
        return "transient" if status_is_transient(status) else "permanent"
    # Builtins first: socket timeouts, resets and refused connections.
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return "transient"
    try:
        import httpx
    except ImportError:  # pragma: no cover - httpx comes with langchain-core
        httpx = None  # type: ignore[assignment]
    if httpx is not None and isinstance(exc, (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)):
        return "transient"
    try:
        import openai
    except ImportError:
        openai = None  # type: ignore[assignment]
    if openai is not None and isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return "transient"
    name = type(exc).__name__.lower()
    if any(part in name for part in _TRANSIENT_NAME_PARTS):
        return "transient"
    return None


def classify_error(exc: BaseException) -> ErrorKind:
    """Say whether retrying ``exc`` can help: "transient" or "permanent".

    Looks at the HTTP status first (openai, httpx, requests and most SDK errors
    carry one), then at timeouts and connection errors, then along the
    ``__cause__``/``__context__`` chain, because wrappers often re-raise a
    network error as their own type. Unknown errors are permanent: retrying a
    bug only makes the run slower.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = _classify_one(current)
        if kind is not None:
            return kind
        current = current.__cause__ or current.__context__
    return "permanent"


RETRY_LINES = Repeats()  # retry lines per model and error, for one run (reset by the benchmark flow)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions behind it (``__cause__``, else ``__context__``)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def connection_cause(exc: BaseException) -> str:
    """Why a connection failed, in words ("connection refused", "host name not found",
    "no answer within the timeout"), from the most telling exception of the chain."""
    chain = _chain(exc)
    import httpx  # noqa: PLC0415 - comes with langchain-core; only once a call failed

    for current in chain:
        if isinstance(current, httpx.ConnectTimeout):
            return "no connection within the timeout"
        if isinstance(current, (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)):
            return "no answer within the timeout"
        if isinstance(current, httpx.RemoteProtocolError) or type(current).__name__ == "RemoteProtocolError":
            # httpx's, or httpcore's beneath it (as openai raises it)
            return f"the server closed the connection ({' '.join(str(current).split())})"
    for current in chain:
        if isinstance(current, ConnectionRefusedError) or getattr(current, "errno", None) == errno.ECONNREFUSED:
            return "connection refused (nothing listens on that port)"
        if isinstance(current, socket.gaierror):
            return f"host name not found ({current.strerror or current})"
        if isinstance(current, ssl.SSLError):
            return f"TLS handshake failed ({current.reason or current})"
        if isinstance(current, ConnectionResetError):
            return "the connection was reset"
    text = " ".join(str(chain[-1]).split())
    lowered = " ".join(str(e) for e in chain).lower()
    if "connection refused" in lowered:
        return "connection refused (nothing listens on that port)"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return f"host name not found ({text})"
    if isinstance(chain[-1], TimeoutError) or "timed out" in lowered:
        return "no answer within the timeout"
    return text or type(chain[-1]).__name__


def _request_of(exc: BaseException) -> Any:
    """The HTTP request an exception carries (openai's and httpx's errors), or None."""
    try:
        request = getattr(exc, "request", None)  # httpx raises when an error has none
    except RuntimeError:
        return None
    return request if hasattr(request, "url") and hasattr(request, "method") else None


def v1_hint(url: str) -> str:
    """``; is /v1 missing from base_url?`` for a URL whose path has no ``/v1`` (OpenAI-compatible
    servers serve their routes under it, so a ``base_url`` without it answers 404), else ""."""
    path = urlsplit(url).path
    if "/v1/" in f"{path}/":
        return ""
    return "; is /v1 missing from base_url? OpenAI-compatible servers answer under http://host:port/v1"


def endpoint_note(exc: BaseException) -> str | None:
    """``endpoint POST http://host:port/v1/chat/completions: connection refused ...`` for a
    connection failure or time-out that carries its request, and ``endpoint POST URL answered
    404`` (with :func:`v1_hint`) for a 404; None for other HTTP answers (their status says what
    happened) and for errors of no request."""
    chain = _chain(exc)
    request = next((r for r in map(_request_of, chain) if r is not None), None)
    status = next((s for s in map(_status_of, chain) if s is not None), None)
    if request is None or (status is not None and status != 404):
        return None
    if status == 404:
        return (
            f"endpoint {request.method} {request.url} answered 404 (no such route or model){v1_hint(str(request.url))}"
        )
    return f"endpoint {request.method} {request.url}: {connection_cause(exc)}"


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` header), if it said."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after-ms")
        if value is not None:
            return max(0.0, float(value) / 1000.0)
        value = headers.get("retry-after")
    except Exception:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


@dataclass
class RetryPolicy:
    """Exponential backoff with full jitter on transient errors.

    The n-th retry waits a random time in ``[0, min(max_s, initial_s * 2**(n-1))]``
    ("full jitter"), so many workers hitting the same rate limit spread out
    instead of retrying in lock-step. A ``Retry-After`` header from the server
    raises the wait to what it asked for, capped at ``max_s``. Built on tenacity,
    which langchain-core already depends on.
    """

    max_retries: int = 4
    initial_s: float = 1.0
    max_s: float = 30.0
    classify: Callable[[BaseException], ErrorKind] = classify_error
    sleep: Callable[[float], None] = time.sleep
    label: str = "model"

    @classmethod
    def from_config(cls, cfg: ModelConfig, **overrides: Any) -> RetryPolicy:
        """The policy a ``[model]`` section asks for."""
        values: dict[str, Any] = {
            "max_retries": cfg.max_retries,
            "initial_s": cfg.retry_initial_s,
            "max_s": cfg.retry_max_s,
            "label": cfg.model_id,
        }
        values.update(overrides)
        return cls(**values)

    def _wait(self, state: RetryCallState) -> float:
        delay = wait_random_exponential(multiplier=self.initial_s, max=self.max_s)(state)
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = retry_after_s(exc) if exc is not None else None
        if asked is not None:
            delay = max(delay, min(asked, self.max_s))
        return delay

    def _log(self, state: RetryCallState) -> None:
        """One line per retry, on the terminal only the first of each kind of error per
        model (:data:`RETRY_LINES`; the model's final line counts the rest)."""
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        error = f"{type(exc).__name__}: {str(exc)[:200]}"
        note = endpoint_note(exc) if exc is not None else None
        if note:
            error += f"; {note}"
        repeat = RETRY_LINES.count(self.label, error) > 1
        log.warning(
            "%s: attempt %d of %d failed (%s); retrying in %.2f s%s",
            self.label,
            state.attempt_number,
            self.max_retries + 1,
            error,
            wait,
            "" if repeat else " (further retries after this error: run.log only)",
            extra={CONSOLE_SKIP: True} if repeat else None,
        )

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` until it succeeds, fails permanently, or retries run out.

        The last exception is re-raised unchanged, so callers see the
        provider's own error type and message.
        """
        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(lambda exc: self.classify(exc) == "transient"),
            before_sleep=self._log,
            sleep=self.sleep,
            reraise=True,
        )
        try:
            return retrying(fn)
        except Exception as exc:
            note = endpoint_note(exc)
            if note and note not in getattr(exc, "__notes__", ()):
                exc.add_note(note)  # the session's error names the endpoint (ErrorInfo)
            raise


class RateLimiter(Limiter):
    """Requests per second (token bucket) and concurrent requests (semaphore).

    Thread-safe and process-local, so it works without a Prefect server. The
    bucket holds at most ``burst`` tokens and starts full; a caller that finds it
    empty reserves the next token and sleeps exactly until it is due, outside the
    lock, so waiting callers are served in arrival order without polling.
    ``None`` for either limit means unlimited.
    """

    def __init__(
        self,
        requests_per_second: float | None = None,
        max_concurrency: int | None = None,
        *,
        burst: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if requests_per_second is not None and not (requests_per_second > 0 and math.isfinite(requests_per_second)):
            raise ValueError(f"requests_per_second must be a positive number, not {requests_per_second!r}")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, not {burst!r}")
        self.requests_per_second = requests_per_second
        self.max_concurrency = max_concurrency
        self.burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self.burst
        self._last = clock()
        self._slots = threading.BoundedSemaphore(max_concurrency) if max_concurrency else None
        self._active = 0
        self.peak_concurrency = 0  # most requests seen in flight at once (for tests and reports)

    @property
    def unlimited(self) -> bool:
        return self.requests_per_second is None and self.max_concurrency is None

    def _reserve(self) -> float:
        """Take one token (possibly in advance) and return how long to wait for it."""
        rate = self.requests_per_second
        if rate is None:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * rate)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / rate

    @contextmanager
    def acquire(self) -> Iterator[None]:
        """Hold one request slot for the duration of the ``with`` block."""
        if self._slots is not None:
            self._slots.acquire()
        try:
            wait = self._reserve()
            if wait > 0:
                self._sleep(wait)
            with self._lock:
                self._active += 1
                self.peak_concurrency = max(self.peak_concurrency, self._active)
            try:
                yield
            finally:
                with self._lock:
                    self._active -= 1
        finally:
            if self._slots is not None:
                self._slots.release()


_LIMITERS: dict[tuple[str, float | None, int | None, bool], Limiter] = {}
_LIMITERS_LOCK = threading.Lock()


def uses_server_limits(cfg: ModelConfig) -> bool:
    """True when the model's limits are the Prefect server's (:mod:`ape.tasks.models.limits.server`):
    a real server is configured, the section sets a limit and does not opt out with
    ``shared_limits = false``, and the endpoint is not one APE serves for this run alone
    (``llama-cpp``)."""
    from ape.tasks.models.limits.server import server_limits_enabled  # noqa: PLC0415 - imports this module

    if not cfg.shared_limits or (cfg.max_concurrency is None and cfg.requests_per_second is None):
        return False
    if (cfg.provider or "").strip().lower() == "llama-cpp" or cfg.model_path is not None:
        return False
    return server_limits_enabled()


def limiter_for(model_id: str, cfg: ModelConfig) -> Limiter:
    """The process-wide limiter of one model, shared by every worker thread.

    Keyed by the model id and its limits, so every model built from the same
    ``[model]`` section (one per worker, one per session) draws from the same
    bucket. In-process limits hold per process (each Dask worker its own); with a real
    Prefect server they are the server's, shared by every process and run
    (:func:`uses_server_limits`).
    """
    shared = uses_server_limits(cfg)
    key = (model_id, cfg.requests_per_second, cfg.max_concurrency, shared)
    with _LIMITERS_LOCK:
        limiter = _LIMITERS.get(key)
        if limiter is None:
            if shared:
                from ape.tasks.models.limits.server import SharedLimiter  # noqa: PLC0415 - imports this module

                limiter = SharedLimiter(cfg)
            else:
                limiter = RateLimiter(cfg.requests_per_second, cfg.max_concurrency)
            _LIMITERS[key] = limiter
        return limiter
