"""A chat model whose requests go through its provider's batch API (``[model] batch = true``).

:class:`BatchChatModel` wraps the provider's own LangChain model (``ChatOpenAI``, or
``ChatAnthropic`` when ``langchain-anthropic`` is installed) and borrows its two halves:
the request body it would send (``_get_request_payload``: messages, tools, sampling) and,
for OpenAI, the way it reads an answer (``_create_chat_result``). Between them, instead
of an HTTP call, the request goes to the process's :class:`ape.tasks.models.batch.batcher.Batcher`
for this model, and the session's thread waits for its answer. A multi-step session
(tools, reformat, force-finish) thus makes one batch round per step, and everything after
the model call (usage, tool calls, log-probabilities) reads as from an interactive call;
the reply's ``response_metadata["batch"]`` is true.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.batch.batcher import Batcher, BatchSettings, batcher_for, custom_id
from ape.tasks.models.batch.clients import AnthropicBatchClient, BatchClient, OpenAIBatchClient
from ape.tasks.models.chat_wrapper import WrappedChatModel
from ape.tasks.models.session_item import current_session_item

__all__ = ["BatchChatModel", "batch_provider", "check_batchable"]


def batch_provider(inner: BaseChatModel) -> str | None:
    """Which batch API ``inner`` can use: "openai", "anthropic", or None."""
    names = {cls.__name__ for cls in type(inner).__mro__}
    if "ChatOpenAI" in names or "BaseChatOpenAI" in names:
        return "openai"
    if "ChatAnthropic" in names:
        return "anthropic"
    return None


def check_batchable(cfg: ModelConfig, inner: BaseChatModel) -> None:
    """An ApeError naming the section when ``batch = true`` is set on a model without a batch API."""
    if cfg.batch and batch_provider(inner) is None:
        raise ApeError(
            f"batch = true needs a provider with a batch API, not {type(inner).__name__}",
            where=f"[model] '{cfg.model_id}' batch",
            hint="use provider 'openai' (also vLLM's OpenAI server) or 'anthropic', or remove batch",
        )


def _client(inner: BaseChatModel) -> BatchClient:
    if batch_provider(inner) == "openai":
        return OpenAIBatchClient(inner.root_client)  # type: ignore[attr-defined]
    key = inner.anthropic_api_key  # type: ignore[attr-defined]
    return AnthropicBatchClient(
        api_key=key.get_secret_value() if hasattr(key, "get_secret_value") else str(key),
        base_url=getattr(inner, "anthropic_api_url", None),
        timeout_s=float(getattr(inner, "default_request_timeout", None) or 120.0),
    )


def _openai_body(payload: dict[str, Any]) -> dict[str, Any]:
    """The JSON the SDK would send: ``extra_body`` merged in, no streaming."""
    body = {k: v for k, v in payload.items() if k not in {"stream", "extra_body"}}
    body.update(payload.get("extra_body") or {})
    return body


def anthropic_result(message: dict[str, Any]) -> ChatResult:
    """An Anthropic ``message`` object as LangChain's reply: its text, thinking, tool calls and usage."""
    text = "".join(block.get("text", "") for block in message.get("content", []) if block.get("type") == "text")
    calls = [
        {"name": block["name"], "args": block.get("input") or {}, "id": block.get("id"), "type": "tool_call"}
        for block in message.get("content", [])
        if block.get("type") == "tool_use"
    ]
    usage = message.get("usage") or {}
    # thinking blocks: kept apart from the text, where the solver's split finds them
    thinking = "\n\n".join(
        str(block.get("thinking") or "") for block in message.get("content", []) if block.get("type") == "thinking"
    )
    reply = AIMessage(
        content=text,
        additional_kwargs={"reasoning_content": thinking} if thinking.strip() else {},
        tool_calls=calls,
        response_metadata={"model": message.get("model"), "stop_reason": message.get("stop_reason"), "batch": True},
        usage_metadata={
            "input_tokens": int(usage.get("input_tokens") or 0),
            "output_tokens": int(usage.get("output_tokens") or 0),
            "total_tokens": int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0),
        },
    )
    return ChatResult(generations=[ChatGeneration(message=reply)])


class BatchChatModel(WrappedChatModel):
    """The provider's model, asked through batches (see the module docstring)."""

    folder: Path
    settings: BatchSettings
    wrapper_kind: ClassVar[str] = "batch"

    def batcher(self) -> Batcher:
        return batcher_for(self.model_id, self.folder, lambda: _client(self.inner), self.settings)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        payload = self.inner._get_request_payload(messages, stop=stop, **kwargs)  # type: ignore[attr-defined]
        provider = batch_provider(self.inner)
        body = _openai_body(payload) if provider == "openai" else {k: v for k, v in payload.items() if k != "stream"}
        body = json.loads(json.dumps(body, default=str))  # plain JSON, as it will be sent and stored
        session = current_session_item()
        cid = custom_id(body, (session.item_id, session.run_index) if session else None)
        answer = self.batcher().ask(cid, body)
        if provider == "anthropic":
            return anthropic_result(answer)
        result: ChatResult = self.inner._create_chat_result(answer)  # type: ignore[attr-defined]
        for generation in result.generations:
            generation.message.response_metadata["batch"] = True
        return result
