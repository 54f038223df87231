"""The provenance says what the requests asked: each provider path against a recording stub.

A model is built as a run builds it and asked once; the loopback endpoint records the body
it received. The provenance of the same config (``requests`` and the fingerprint's
``logprobs``) must equal that body field by field: a local endpoint asked for no
log-probabilities used to be recorded as asked for them.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from ape.schemas.config import ApeConfig
from ape.tasks.models.build import build_model
from ape.tasks.report.provenance import run_provenance
from tests.helpers.batch_stub import BatchStub
from tests.helpers.fake_openai import LoopbackEndpoint, completion

pytest.importorskip("langchain_openai")

HOSTED_NAME = "api.example-hosted.test"  # looks hosted; resolved to the loopback stub below


@pytest.fixture
def endpoint() -> Iterator[LoopbackEndpoint]:
    server = LoopbackEndpoint(lambda request: (200, completion("42")))
    yield server
    server.close()


@pytest.fixture
def hosted_name(monkeypatch: pytest.MonkeyPatch) -> str:
    """A public-looking host name that resolves to the loopback (no DNS in tests)."""
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == HOSTED_NAME else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return HOSTED_NAME


def _config(model: dict[str, Any], tmp_path: Path) -> ApeConfig:
    return ApeConfig(
        data={"file": str(tmp_path / "d.jsonl"), "schema": "m:Item"},
        prompt={"template": "{{ q }}"},
        model=model,
        checker={"implementation": "exact_match"},
        run={"output": str(tmp_path / "out")},
    )


def _received(body: dict[str, Any]) -> dict[str, Any]:
    """What a chat-completions body asked for, in the provenance's terms."""
    stop = body.get("stop")
    return {
        "logprobs": bool(body.get("logprobs")),
        "top_logprobs": body.get("top_logprobs"),
        "temperature": body.get("temperature"),
        "max_tokens": body.get("max_tokens", body.get("max_completion_tokens")),
        "stop": [stop] if isinstance(stop, str) else stop,
    }


def _recorded(config: ApeConfig) -> dict[str, Any]:
    model = run_provenance(config)["models"][config.model[0].model_id]
    assert model["fingerprint"]["logprobs"] == model["requests"]["logprobs"]
    assert model["fingerprint"]["temperature"] == model["requests"]["temperature"]
    assert model["fingerprint"]["max_tokens"] == model["requests"]["max_tokens"]
    return dict(model["requests"])


def _ask(config: ApeConfig, tmp_path: Path, batch_dir: Path | None = None) -> None:
    model = build_model(config.model[0], tmp_path, batch_dir=batch_dir)
    model.invoke([HumanMessage("What is 20 + 22?")])


@pytest.mark.parametrize(
    "section",
    [
        pytest.param({}, id="local-default"),
        pytest.param({"logprobs": True, "temperature": 0.0}, id="local-logprobs-on"),
        pytest.param({"max_tokens": 64, "args": {"stop": ["\n\n"]}}, id="local-limit-stop"),
        pytest.param({"args": {"temperature": 0.7, "top_logprobs": 3}, "logprobs": True}, id="local-args-win"),
    ],
)
def test_local_endpoint_provenance_is_what_the_endpoint_received(
    endpoint: LoopbackEndpoint, tmp_path: Path, section: dict[str, Any]
) -> None:
    config = _config({"provider": "openai", "model": "local", "base_url": endpoint.base_url, **section}, tmp_path)
    _ask(config, tmp_path)
    [request] = endpoint.requests
    recorded = _recorded(config)
    assert recorded.pop("batch") is False
    assert recorded == _received(request.body)


@pytest.mark.parametrize("logprobs", [None, False])
def test_hosted_endpoint_provenance_is_what_the_endpoint_received(
    endpoint: LoopbackEndpoint, hosted_name: str, tmp_path: Path, logprobs: bool | None
) -> None:
    port = endpoint.server.server_address[1]
    section = {"provider": "openai", "model": "m", "base_url": f"http://{hosted_name}:{port}/v1", "logprobs": logprobs}
    config = _config(section, tmp_path)
    _ask(config, tmp_path)
    [request] = endpoint.requests
    recorded = _recorded(config)
    assert recorded.pop("batch") is False
    assert recorded == _received(request.body)
    assert recorded["logprobs"] is (logprobs is None)  # hosted: asked for by default


def test_batch_provenance_is_what_the_batch_file_holds(tmp_path: Path) -> None:
    stub = BatchStub(delay_s=0.0)
    try:
        section = {
            "provider": "openai",
            "model": "stub",
            "base_url": stub.base_url,
            "batch": True,
            "batch_wait_s": 0.0,
            "batch_poll_s": 0.05,
            "max_tokens": 32,
        }
        config = _config(section, tmp_path)
        _ask(config, tmp_path, batch_dir=tmp_path / "out")
        [batch] = stub.batches.values()
        [(_, body)] = batch["requests"]
        assert stub.chat_calls == 0
    finally:
        stub.close()
    recorded = _recorded(config)
    assert recorded.pop("batch") is True
    assert recorded == _received(body)


def test_mock_provenance_asks_for_what_the_mock_is_built_with(tmp_path: Path) -> None:
    config = _config({"provider": "mock", "model": "echo", "max_tokens": 7}, tmp_path)
    model = build_model(config.model[0], tmp_path)
    recorded = _recorded(config)
    assert recorded == {
        "logprobs": False,
        "top_logprobs": None,
        "temperature": None,
        "max_tokens": model.inner.max_tokens,
        "stop": None,
        "batch": False,
    }
