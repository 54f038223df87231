"""ChatOpenAI that keeps a reasoning model's reasoning.

langchain-openai reads OpenAI's own response fields only: the ``reasoning_content`` of vLLM,
llama.cpp and DeepSeek, and OpenRouter's ``reasoning``, are dropped with the rest of the
raw message, so the solver could not keep the reasoning in the transcript. This subclass
reads them from the raw response and copies them into the reply's ``additional_kwargs``
under their own names, where :func:`ape.tasks.solving.reasoning.split_reply` finds them.
Everything else (requests, usage with its reasoning tokens, stop reasons) is ChatOpenAI's.
"""

from __future__ import annotations

from typing import Any

from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI

from ape.schemas.models import REASONING_FIELDS

__all__ = ["ReasoningChatOpenAI", "keep_reasoning"]


def keep_reasoning(response: Any, result: ChatResult) -> ChatResult:
    """Copy each choice's reasoning field of the raw ``response`` (a dict or the SDK's
    object, whose unknown fields it keeps) into the matching generation's message."""
    raw = response if isinstance(response, dict) else getattr(response, "model_dump", lambda **_: {})(warnings=False)
    choices = raw.get("choices") if isinstance(raw, dict) else None
    for choice, generation in zip(choices or [], result.generations, strict=False):
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        for name in REASONING_FIELDS:
            value = message.get(name)
            if isinstance(value, str) and value:
                generation.message.additional_kwargs[name] = value
    return result


class ReasoningChatOpenAI(ChatOpenAI):
    """ChatOpenAI that keeps ``reasoning_content`` / ``reasoning`` (module doc)."""

    def _create_chat_result(self, response: Any, generation_info: dict | None = None) -> ChatResult:
        return keep_reasoning(response, super()._create_chat_result(response, generation_info))
