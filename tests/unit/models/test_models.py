"""build_model: every source of a model, its error messages, the wrapper and fingerprints."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import time
import types
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableBinding
from langchain_core.tools import tool

import ape.tasks.models.build as models
from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.schemas.models import ModelAdapter
from ape.tasks.models.adapter_chat import AdapterChatModel
from ape.tasks.models.build import build_model
from ape.tasks.models.fingerprint import model_fingerprint
from ape.tasks.models.managed import ManagedChatModel
from ape.tasks.models.mocks.chat import MockChatModel, MockTransientError
from tests.helpers.concurrency import TIMEOUT_S, Gate

FAST = {"retry_initial_s": 0.001, "retry_max_s": 0.002}


def cfg(**values: Any) -> ModelConfig:
    return ModelConfig(**{**FAST, **values})


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return expression


def write_plugin(folder: Path, source: str) -> str:
    """A plugin module beside the 'config file'; returns its (unique) module name."""
    name = f"ape_plugin_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(source)
    return name


# --- mock provider -------------------------------------------------------------------


def test_mock_provider_builds_a_managed_mock() -> None:
    model = build_model(cfg(provider="mock", name="demo", args={"accuracy": 1.0}), Path("."))
    assert isinstance(model, ManagedChatModel) and isinstance(model.inner, MockChatModel)
    assert model.model_id == "demo" and model.inner.name == "demo"
    reply = model.invoke("What is 2 + 2?")
    assert reply.content == "The answer is 4"
    assert reply.response_metadata["confidence"] > 0.8
    assert reply.usage_metadata["total_tokens"] > 0


def test_mock_model_name_selects_the_behaviour() -> None:
    model = build_model(cfg(provider="mock", model="echo"), Path("."))
    assert model.invoke("ping").content == "ping"


def test_mock_call_log_is_relative_to_the_config(tmp_path: Path) -> None:
    model = build_model(cfg(provider="mock", args={"call_log": "calls.log"}), tmp_path)
    model.invoke("1 + 1")
    assert len((tmp_path / "calls.log").read_text().splitlines()) == 1


def test_mock_argument_typo_names_the_section() -> None:
    with pytest.raises(ApeError, match=r"\[model\] 'mock'.*behavior"):
        build_model(cfg(provider="mock", args={"behavior": "echo"}), Path("."))


def test_transient_failures_are_retried_by_the_wrapper() -> None:
    model = build_model(cfg(provider="mock", max_retries=2, args={"transient_failures": 2}), Path("."))
    assert model.invoke("3 * 3").content == "The answer is 9"
    failing = build_model(cfg(provider="mock", name="m2", max_retries=1, args={"transient_failures": 2}), Path("."))
    with pytest.raises(MockTransientError):
        failing.invoke("3 * 3")


def test_bind_tools_keeps_the_wrapper() -> None:
    model = build_model(cfg(provider="mock"), Path("."))
    bound = model.bind_tools([calculator])
    assert isinstance(bound, RunnableBinding) and bound.bound is model
    reply = bound.invoke("What is 5 * 5?")
    assert reply.tool_calls[0]["args"] == {"expression": "5 * 5"}


def test_metadata_passes_through_the_wrapper() -> None:
    model = build_model(cfg(provider="mock", args={"logprobs": True}), Path("."))
    reply = model.invoke("1 + 2")
    assert reply.response_metadata["logprobs"]["content"][-1]["token"] == "3"


# --- limits ---------------------------------------------------------------------------


def test_same_config_shares_one_limiter(in_process_limits: None) -> None:
    config = cfg(provider="mock", requests_per_second=100, max_concurrency=3)
    first, second = build_model(config, Path(".")), build_model(config, Path("."))
    assert first.limiter is second.limiter
    assert (first.limiter.requests_per_second, first.limiter.max_concurrency) == (100, 3)
    other = build_model(cfg(provider="mock", name="other", requests_per_second=100), Path("."))
    assert other.limiter is not first.limiter


@pytest.fixture
def in_process_limits() -> Iterator[None]:
    """No Prefect server configured (a server test earlier in the session sets one), so the
    limits hold in the process (:func:`ape.tasks.models.limits.policy.uses_server_limits`)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: None}), pytest.MonkeyPatch.context() as patch:
        patch.delenv("PREFECT_API_URL", raising=False)
        yield


