"""The mock models' reasoning: a reply thought out loud before its answer, in the shape a
reasoning model's server sends (``[model] args.reasoning``), spending words of the budget.

- ``"tags"``: ``<think>...</think>`` before the answer, in the content (a model served
  without a reasoning parser);
- ``"field"``: the reasoning in the message's ``reasoning_content`` (vLLM, llama.cpp,
  DeepSeek), the answer alone in the content.

How long it thinks is ``reasoning_words``, else set by ``[model] reasoning_effort``
(:data:`EFFORT_WORDS`; ``none`` thinks not at all). The reasoning holds a wrong first guess
(the answer's last number plus one), so a run that graded the reasoning would show it. With
``max_tokens`` the reasoning spends the budget first, as a provider counts it: reasoning
longer than the budget is cut there and no answer follows (``finish_reason = "length"``,
the ``<think>`` block never closed); otherwise the answer gets what is left and is cut at
its end. Words stand for tokens, as everywhere in the mocks; the reasoning's words are
reported as the reply's reasoning tokens (``output_token_details.reasoning``).
"""

from __future__ import annotations

import re
from typing import Literal

from langchain_core.messages import AIMessage

__all__ = ["EFFORT_WORDS", "ReasoningShape", "think"]

ReasoningShape = Literal["none", "tags", "field"]
EFFORT_WORDS = {"none": 0, "minimal": 8, "low": 16, "medium": 32, "high": 64, "max": 128}
DEFAULT_WORDS = EFFORT_WORDS["medium"]
_FILLER = "Let me work through this step by step and check each part before I answer.".split()
_NUMBER = re.compile(r"-?\d+")


def reasoning_words(words: int | None, effort: str | None) -> int:
    """How many words the mock thinks: ``words`` when set, else its effort's, else the default."""
    if words is not None:
        return words
    return EFFORT_WORDS.get(effort or "", DEFAULT_WORDS)


def _thought(answer: str, words: int) -> list[str]:
    numbers = _NUMBER.findall(answer)
    guess = f"A first guess: {int(numbers[-1]) + 1}. No, check again.".split() if numbers else []
    filler = [_FILLER[i % len(_FILLER)] for i in range(max(0, words - len(guess)))]
    return (guess + filler)[:words]


def think(message: AIMessage, shape: ReasoningShape, words: int, max_tokens: int | None) -> tuple[AIMessage, int]:
    """``message`` (a final answer) with ``words`` of reasoning in ``shape`` before it, cut at
    ``max_tokens`` words in all; returns the reply and the reasoning words it spent."""
    if shape == "none" or words <= 0 or message.tool_calls:
        return message, 0
    answer = str(message.content).split()
    thought = _thought(" ".join(answer), words)
    cut = False
    if max_tokens is not None and len(thought) >= max_tokens:
        thought, answer, cut = thought[:max_tokens], [], True
    elif max_tokens is not None and len(thought) + len(answer) > max_tokens:
        answer, cut = answer[: max_tokens - len(thought)], True
    reasoning = " ".join(thought)
    if shape == "tags":
        message.content = f"<think>{reasoning}" + (f"</think>\n{' '.join(answer)}" if answer or not cut else "")
    else:
        message.content = " ".join(answer)
        message.additional_kwargs = {**message.additional_kwargs, "reasoning_content": reasoning}
    if cut:
        message.response_metadata = {**message.response_metadata, "finish_reason": "length"}
    return message, len(thought)
