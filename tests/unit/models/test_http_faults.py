"""Transient and permanent HTTP failures of an OpenAI-compatible endpoint, end to end.

A loopback endpoint (``tests/fake_openai.py``) answers from a plan and records the requests;
the model is built by ``build_model`` exactly as a run would build it, so these
tests cover ChatOpenAI's error types, ``classify_error`` and the retry policy
together. Backoff values are tiny so the whole file runs in a few seconds.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the HTTP fault tests need the 'openai' extra")
pytest.importorskip("langchain_openai", reason="the HTTP fault tests need the 'openai' extra")

from langchain_core.tools import tool  # noqa: E402

from ape.schemas.config import ModelConfig  # noqa: E402
from ape.tasks.models.build import build_model  # noqa: E402
from tests.helpers.fake_openai import DROP, LoopbackEndpoint, Reply, Request, completion, error_body  # noqa: E402

HANG_LIMIT_S = 60.0  # how long a "hang" answer is held at most: far past any client timeout here

COMPLETION = completion("hello", logprob=-0.25, prompt_tokens=3, completion_tokens=1)


class FakeEndpoint(LoopbackEndpoint):
    """Answers chat completions from a plan: a status code, "drop" or "hang" per request.

    A "hang" answer is held back until the endpoint closes (the test is over), and only
    then sent: ``answered_late`` counts those that were. When the plan runs out every
    further request gets ``default``.
    """

    def __init__(self, plan: list[Any], default: Any = 200):
        self.plan = list(plan)
        self.default = default
        self.answered_late = 0
        self.closing = threading.Event()
        super().__init__(self._answer)

    def _answer(self, request: Request) -> Reply:
        with self.lock:
            action = self.plan.pop(0) if self.plan else self.default
        if action == "drop":
            return DROP
        if action == "hang":
            self.closing.wait(HANG_LIMIT_S)
            with self.lock:
                self.answered_late += 1
            action = 200
        return (200, COMPLETION) if action == 200 else (action, error_body(f"status {action}"))

    def close(self) -> None:
        self.closing.set()  # a held answer goes out now (to a client that left long ago)
        super().close()


@pytest.fixture
def endpoint() -> Iterator[Any]:
    """Makes fake endpoints; every one is closed after the test, passed or failed."""
    with contextlib.ExitStack() as stack:

        def make(plan: list[Any], default: Any = 200) -> FakeEndpoint:
            server = FakeEndpoint(plan, default)
            stack.callback(server.close)
            return server

        yield make


def model_for(server: FakeEndpoint, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "provider": "openai",
        "model": "fake",
        "base_url": server.base_url,
        "max_retries": 3,
        "retry_initial_s": 0.01,
        "retry_max_s": 0.02,
        "timeout_s": 5.0,
    }
    values.update(overrides)
    return build_model(ModelConfig(**values), Path("."))


def test_rate_limited_twice_then_answers(endpoint: Any) -> None:
    server = endpoint([429, 429, 200])
    reply = model_for(server).invoke("hi")
    assert reply.content == "hello"
    assert len(server.requests) == 3
    assert reply.usage_metadata["total_tokens"] == 4


def test_server_error_every_time_gives_up_after_max_retries(endpoint: Any) -> None:
    server = endpoint([], default=500)
    model = model_for(server, max_retries=2)
    with pytest.raises(openai.InternalServerError):
        model.invoke("hi")
    assert len(server.requests) == 3  # max_retries + 1 attempts


@pytest.mark.parametrize("status", [400, 401, 404])
def test_permanent_errors_are_not_retried(endpoint: Any, status: int) -> None:
    server = endpoint([status])
    with pytest.raises(openai.APIStatusError) as info:
        model_for(server).invoke("hi")
    assert info.value.status_code == status
    assert len(server.requests) == 1


def test_dropped_connection_is_retried(endpoint: Any) -> None:
    server = endpoint(["drop"])
    assert model_for(server).invoke("hi").content == "hello"
    assert len(server.requests) == 2


def test_timeout_is_retried(endpoint: Any) -> None:
    server = endpoint(["hang"])
    assert model_for(server, timeout_s=0.5).invoke("hi").content == "hello"
    # the hung request timed out and was asked again (a loaded machine may time out a
    # fast answer too, and ask once more: still right)
    assert len(server.requests) >= 2
    assert server.answered_late == 0  # the held answer was not waited for: it is still held


def test_no_retries_when_max_retries_is_zero(endpoint: Any) -> None:
    server = endpoint([429])
    with pytest.raises(openai.RateLimitError):
        model_for(server, max_retries=0).invoke("hi")
    assert len(server.requests) == 1


def test_logprobs_requested_and_returned(endpoint: Any) -> None:
    server = endpoint([])
    reply = model_for(server, logprobs=True).invoke("hi")
    body = server.requests[0].body
    assert body["logprobs"] is True and body["top_logprobs"] == 1
    assert reply.response_metadata["logprobs"]["content"][0]["logprob"] == -0.25


def test_logprobs_can_be_turned_off(endpoint: Any) -> None:
    server = endpoint([])
    model_for(server, logprobs=False).invoke("hi")
    assert "logprobs" not in server.requests[0].body


def test_a_loopback_endpoint_gets_no_logprobs_by_default(endpoint: Any) -> None:
    server = endpoint([])
    model_for(server).invoke("hi")
    assert "logprobs" not in server.requests[0].body and "top_logprobs" not in server.requests[0].body


def test_api_key_comes_from_the_named_variable(endpoint: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APE_TEST_KEY", "sekret")
    server = endpoint([])
    model_for(server, api_key_env="APE_TEST_KEY").invoke("hi")
    assert server.requests[0].auth == "Bearer sekret"


def test_bound_tools_reach_the_endpoint_and_are_retried(endpoint: Any) -> None:
    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        return expression

    server = endpoint([503])
    reply = model_for(server).bind_tools([calculator]).invoke("What is 2 + 2?")
    assert reply.content == "hello"
    assert len(server.requests) == 2
    assert [t["function"]["name"] for t in server.requests[-1].body["tools"]] == ["calculator"]
