"""A reasoning model's reply split into its reasoning and its answer.

Only the answer is graded: the adapter, the reformat prompt, the checker and a judge must
never read what the model thought on its way, or a first guess crossed out in the reasoning
would be parsed, saved and judged as the answer. Providers hand the reasoning over in one
of these shapes, all read by :func:`split_reply`:

=====================================  =====================================================
shape                                  where
=====================================  =====================================================
``reasoning_content`` field            vLLM with a reasoning parser, llama.cpp
                                       ``--reasoning-format``, DeepSeek (the message's
                                       ``additional_kwargs``)
``reasoning`` field                    OpenRouter (``additional_kwargs``)
thinking content blocks                Anthropic: list content with ``type`` "thinking"
                                       (LangChain's standard blocks: "reasoning")
``<think>...</think>`` in the content  models served without a reasoning parser
only ``</think>``                      the chat template opened the tag itself
=====================================  =====================================================

The tag pair is the model's (``[model] reasoning_tags``, default ``<think>``/``</think>``).
A block opened and never closed leaves no answer: the budget ran out while the model was
still reasoning, which :func:`cut_while_reasoning` tells apart from an answer cut after
its reasoning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

from ape.schemas.config import DEFAULT_REASONING_TAGS
from ape.schemas.models import REASONING_FIELDS

__all__ = ["DEFAULT_TAGS", "ReplyParts", "cut_while_reasoning", "split_reply", "split_text"]

DEFAULT_TAGS = DEFAULT_REASONING_TAGS
# content-block types that hold reasoning, and the key of their text
_BLOCK_TEXT = {"thinking": "thinking", "reasoning": "reasoning"}


@dataclass(frozen=True)
class ReplyParts:
    """One reply, split: ``reasoning`` is None when the model showed none; ``unclosed`` is
    True when a reasoning block was opened and never closed (then ``answer`` is empty)."""

    reasoning: str | None
    answer: str
    unclosed: bool = False


def split_text(text: str, tags: Sequence[str] = DEFAULT_TAGS) -> ReplyParts:
    """Split ``<think>``-style reasoning off a reply's text.

    A closing tag makes everything before it reasoning (with or without its opening tag,
    which the chat template may have sent itself); blocks that follow one another at the
    start are all reasoning. An opening tag at the start that is never closed makes the
    whole text reasoning and leaves no answer. A text without the tags is all answer.
    """
    open_tag, close_tag = tags[0], tags[1]
    thoughts: list[str] = []
    rest = text
    while True:
        head, found, tail = rest.partition(close_tag)
        if not found:
            break
        thoughts.append(_without_open(head, open_tag))
        rest = tail
        if not rest.lstrip().startswith(open_tag):
            break
    if rest.lstrip().startswith(open_tag):  # opened, never closed: no answer was begun
        thoughts.append(_without_open(rest, open_tag))
        return ReplyParts(_joined(thoughts), "", unclosed=True)
    if not thoughts:
        return ReplyParts(None, text)
    return ReplyParts(_joined(thoughts), rest.lstrip())


def split_reply(message: BaseMessage, tags: Sequence[str] = DEFAULT_TAGS) -> ReplyParts:
    """The reasoning and the answer of one model reply, from any of the shapes above."""
    thoughts: list[str] = []
    for source in (message.additional_kwargs, message.response_metadata):
        found = _field(source)
        if found:
            thoughts.append(found)
            break
    content = message.content
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") in _BLOCK_TEXT:
                value = block.get(_BLOCK_TEXT[str(block["type"])])
                if isinstance(value, str) and value.strip():
                    thoughts.append(value.strip())
    parts = split_text(str(message.text), tags)
    if parts.reasoning is not None:
        thoughts.append(parts.reasoning)
    return ReplyParts(_joined(thoughts) if thoughts else None, parts.answer, parts.unclosed)


def cut_while_reasoning(parts: ReplyParts, cut: bool) -> bool:
    """Whether a reply ended inside its reasoning: a block never closed, or a reply cut at the
    token limit (``cut``) that reasoned and began no answer. An answer cut after its
    reasoning is an ordinary cut answer."""
    return parts.unclosed or (cut and parts.reasoning is not None and not parts.answer.strip())


def _field(source: Mapping[str, Any] | None) -> str | None:
    if not source:
        return None
    for name in REASONING_FIELDS:
        value = source.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _without_open(text: str, open_tag: str) -> str:
    stripped = text.strip()
    return stripped[len(open_tag) :].strip() if stripped.startswith(open_tag) else stripped


def _joined(thoughts: list[str]) -> str:
    return "\n\n".join(t for t in thoughts if t)
