"""The chat model for ``provider = "llama-cpp"``: langchain-openai's ChatOpenAI, with the two
request fixes llama-cpp-python's server needs for tool calling.

- An assistant message that called tools has ``"content": null`` in OpenAI's format; the
  server's request schema wants a string there and answers 500 for the whole request, so
  a session's second model call (after its first tool call) always failed. It is sent as
  ``""``.
- The server's ``chatml-function-calling`` chat format shows the model its tools only when
  the request says ``tool_choice: "auto"``; without it the tools are silently left out of
  the prompt. OpenAI's API treats a missing ``tool_choice`` as ``auto`` and langchain-openai
  sends none, so a request with tools and no ``tool_choice`` gets ``auto``.
"""

from __future__ import annotations

from typing import Any

from ape.tasks.models.reasoning_chat import ReasoningChatOpenAI


def llama_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` as llama-cpp-python's server accepts it (module doc)."""
    for message in payload.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "assistant" and message.get("content") is None:
            message["content"] = ""
    if payload.get("tools") and payload.get("tool_choice") is None:
        payload["tool_choice"] = "auto"
    return payload


class LlamaChatOpenAI(ReasoningChatOpenAI):
    """ChatOpenAI (keeping reasoning fields) for APE's own llama-cpp-python server (module doc)."""

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
        return llama_payload(super()._get_request_payload(input_, stop=stop, **kwargs))
