"""The mock models' reasoning: each shape, its length by effort, and the budget it spends first."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from ape.schemas.config import ModelConfig
from ape.tasks.models.build import build_model
from ape.tasks.models.mocks.reasoning import EFFORT_WORDS, think
from ape.tasks.solving.reasoning import ReplyParts, cut_while_reasoning, split_reply
from ape.tasks.solving.stops import is_cut, stop_reason


def ask(shape: str, *, effort: str | None = None, max_tokens: int | None = None) -> AIMessage:
    cfg = ModelConfig(
        provider="mock",
        name=f"thinker-{shape}-{effort}-{max_tokens}",
        max_tokens=max_tokens,
        reasoning_effort=effort,  # type: ignore[arg-type]
        args={"use_tools": False, "reasoning": shape},
    )
    reply = build_model(cfg, Path(".")).invoke([HumanMessage(content="What is 5 + 7?")])
    assert isinstance(reply, AIMessage)
    return reply


@pytest.mark.parametrize("shape", ["tags", "field"])
def test_each_shape_splits_into_a_wrong_guess_and_the_answer(shape: str) -> None:
    reply = ask(shape, effort="low")
    parts = split_reply(reply)
    assert parts.answer == "The answer is 12"
    assert parts.reasoning is not None and parts.reasoning.startswith("A first guess: 13.")
    assert len(parts.reasoning.split()) == EFFORT_WORDS["low"]
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["output_token_details"] == {"reasoning": 16}
    assert reply.usage_metadata["output_tokens"] == 16 + 4  # reasoning counted in the output


def test_effort_none_thinks_not_at_all() -> None:
    reply = ask("tags", effort="none")
    assert reply.content == "The answer is 12" and split_reply(reply) == ReplyParts(None, "The answer is 12")


@pytest.mark.parametrize("shape", ["tags", "field"])
def test_a_budget_smaller_than_the_reasoning_ends_inside_it(shape: str) -> None:
    reply = ask(shape, effort="medium", max_tokens=10)
    parts = split_reply(reply)
    assert stop_reason(reply.response_metadata) == "length" and parts.answer == ""
    assert cut_while_reasoning(parts, is_cut("length"))


@pytest.mark.parametrize("shape", ["tags", "field"])
def test_a_budget_that_fits_the_reasoning_cuts_the_answer_after_it(shape: str) -> None:
    reply = ask(shape, effort="low", max_tokens=18)
    parts = split_reply(reply)
    assert stop_reason(reply.response_metadata) == "length" and parts.answer == "The answer"
    assert not cut_while_reasoning(parts, is_cut("length"))


def test_tool_calls_are_not_thought_about() -> None:
    call = AIMessage(content="", tool_calls=[{"name": "calculator", "args": {"expression": "5+7"}, "id": "c1"}])
    assert think(call, "tags", 16, None) == (call, 0)
