"""Why a generation stopped, and whether that means it was cut at the token limit.

Providers say why an answer ended, each in its own words, and langchain-openai and
langchain-anthropic copy it into ``AIMessage.response_metadata``:

=========================  ====================  =====================================
provider                   key                   cut at the token limit
=========================  ====================  =====================================
OpenAI, vLLM, llama.cpp    ``finish_reason``     ``"length"``
Anthropic, Bedrock         ``stop_reason``       ``"max_tokens"``
Google Gemini              ``finish_reason``     ``"MAX_TOKENS"``
Ollama                     ``done_reason``       ``"length"``
=========================  ====================  =====================================

A reasoning model that spends its whole budget thinking ends the same way (OpenAI's
``finish_reason`` is ``"length"`` and the visible answer is empty), so it is read as cut
too. An answer so cut was never finished: the session ends TRUNCATED
(:class:`ape.schemas.results.Outcome`) rather than being parsed and graded as the model's
mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# in the order they are looked for; the first with a text value wins
STOP_KEYS = ("finish_reason", "stop_reason", "done_reason")
# the values that mean "the token limit ended it", compared in lower case
CUT_REASONS = frozenset({"length", "max_tokens", "model_length", "max_output_tokens"})


def stop_reason(metadata: Mapping[str, Any] | None) -> str | None:
    """The provider's stop reason in a reply's ``response_metadata``, or None when none is given."""
    if not metadata:
        return None
    for key in STOP_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if value is not None and hasattr(value, "value") and isinstance(value.value, str):  # an enum (Gemini)
            return str(value.value)
    return None


def is_cut(reason: str | None) -> bool:
    """Whether ``reason`` says the generation stopped at the token limit."""
    if reason is None:
        return False
    name = reason.lower()
    return name in CUT_REASONS or name.rsplit(".", 1)[-1] in CUT_REASONS  # "FinishReason.MAX_TOKENS"


class SessionLimit(Exception):  # noqa: N818 - a reason the session ends, not a failure
    """Raised by a tool to end the session's tool loop at a limit; ``reason`` is recorded as
    the session's ``end_reason`` and the session goes on to its answer and its grade."""

    reason = "limit"


class InfrastructureError(RuntimeError):
    """Raised by a tool whose machinery failed (a sandbox that would not start): the session
    ends ERROR with this error's type, apart from the model's mistakes, and ``ape retry``
    redoes it; the model is not told and asked to go on."""
