"""Answers cut at the token limit: the stop reason is read, recorded, and ends the session TRUNCATED."""

from __future__ import annotations

from enum import Enum
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from ape.schemas.config import GIVE_UP_TOKEN, SolverConfig
from ape.schemas.results import Outcome
from ape.schemas.transcript import EntryKind
from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.solving.solve import solve_session
from ape.tasks.solving.stops import is_cut, stop_reason
from ape.tasks.solving.tools import calculator
from tests.unit.solving.test_solve import call, scripted


class CountingAdapter:
    """LastNumber-like: the last integer in the text; remembers every text it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, text: str) -> int:
        self.seen.append(text)
        numbers = [int(word.strip(".")) for word in text.split() if word.strip(".").lstrip("-").isdigit()]
        if not numbers:
            raise ValueError("no number in the answer")
        return numbers[-1]


def cut(text: str, **metadata: Any) -> AIMessage:
    return AIMessage(content=text, response_metadata=metadata or {"finish_reason": "length"})


class GeminiReason(Enum):
    MAX_TOKENS = "MAX_TOKENS"


@pytest.mark.parametrize(
    ("metadata", "reason", "was_cut"),
    [
        ({"finish_reason": "length"}, "length", True),  # OpenAI, vLLM, llama.cpp server
        ({"finish_reason": "stop"}, "stop", False),
        ({"finish_reason": "tool_calls"}, "tool_calls", False),
        ({"stop_reason": "max_tokens"}, "max_tokens", True),  # Anthropic
        ({"stop_reason": "end_turn"}, "end_turn", False),
        ({"done_reason": "length"}, "length", True),  # Ollama
        ({"finish_reason": "MAX_TOKENS"}, "MAX_TOKENS", True),  # Gemini
        ({"finish_reason": GeminiReason.MAX_TOKENS}, "MAX_TOKENS", True),
        ({}, None, False),
        (None, None, False),
    ],
)
def test_stop_reasons_of_each_provider(metadata: Any, reason: str | None, was_cut: bool) -> None:
    assert stop_reason(metadata) == reason
    assert is_cut(stop_reason(metadata)) is was_cut


def test_a_cut_answer_ends_truncated_unparsed_even_when_a_number_is_in_it() -> None:
    adapter = CountingAdapter()
    record = solve_session(scripted(cut("The answer is 4")), "2+2?", None, adapter=adapter, settings=SolverConfig())
    assert record.outcome is Outcome.TRUNCATED
    assert record.stop_reason == "length" and record.solution is None and record.raw_output == "The answer is 4"
    assert adapter.seen == []  # a prefix is not graded as the model's answer
    kinds = [entry.kind for entry in record.transcript]
    assert kinds == [EntryKind.PROMPT, EntryKind.MODEL_RESPONSE, EntryKind.TRUNCATED]
    assert record.transcript[1].data["stop_reason"] == "length"
    assert record.transcript[2].data == {"stop_reason": "length"}


def test_an_anthropic_reasoning_model_that_spent_its_budget_thinking_ends_truncated() -> None:
    reply = cut("", stop_reason="max_tokens")  # no visible answer: the budget went to thinking
    record = solve_session(scripted(reply), "2+2?", None, adapter=CountingAdapter(), settings=SolverConfig())
    assert record.outcome is Outcome.TRUNCATED and record.stop_reason == "max_tokens"


def test_a_finished_answer_records_its_stop_reason_and_is_parsed() -> None:
    reply = AIMessage(content="The answer is 4", response_metadata={"finish_reason": "stop"})
    record = solve_session(scripted(reply), "2+2?", None, adapter=CountingAdapter(), settings=SolverConfig())
    assert record.outcome is Outcome.SOLVED and record.solution == 4 and record.stop_reason == "stop"


def test_a_model_that_reports_no_stop_reason_is_unchanged() -> None:
    record = solve_session(
        scripted("The answer is 4"), "2+2?", None, adapter=CountingAdapter(), settings=SolverConfig()
    )
    assert record.outcome is Outcome.SOLVED and record.stop_reason is None
    assert "stop_reason" not in record.transcript[1].data


def test_a_reformatted_answer_cut_short_ends_truncated() -> None:
    adapter = CountingAdapter()
    model = scripted(AIMessage(content="four", response_metadata={"finish_reason": "stop"}), cut("The answer"))
    record = solve_session(model, "2+2?", None, adapter=adapter, settings=SolverConfig(solution_adaption_attempts=3))
    assert record.outcome is Outcome.TRUNCATED and record.raw_output == "The answer"
    assert adapter.seen == ["four"]  # the cut reformat was not parsed, and no third attempt was made
    assert record.transcript[-1].kind is EntryKind.TRUNCATED


def test_a_cut_tool_call_step_does_not_decide_the_outcome() -> None:
    tool_step = call("calculator", {"expression": "2+2"}, "c1")
    tool_step.response_metadata = {"finish_reason": "length"}
    final = AIMessage(content="The answer is 4", response_metadata={"finish_reason": "stop"})
    record = solve_session(
        scripted(tool_step, final),
        "2+2?",
        None,
        tools=[calculator()],
        adapter=CountingAdapter(),
        settings=SolverConfig(),
    )
    assert record.outcome is Outcome.SOLVED and record.stop_reason == "stop"


def test_giving_up_wins_over_a_cut() -> None:
    record = solve_session(
        scripted(cut(f"{GIVE_UP_TOKEN} because")), "?", None, adapter=CountingAdapter(), settings=SolverConfig()
    )
    assert record.outcome is Outcome.GAVE_UP


def answer_of(model: MockChatModel, prompt: str = "What is 2 + 3?") -> AIMessage:
    reply = model.invoke([HumanMessage(content=prompt)])
    assert isinstance(reply, AIMessage)
    return reply


def test_the_mock_cuts_answers_longer_than_max_tokens() -> None:
    full = answer_of(MockChatModel())
    assert full.content == "The answer is 5" and full.response_metadata["finish_reason"] == "stop"
    short = answer_of(MockChatModel(max_tokens=2))
    assert short.content == "The answer" and short.response_metadata["finish_reason"] == "length"
    assert short.usage_metadata is not None and short.usage_metadata["output_tokens"] == 2
    roomy = answer_of(MockChatModel(max_tokens=4))
    assert roomy.content == "The answer is 5" and roomy.response_metadata["finish_reason"] == "stop"


def test_the_mock_cuts_a_seeded_share_of_prompts_the_same_way_every_time() -> None:
    prompts = [f"What is {i} + {i + 1}?" for i in range(200)]
    model = MockChatModel(truncate=0.3, seed=4)
    first = [answer_of(model, p).response_metadata["finish_reason"] == "length" for p in prompts]
    again = [
        answer_of(MockChatModel(truncate=0.3, seed=4), p).response_metadata["finish_reason"] == "length"
        for p in prompts
    ]
    assert first == again and 0.2 < sum(first) / len(first) < 0.4
    cut_one = answer_of(model, prompts[first.index(True)])
    assert cut_one.content == "The answer"  # half of "The answer is N"
    assert all(
        not answer_of(MockChatModel(truncate=0.0), p).response_metadata["finish_reason"] == "length"
        for p in prompts[:20]
    )


def test_the_mock_never_cuts_a_tool_call() -> None:
    model = MockChatModel(truncate=1.0).bind_tools([calculator()])
    reply = model.invoke([HumanMessage(content="What is 2 + 3?")])
    assert reply.tool_calls and reply.response_metadata["finish_reason"] == "tool_calls"