@pytest.fixture
def gated_mock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    """Every mock model call waits inside a :class:`Gate` (counted) until the test opens it."""
    generate = MockChatModel._generate
    with Gate() as gate:

        def held(self: MockChatModel, *args: Any, **kwargs: Any) -> ChatResult:
            with gate.inside():
                return generate(self, *args, **kwargs)

        monkeypatch.setattr(MockChatModel, "_generate", held)
        yield gate


def test_max_concurrency_holds_across_models_of_one_config(gated_mock: Gate, in_process_limits: None) -> None:
    config = cfg(provider="mock", max_concurrency=1)
    with ThreadPoolExecutor(4) as pool:  # one model per worker, as a run builds them
        futures = [pool.submit(lambda i: build_model(config, Path(".")).invoke(f"{i} + 1"), i) for i in range(4)]
        assert gated_mock.held(1) == 1  # the other three models wait for the one in flight
        gated_mock.open()
        replies = [future.result(timeout=TIMEOUT_S) for future in futures]
    assert [r.content for r in replies] == [f"The answer is {i + 1}" for i in range(4)]
    assert gated_mock.peak == 1 and gated_mock.entered == 4
    assert build_model(config, Path(".")).limiter.peak_concurrency == 1


def test_requests_per_second_holds() -> None:
    model = build_model(cfg(provider="mock", requests_per_second=50), Path("."))
    started = time.monotonic()
    for i in range(6):
        model.invoke(f"{i} + 1")
    assert time.monotonic() - started >= 5 / 50 - 0.01


# --- openai provider --------------------------------------------------------------------


def test_openai_provider_settings() -> None:
    pytest.importorskip("langchain_openai")
    model = build_model(
        cfg(
            provider="openai",
            model="local",
            base_url="http://127.0.0.1:9/v1",
            temperature=0.0,
            max_tokens=64,
            timeout_s=7,
            args={"top_p": 0.5},
        ),
        Path("."),
    )
    inner = model.inner
    from langchain_openai import ChatOpenAI

    # ChatOpenAI, keeping reasoning_content / reasoning (tasks/models/reasoning_chat.py)
    assert isinstance(inner, ChatOpenAI) and type(inner).__name__ == "ReasoningChatOpenAI"
    assert (inner.model_name, inner.openai_api_base) == ("local", "http://127.0.0.1:9/v1")
    # a loopback endpoint gets no log-probabilities unless asked (llama.cpp computes them slowly)
    assert not inner.logprobs and inner.top_logprobs is None
    assert inner.max_retries == 0  # our retry policy is the only one
    assert (inner.request_timeout, inner.temperature, inner.max_tokens, inner.top_p) == (7.0, 0.0, 64, 0.5)
    assert inner.openai_api_key.get_secret_value() == models.NO_KEY_PLACEHOLDER


@pytest.mark.parametrize(
    ("base_url", "hosted"),
    [
        (None, True),
        ("https://api.openai.com/v1", True),
        ("https://api.together.xyz/v1", True),
        ("http://8.8.8.8:8000/v1", True),
        ("http://127.0.0.1:8080/v1", False),
        ("http://localhost:11434/v1", False),
        ("http://[::1]:8000/v1", False),
        ("http://10.0.0.5:8000/v1", False),
        ("http://192.168.1.20/v1", False),
        ("http://172.16.0.1/v1", False),
        ("http://gpu-box.local:8000/v1", False),
        ("http://host.docker.internal:8000/v1", False),
        ("http://vllm:8000/v1", False),
        ("http://[fe80::1]:8000/v1", False),
    ],
)
def test_hosted_endpoint(base_url: str | None, hosted: bool) -> None:
    assert models.hosted_endpoint(base_url) is hosted


