"""Error classification, the retry policy and the per-model rate limiter."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from ape.schemas.config import ModelConfig
from ape.tasks.models.limits.policy import (
    RateLimiter,
    RetryPolicy,
    classify_error,
    limiter_for,
    retry_after_s,
    status_is_transient,
)
from tests.helpers.concurrency import TIMEOUT_S, Gate


@pytest.fixture(autouse=True)
def in_process_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """These are the in-process limiter's tests: as with no Prefect server configured (a server
    test earlier in the session leaves one set, and threads do not see a temporary setting),
    else a limited model takes the server's limits (:func:`ape.tasks.models.limits.policy.uses_server_limits`)."""
    from ape.tasks.models.limits import server as server_limits

    monkeypatch.setattr(server_limits, "server_limits_enabled", lambda: False)


REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")


def status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    response = httpx.Response(status, request=REQUEST, headers=headers)
    return httpx.HTTPStatusError(f"status {status}", request=REQUEST, response=response)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, "transient"),
        (500, "transient"),
        (503, "transient"),
        (408, "transient"),
        (400, "permanent"),
        (401, "permanent"),
        (403, "permanent"),
        (404, "permanent"),
        (422, "permanent"),
    ],
)
def test_http_status_errors(status: int, kind: str) -> None:
    assert classify_error(status_error(status)) == kind
    assert status_is_transient(status) is (kind == "transient")


def test_openai_errors() -> None:
    openai = pytest.importorskip("openai")
    response = httpx.Response(429, request=REQUEST)
    assert classify_error(openai.RateLimitError("slow down", response=response, body=None)) == "transient"
    response = httpx.Response(401, request=REQUEST)
    assert classify_error(openai.AuthenticationError("bad key", response=response, body=None)) == "permanent"
    assert classify_error(openai.APITimeoutError(request=REQUEST)) == "transient"
    assert classify_error(openai.APIConnectionError(request=REQUEST)) == "transient"


@pytest.mark.parametrize(
    "exc",
    [
        TimeoutError("read"),
        ConnectionResetError("reset"),
        ConnectionRefusedError("refused"),
        httpx.ReadTimeout("slow", request=REQUEST),
        httpx.RemoteProtocolError("dropped", request=REQUEST),
        httpx.ConnectError("refused", request=REQUEST),
    ],
)
def test_network_errors_are_transient(exc: BaseException) -> None:
    assert classify_error(exc) == "transient"


def test_unknown_errors_are_permanent() -> None:
    assert classify_error(ValueError("bad prompt")) == "permanent"
    assert classify_error(KeyError("choices")) == "permanent"


def test_sdk_errors_by_name_and_status_attribute() -> None:
    class OverloadedError(Exception):
        pass

    class SdkError(Exception):
        status_code = 404

    assert classify_error(OverloadedError("busy")) == "transient"
    assert classify_error(SdkError("missing")) == "permanent"


def test_wrapped_errors_are_classified_by_their_cause() -> None:
    try:
        try:
            raise ConnectionResetError("reset by peer")
        except ConnectionResetError as inner:
            raise RuntimeError("model call failed") from inner
    except RuntimeError as outer:
        assert classify_error(outer) == "transient"


def test_retry_after_header() -> None:
    assert retry_after_s(status_error(429, {"retry-after": "3"})) == 3.0
    assert retry_after_s(status_error(429, {"retry-after-ms": "250"})) == 0.25
    assert retry_after_s(status_error(429)) is None
    assert retry_after_s(ValueError("no response")) is None


class Flaky:
    """Fails with the given errors in turn, then returns "ok"."""

    def __init__(self, *errors: BaseException):
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def policy(**kwargs: Any) -> tuple[RetryPolicy, list[float]]:
    sleeps: list[float] = []
    values: dict[str, Any] = {"max_retries": 4, "initial_s": 1.0, "max_s": 3.0, "sleep": sleeps.append}
    values.update(kwargs)
    return RetryPolicy(**values), sleeps


def test_transient_errors_are_retried_with_capped_full_jitter() -> None:
    retry, sleeps = policy()
    flaky = Flaky(*(status_error(503) for _ in range(4)))
    assert retry.call(flaky) == "ok"
    assert flaky.calls == 5
    assert len(sleeps) == 4
    caps = [1.0, 2.0, 3.0, 3.0]  # initial * 2**n, capped at max_s
    assert all(0.0 <= s <= cap for s, cap in zip(sleeps, caps, strict=True))


def test_jitter_spreads_the_waits() -> None:
    retry, sleeps = policy(max_retries=1)
    for _ in range(30):
        retry.call(Flaky(TimeoutError()))
    assert len(set(sleeps)) > 20  # not all workers retry at the same moment


