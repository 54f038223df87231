"""A reasoning model's reply: the reasoning split off, the answer alone parsed and graded."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ape.schemas.config import ModelConfig, SolverConfig
from ape.schemas.results import Outcome
from ape.schemas.transcript import EntryKind
from ape.tasks.models.limits.policy import RetryPolicy, limiter_for
from ape.tasks.models.managed import ManagedChatModel
from ape.tasks.solving.reasoning import ReplyParts, cut_while_reasoning, split_reply, split_text
from ape.tasks.solving.solve import reasoning_tokens, solve_session
from tests.unit.solving.test_solve import scripted

SETTINGS = SolverConfig(max_steps=2, solution_adaption_attempts=2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>first guess 13</think>\n12", ReplyParts("first guess 13", "12")),
        ("first guess 13\n</think>\n\n12", ReplyParts("first guess 13", "12")),  # the template opened it
        ("<think>first guess 13, then", ReplyParts("first guess 13, then", "", unclosed=True)),
        ("  <think>a</think> <think>b</think> 12", ReplyParts("a\n\nb", "12")),
        ("<think></think>12", ReplyParts("", "12")),  # thinking switched off: an empty block
        ("12", ReplyParts(None, "12")),
        ("the tag <think> is not at the start: 12", ReplyParts(None, "the tag <think> is not at the start: 12")),
        ("", ReplyParts(None, "")),
    ],
)
def test_split_text(text: str, expected: ReplyParts) -> None:
    assert split_text(text) == expected


def test_a_models_own_tag_pair() -> None:
    tags = ("<reasoning>", "</reasoning>")
    assert split_text("<reasoning>13?</reasoning>12", tags) == ReplyParts("13?", "12")
    assert split_text("<think>13?</think>12", tags) == ReplyParts(None, "<think>13?</think>12")


@pytest.mark.parametrize(
    "message",
    [
        AIMessage(content="12", additional_kwargs={"reasoning_content": "first guess 13"}),  # vLLM, DeepSeek
        AIMessage(content="12", additional_kwargs={"reasoning": "first guess 13"}),  # OpenRouter
        AIMessage(  # Anthropic's thinking blocks
            content=[
                {"type": "thinking", "thinking": "first guess 13", "signature": "sig"},
                {"type": "text", "text": "12"},
            ]
        ),
        AIMessage(content=[{"type": "reasoning", "reasoning": "first guess 13"}, {"type": "text", "text": "12"}]),
        AIMessage(content="<think>first guess 13</think>12"),
    ],
)
def test_split_reply_reads_every_shape(message: AIMessage) -> None:
    assert split_reply(message) == ReplyParts("first guess 13", "12")


def test_a_reply_without_reasoning_is_all_answer() -> None:
    assert split_reply(AIMessage(content="12", additional_kwargs={"refusal": None})) == ReplyParts(None, "12")


def test_cut_while_reasoning_tells_the_two_cuts_apart() -> None:
    assert cut_while_reasoning(ReplyParts("13?", "", unclosed=True), cut=False)  # never closed
    assert cut_while_reasoning(ReplyParts("13, no", ""), cut=True)  # budget spent thinking
    assert not cut_while_reasoning(ReplyParts("13, no", "The answer is 1"), cut=True)  # answer cut after it
    assert not cut_while_reasoning(ReplyParts(None, ""), cut=True)  # an empty cut answer, no reasoning
    assert not cut_while_reasoning(ReplyParts("13, no", "12"), cut=False)


def last_number(text: str) -> int:
    return int(text.strip())  # strict: any reasoning left in the text fails the parse


def test_the_answer_alone_is_parsed_and_the_transcript_keeps_the_reasoning() -> None:
    reply = AIMessage(
        content="<think>first guess 13</think>\n12",
        usage_metadata={
            "input_tokens": 10,
            "output_tokens": 30,
            "total_tokens": 40,
            "output_token_details": {"reasoning": 25},
        },
        response_metadata={"finish_reason": "stop"},
    )
    record = solve_session(scripted(reply), "What is 5 + 7?", None, adapter=last_number, settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED and record.solution == 12 and record.raw_output == "12"
    response = next(e for e in record.transcript if e.kind is EntryKind.MODEL_RESPONSE)
    assert response.content == "12" and response.data["reasoning"] == "first guess 13"
    assert response.data["usage"]["reasoning_tokens"] == 25
    assert (record.reasoning_tokens, record.output_tokens, record.reasoning_cut) == (25, 30, False)
    assert all("13" not in (e.content or "") for e in record.transcript if e.kind is EntryKind.PARSE_ATTEMPT)


def test_a_reformatted_answer_is_split_too() -> None:
    first = AIMessage(content="<think>hm</think>twelve")
    second = AIMessage(content="<think>they want digits, not 13</think>12")
    record = solve_session(scripted(first, second), "What is 5 + 7?", None, adapter=last_number, settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED and record.raw_output == "12"
    assert [e.content for e in record.transcript if e.kind is EntryKind.PARSE_ATTEMPT] == ["twelve", "12"]


@pytest.mark.parametrize(
    ("reply", "reasoning_cut"),
    [
        (AIMessage(content="<think>5 + 7 is, hm, 13 or", response_metadata={"finish_reason": "length"}), True),
        (AIMessage(content="<think>5 + 7, hm", response_metadata={"finish_reason": "stop"}), True),  # never closed
        (
            AIMessage(
                content="",
                additional_kwargs={"reasoning_content": "13 or"},
                response_metadata={"finish_reason": "length"},
            ),
            True,
        ),
        (AIMessage(content="<think>12</think>The answer is", response_metadata={"finish_reason": "length"}), False),
    ],
)
def test_a_cut_inside_the_reasoning_is_told_apart(reply: AIMessage, reasoning_cut: bool) -> None:
    record = solve_session(scripted(reply), "What is 5 + 7?", None, adapter=last_number, settings=SETTINGS)
    assert record.outcome is Outcome.TRUNCATED and record.reasoning_cut is reasoning_cut
    cut = next(e for e in record.transcript if e.kind is EntryKind.TRUNCATED)
    assert cut.data.get("reasoning_cut", False) is reasoning_cut
    assert "13" not in (record.raw_output or "")  # the reasoning is never saved as the answer


def test_the_managed_models_tags_reach_the_solver() -> None:
    cfg = ModelConfig(provider="mock", name="tags-test", reasoning_tags=("[[", "]]"))
    model = ManagedChatModel(
        inner=scripted(AIMessage(content="[[13?]]12")),
        retry=RetryPolicy(max_retries=0),
        limiter=limiter_for(cfg.model_id, cfg),
        model_id=cfg.model_id,
        reasoning_tags=cfg.reasoning_tags,
    )
    record = solve_session(model, "What is 5 + 7?", None, adapter=last_number, settings=SETTINGS)
    assert record.raw_output == "12" and record.outcome is Outcome.SOLVED


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"output_tokens": 3, "output_token_details": {"reasoning": 2}}, 2),
        ({"output_tokens": 3, "output_token_details": {}}, None),
        ({"output_tokens": 3}, None),
        (None, None),
    ],
)
def test_reasoning_tokens_of_a_usage(usage: dict[str, Any] | None, expected: int | None) -> None:
    assert reasoning_tokens(usage) == expected


def test_chat_openai_keeps_the_reasoning_fields() -> None:
    pytest.importorskip("langchain_openai")
    from ape.tasks.models.reasoning_chat import ReasoningChatOpenAI

    client = ReasoningChatOpenAI(model="m", api_key="not-needed", base_url="http://127.0.0.1:9/v1")
    raw = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "12", "reasoning_content": "first guess 13"},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 9,
            "total_tokens": 10,
            "completion_tokens_details": {"reasoning_tokens": 7},
        },
    }
    result: ChatResult = client._create_chat_result(raw)
    generation = result.generations[0]
    assert isinstance(generation, ChatGeneration)
    message = generation.message
    assert split_reply(message) == ReplyParts("first guess 13", "12")
    assert reasoning_tokens(message.usage_metadata) == 7  # type: ignore[attr-defined]


def test_a_model_adapters_reply_is_split_too() -> None:
    from ape.schemas.results import Generation

    class Thinker:
        model_id = "thinker"

        def generate(self, prompt: str, task: Any) -> Generation:
            return Generation(text="<think>first guess 13</think>12", confidence=0.9)

    record = solve_session(Thinker(), "What is 5 + 7?", None, adapter=last_number, settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED and record.raw_output == "12"


def test_an_anthropic_batch_answer_keeps_its_thinking_apart() -> None:
    from ape.tasks.models.batch.chat import anthropic_result

    result = anthropic_result(
        {
            "model": "claude",
            "stop_reason": "end_turn",
            "content": [
                {"type": "thinking", "thinking": "first guess 13", "signature": "s"},
                {"type": "text", "text": "12"},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 9},
        }
    )
    message = result.generations[0].message
    assert split_reply(message) == ReplyParts("first guess 13", "12")