@pytest.mark.parametrize(
    ("base_url", "logprobs", "asked"),
    [
        ("https://api.example.com/v1", None, True),
        ("http://127.0.0.1:9/v1", None, False),
        ("http://127.0.0.1:9/v1", True, True),
        ("https://api.example.com/v1", False, False),
    ],
)
def test_openai_logprobs_default_follows_the_endpoint(base_url: str, logprobs: bool | None, asked: bool) -> None:
    pytest.importorskip("langchain_openai")
    model = build_model(cfg(provider="openai", model="m", base_url=base_url, logprobs=logprobs), Path("."))
    assert bool(model.inner.logprobs) is asked
    assert model.inner.top_logprobs == (1 if asked else None)


def test_openai_logprobs_can_be_turned_off() -> None:
    pytest.importorskip("langchain_openai")
    model = build_model(cfg(provider="openai", model="m", base_url="http://x/v1", logprobs=False), Path("."))
    assert not model.inner.logprobs and model.inner.top_logprobs is None


def test_openai_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("MY_KEY", "sk-test")
    model = build_model(cfg(provider="openai", model="m", base_url="http://x/v1", api_key_env="MY_KEY"), Path("."))
    assert model.inner.openai_api_key.get_secret_value() == "sk-test"


def test_openai_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.delenv("MY_MISSING_KEY", raising=False)
    with pytest.raises(ApeError, match=r"\[model\] 'gpt'.*MY_MISSING_KEY"):
        build_model(cfg(provider="openai", name="gpt", model="gpt-4o", api_key_env="MY_MISSING_KEY"), Path("."))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ApeError, match="OPENAI_API_KEY"):
        build_model(cfg(provider="openai", model="gpt-4o"), Path("."))


def test_openai_needs_a_model_name() -> None:
    pytest.importorskip("langchain_openai")
    with pytest.raises(ApeError, match="needs 'model'"):
        build_model(cfg(provider="openai", base_url="http://x/v1"), Path("."))


# --- other providers --------------------------------------------------------------------


def test_unknown_provider_suggests_a_name() -> None:
    with pytest.raises(ApeError, match="unknown model provider 'antropic'.*did you mean 'anthropic'"):
        build_model(cfg(provider="antropic", model="x"), Path("."))


def test_missing_integration_names_the_pip_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(models.PROVIDERS, "acme", ("ape_no_such_module_xyz", "ChatAcme", "langchain-acme"))
    with pytest.raises(ApeError, match="pip install langchain-acme"):
        build_model(cfg(provider="acme", model="x"), Path("."))


class FakeIntegration(BaseChatModel):
    """Stands in for an installed LangChain integration."""

    model: str
    temperature: float | None = None
    timeout: float | None = None
    max_retries: int = 2
    api_key: str | None = None
    region: str = "eu"

    @property
    def _llm_type(self) -> str:
        return "fake-integration"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(f"{self.model} in {self.region}"))])