def test_permanent_error_raises_at_once() -> None:
    retry, sleeps = policy()
    flaky = Flaky(status_error(401))
    with pytest.raises(httpx.HTTPStatusError):
        retry.call(flaky)
    assert flaky.calls == 1 and sleeps == []


def test_gives_up_after_max_retries_with_the_last_error() -> None:
    retry, sleeps = policy(max_retries=2)
    errors = [status_error(500), status_error(502), status_error(503)]
    flaky = Flaky(*errors)
    with pytest.raises(httpx.HTTPStatusError) as info:
        retry.call(flaky)
    assert info.value is errors[-1]
    assert flaky.calls == 3 and len(sleeps) == 2


def test_retry_after_raises_the_wait_up_to_max() -> None:
    retry, sleeps = policy(initial_s=0.0, max_s=5.0)
    retry.call(Flaky(status_error(429, {"retry-after": "2"}), status_error(429, {"retry-after": "60"})))
    assert sleeps == [2.0, 5.0]


def test_policy_from_config() -> None:
    cfg = ModelConfig(provider="mock", max_retries=7, retry_initial_s=0.5, retry_max_s=9)
    retry = RetryPolicy.from_config(cfg)
    assert (retry.max_retries, retry.initial_s, retry.max_s, retry.label) == (7, 0.5, 9.0, "mock")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_token_bucket_spaces_requests() -> None:
    clock = FakeClock()
    limiter = RateLimiter(requests_per_second=4, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        with limiter.acquire():
            pass
    assert clock.sleeps == pytest.approx([0.25] * 4)  # the first request finds the bucket full


def test_token_bucket_refills_while_idle() -> None:
    clock = FakeClock()
    limiter = RateLimiter(requests_per_second=2, burst=3, clock=clock, sleep=clock.sleep)
    for _ in range(3):
        with limiter.acquire():
            pass
    assert clock.sleeps == []  # a full bucket of three
    clock.now += 10.0  # idle: refills, but only up to the burst
    for _ in range(4):
        with limiter.acquire():
            pass
    assert clock.sleeps == pytest.approx([0.5])


def test_rate_holds_across_threads() -> None:
    limiter = RateLimiter(requests_per_second=40)
    started = time.monotonic()

    def one(_: int) -> float:
        with limiter.acquire():
            return time.monotonic()

    with ThreadPoolExecutor(8) as pool:
        times = sorted(pool.map(one, range(8)))
    assert times[-1] - started >= 7 / 40 - 0.01


def test_concurrency_is_capped() -> None:
    """Two of six requests in flight, provably at the same time, and never a third."""
    limiter = RateLimiter(max_concurrency=2)
    with ThreadPoolExecutor(6) as pool, Gate() as gate:

        def one(_: int) -> None:
            with limiter.acquire(), gate.inside():
                pass

        futures = [pool.submit(one, i) for i in range(6)]
        # both slots are taken (a limiter that serialised would never get here) and while they
        # are held no third request gets in (one that let it would)
        assert gate.held(2) == 2
        gate.open()
        for future in futures:
            future.result(timeout=TIMEOUT_S)
    assert gate.entered == 6
    assert gate.peak <= 2  # never more than the limit in flight
    assert limiter.peak_concurrency == 2  # and the limiter saw the two held ones


def test_unlimited_limiter_never_waits() -> None:
    sleeps: list[float] = []
    limiter = RateLimiter(sleep=sleeps.append)
    assert limiter.unlimited
    for _ in range(1000):
        with limiter.acquire():
            pass
    assert sleeps == []  # no request was made to wait for a token
    with ThreadPoolExecutor(8) as pool, Gate() as gate:

        def one(_: int) -> None:
            with limiter.acquire(), gate.inside():
                pass

        futures = [pool.submit(one, i) for i in range(8)]
        assert gate.wait_for(8)  # no cap on requests in flight: all eight are inside together
        gate.open()
        for future in futures:
            future.result(timeout=TIMEOUT_S)
    assert sleeps == []


@pytest.mark.parametrize(
    "kwargs", [{"requests_per_second": 0}, {"requests_per_second": -1.0}, {"max_concurrency": 0}, {"burst": 0.5}]
)
def test_bad_limits_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RateLimiter(**kwargs)


def test_limiter_for_is_shared_per_model() -> None:
    cfg = ModelConfig(provider="mock", requests_per_second=5, max_concurrency=2)
    first = limiter_for("a", cfg)
    assert limiter_for("a", cfg) is first
    assert limiter_for("b", cfg) is not first
    assert (first.requests_per_second, first.max_concurrency) == (5, 2)
    with ThreadPoolExecutor(4) as pool:
        assert set(pool.map(lambda _: id(limiter_for("a", cfg)), range(8))) == {id(first)}
    # keyed by the limits too: the same model id with other limits gets its own bucket
    assert limiter_for("a", cfg.model_copy(update={"requests_per_second": 6})) is not first
