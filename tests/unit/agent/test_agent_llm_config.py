"""examples/agent/config-llm.toml: the agent example with SmolLM2 served by APE stays valid."""

from __future__ import annotations

import pytest

from tests.helpers.llm_server import smollm2_missing
from tests.helpers.paths import REPO_ROOT

CONFIG = REPO_ROOT / "examples" / "agent" / "config-llm.toml"


@pytest.mark.skipif(smollm2_missing() is not None, reason=smollm2_missing() or "")
def test_the_llm_config_validates() -> None:
    from ape.cli import main

    assert main(["validate", str(CONFIG)]) == 0


def test_the_llm_config_is_the_mock_examples_benchmark_with_smollm2() -> None:
    from ape.config import load_config

    llm, mock = load_config(CONFIG), load_config(CONFIG.with_name("config.toml"))
    (model,) = llm.model
    assert model.provider == "llama-cpp" and model.model == "smollm2-135m"
    assert model.args["chat_format"] == "chatml-function-calling"  # the tools reach the model as calls
    assert set(llm.tools) == {"bash", "python", "files"} and llm.sandbox == mock.sandbox
    assert llm.checker == mock.checker and llm.data.file == mock.data.file
    assert llm.run.output != mock.run.output and llm.run.output.parent == CONFIG.parent


def test_llama_cpp_requests_carry_tool_calls_the_server_accepts() -> None:
    """Before: the server answered 500 to a session's second call (an assistant message with
    tool calls and content null) and left the tools out of the prompt (no tool_choice)."""
    pytest.importorskip("langchain_openai")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool

    from ape.tasks.models.local.llama_chat import LlamaChatOpenAI

    @tool
    def bash(command: str) -> str:
        """Run a command."""
        return command

    model = LlamaChatOpenAI(model="local", api_key="none", base_url="http://127.0.0.1:9/v1")
    call = {"name": "bash", "args": {"command": "ls"}, "id": "c1"}
    messages = [HumanMessage("go"), AIMessage("", tool_calls=[call]), ToolMessage("a.txt", tool_call_id="c1")]
    bound = model.bind_tools([bash])
    payload = model._get_request_payload(messages, **bound.kwargs)  # type: ignore[attr-defined]
    assistant = payload["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"] == "" and assistant["tool_calls"]
    assert payload["tool_choice"] == "auto"
    chosen = model._get_request_payload(messages, **model.bind_tools([bash], tool_choice="bash").kwargs)  # type: ignore[attr-defined]
    assert chosen["tool_choice"] != "auto"  # a choice the caller made stays
    plain = model._get_request_payload([HumanMessage("hi")])
    assert "tool_choice" not in plain