def install_fake_integration(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("ape_fake_integration")
    module.__spec__ = importlib.machinery.ModuleSpec("ape_fake_integration", None)
    module.ChatFake = FakeIntegration  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ape_fake_integration", module)
    monkeypatch.setitem(models.PROVIDERS, "fake", ("ape_fake_integration", "ChatFake", "langchain-fake"))


def test_installed_integration_without_langchain(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_integration(monkeypatch)
    monkeypatch.setattr(models, "_init_chat_model", lambda: None)
    monkeypatch.setenv("FAKE_KEY", "k")
    model = build_model(
        cfg(provider="fake", model="big", temperature=0.3, timeout_s=9, api_key_env="FAKE_KEY", args={"region": "us"}),
        Path("."),
    )
    inner = model.inner
    assert isinstance(inner, FakeIntegration)
    assert (inner.model, inner.temperature, inner.timeout, inner.max_retries, inner.api_key) == (
        "big",
        0.3,
        9.0,
        0,
        "k",
    )
    assert model.invoke("hi").content == "big in us"


def test_init_chat_model_is_used_when_langchain_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_init(model: str, *, model_provider: str, **kwargs: Any) -> BaseChatModel:
        seen.update(model=model, provider=model_provider, **kwargs)
        if model_provider == "nonesuch":
            raise ValueError(f"Unsupported model_provider='{model_provider}'.")
        return FakeIntegration(model=model)

    monkeypatch.setattr(models, "_init_chat_model", lambda: fake_init)
    model = build_model(cfg(provider="someprovider", model="m1", temperature=0.1), Path("."))
    assert isinstance(model.inner, FakeIntegration)
    assert (seen["model"], seen["provider"], seen["temperature"]) == ("m1", "someprovider", 0.1)
    with pytest.raises(ApeError, match="unknown model provider 'nonesuch'"):
        build_model(cfg(provider="nonesuch", model="m"), Path("."))


# --- dotted paths ---------------------------------------------------------------------------


def test_class_path_to_a_chat_model() -> None:
    model = build_model(
        cfg(**{"class": "ape.tasks.models.mocks.chat:MockChatModel", "args": {"behaviour": "echo"}}), Path(".")
    )
    assert isinstance(model, ManagedChatModel)
    assert model.invoke("hey").content == "hey"


def test_class_path_to_a_factory_beside_the_config(tmp_path: Path) -> None:
    module = write_plugin(
        tmp_path,
        "from ape.tasks.models.mocks.chat import MockChatModel\n"
        "def make(answer):\n"
        "    return MockChatModel(behaviour='scripted', responses=[answer])\n",
    )
    model = build_model(cfg(**{"class": f"{module}:make", "args": {"answer": "yes"}}), tmp_path)
    assert model.invoke("?").content == "yes"


ADAPTER_SOURCE = """
from ape.schemas.results import Generation

class Flaky:
    def __init__(self, failures=0):
        self.model_id = "flaky"
        self.failures = failures
        self.calls = 0

    def generate(self, prompt, task):
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionResetError("dropped")
        return Generation(text=prompt.upper(), confidence=0.7)

INSTANCE = Flaky()
"""


def test_class_path_to_a_model_adapter(tmp_path: Path) -> None:
    module = write_plugin(tmp_path, ADAPTER_SOURCE)
    model = build_model(cfg(**{"class": f"{module}:Flaky", "args": {"failures": 2}}), tmp_path)
    assert isinstance(model, ManagedChatModel) and isinstance(model.inner, AdapterChatModel)
    assert isinstance(model.inner.adapter, ModelAdapter) and model.inner.model_id == "flaky"
    reply = model.invoke("abc")
    assert reply.content == "ABC" and reply.response_metadata["confidence"] == 0.7
    assert model.inner.adapter.calls == 3  # two transient failures retried
    instance = build_model(cfg(**{"class": f"{module}:INSTANCE"}), tmp_path)
    assert isinstance(instance.inner, AdapterChatModel)
    assert instance.invoke("x").content == "X"


def test_class_path_errors(tmp_path: Path) -> None:
    module = write_plugin(tmp_path, "NOT_A_MODEL = 3\ndef make():\n    return 'text'\n")
    with pytest.raises(ApeError, match="not a chat model"):
        build_model(cfg(**{"class": f"{module}:NOT_A_MODEL"}), tmp_path)
    with pytest.raises(ApeError, match="returned a str"):
        build_model(cfg(**{"class": f"{module}:make"}), tmp_path)
    with pytest.raises(ApeError, match="calling .* failed"):
        build_model(cfg(**{"class": f"{module}:make", "args": {"x": 1}}), tmp_path)
    with pytest.raises(ApeError, match="did you mean 'make'"):
        build_model(cfg(**{"class": f"{module}:mkae"}), tmp_path)
    with pytest.raises(ApeError, match="temperature only apply to 'provider' models"):
        build_model(cfg(**{"class": "ape.tasks.models.mocks.chat:MockChatModel", "temperature": 0.5}), tmp_path)


# --- fingerprints ---------------------------------------------------------------------------


def test_fingerprint_ignores_keys_limits_and_names() -> None:
    base = dict(provider="openai", model="m", base_url="http://x/v1", temperature=0.0, args={"top_p": 0.9})
    plain = model_fingerprint(ModelConfig(**base))
    tuned = model_fingerprint(
        ModelConfig(
            **base,
            name="renamed",
            api_key_env="KEY",
            max_retries=9,
            retry_initial_s=5,
            timeout_s=3,
            requests_per_second=2,
            max_concurrency=1,
        )
    )
    assert plain == tuned
    # a key in args never gets this far: the config refuses it (it would reach the server)
    with pytest.raises(ValueError, match="literal secret"):
        ModelConfig(**{**base, "args": {"top_p": 0.9, "api_key": "sk-x"}})
    assert json.loads(json.dumps(plain)) == plain
    # http://x is a local name: its requests ask for no log-probabilities, and neither does its fingerprint
    assert plain["logprobs"] is False and plain["args"] == {"top_p": 0.9}


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other"},
        {"temperature": 0.7},
        {"max_tokens": 5},
        {"base_url": "http://y/v1"},
        {"args": {"top_p": 0.1}},
        {"logprobs": True},  # a local endpoint asks for none by default
    ],
)
def test_fingerprint_changes_with_behaviour(change: dict[str, Any]) -> None:
    base = dict(provider="openai", model="m", base_url="http://x/v1", args={"top_p": 0.9})
    assert model_fingerprint(ModelConfig(**{**base, **change})) != model_fingerprint(ModelConfig(**base))


def test_mock_fingerprint_ignores_latency_and_call_log() -> None:
    slow = ModelConfig(provider="mock", args={"accuracy": 0.5, "latency_s": 1.0, "call_log": "a.log"})
    fast = ModelConfig(provider="mock", args={"accuracy": 0.5})
    assert model_fingerprint(slow) == model_fingerprint(fast)
    assert model_fingerprint(fast) != model_fingerprint(ModelConfig(provider="mock", args={"accuracy": 0.6}))


def test_wrapper_is_safe_to_share_between_threads(gated_mock: Gate) -> None:
    model = build_model(cfg(provider="mock", max_concurrency=2), Path("."))

    def work(i: int) -> str:
        return model.invoke(f"{i} + {i}").content

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(work, i) for i in range(8)]
        # two calls in flight through the one wrapper at once, and never a third
        assert gated_mock.held(2) == 2
        gated_mock.open()
        answers = [future.result(timeout=TIMEOUT_S) for future in futures]
    assert answers == [f"The answer is {2 * i}" for i in range(8)]
    assert gated_mock.peak <= 2 and gated_mock.entered == 8
    assert model.limiter.peak_concurrency == 2


def test_the_wrappers_invocation_params_are_langchains_taken_once() -> None:
    """What callbacks and tracers see of a request (the model's settings, the stop words, the
    bound arguments) is what LangChain's own method gives, built once per model."""
    model = build_model(cfg(provider="mock", model="echo"), Path("."))
    assert isinstance(model, ManagedChatModel)
    expected = BaseChatModel._get_invocation_params(model, stop=["\n"], tools=[])
    assert model._get_invocation_params(stop=["\n"], tools=[]) == expected
    assert model._get_invocation_params()["stop"] is None
    seen: list[dict[str, Any]] = []

    from langchain_core.callbacks import BaseCallbackHandler

    class Seen(BaseCallbackHandler):
        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            seen.append(kwargs["invocation_params"])

    model.invoke("hi", config={"callbacks": [Seen()]}, stop=["END"])
    assert seen and seen[0]["stop"] == ["END"] and seen[0]["model_id"] == model.model_id
    assert model._settings is not None and "stop" in model._settings
