"""The built-in mock chat models: behaviours, accuracy, tools, metadata and call counting."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import ValidationError

import ape.tasks.models.mocks.chat as mock_models
from ape.schemas.config import GIVE_UP_TOKEN
from ape.tasks.models.limits.policy import classify_error
from ape.tasks.models.mocks.chat import MockChatModel, MockTransientError, find_expression, format_number
from tests.helpers import mock_calls
from tests.helpers.concurrency import TIMEOUT_S, Gate


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return expression


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


def answer_number(text: str) -> float:
    match = re.fullmatch(r"The answer is (-?[\d.]+)", text)
    assert match, text
    return float(match.group(1))


@pytest.mark.parametrize(
    ("text", "expression", "value"),
    [
        ("What is 17 + 25?", "17 + 25", 42),
        ("Compute (3*4)-2.", "(3*4)-2", 10),
        ("First 1 + 1, then 6 * 7", "6 * 7", 42),
        ("(please add 2+3)", "2+3", 5),
        ("Item-3: what is 10 - 4?", "10 - 4", 6),
        ("2^10", "2^10", 1024),
        ("8 × 3 and 9 ÷ 3", "9 ÷ 3", 3),
        ("What is 7 / 2?", "7 / 2", 3.5),
        ("skip 1/0 but do 3*3", "3*3", 9),
    ],
)
def test_find_expression(text: str, expression: str, value: float) -> None:
    assert find_expression(text) == (expression, value)


@pytest.mark.parametrize("text", ["no numbers here", "just 5", "-5", "2**999999", "call __import__('os')"])
def test_find_expression_rejects_non_arithmetic(text: str) -> None:
    assert find_expression(text) is None


def test_format_number() -> None:
    assert [format_number(v) for v in (42, 42.0, 3.5, 1 / 3, -2.0)] == ["42", "42", "3.5", "0.333333", "-2"]


def test_arithmetic_answers_right_with_high_confidence() -> None:
    reply = MockChatModel().invoke("What is 17 + 25?")
    assert reply.content == "The answer is 42"
    assert reply.response_metadata["confidence"] >= 0.85
    assert reply.usage_metadata == {"input_tokens": 5, "output_tokens": 4, "total_tokens": 9}


def test_accuracy_is_deterministic_per_prompt() -> None:
    prompts = [f"What is {a} + {a * 3}?" for a in range(200)]
    model = MockChatModel(accuracy=0.6, seed=7)
    first = [model.invoke(p) for p in prompts]
    again = [MockChatModel(accuracy=0.6, seed=7).invoke(p).content for p in prompts]
    assert [r.content for r in first] == again
    wrong = [(p, r) for p, r in zip(prompts, first) if answer_number(r.content) != find_expression(p)[1]]
    assert 0.28 <= len(wrong) / len(prompts) <= 0.52  # about 1 - accuracy
    for prompt, reply in wrong:
        assert 1 <= abs(answer_number(reply.content) - find_expression(prompt)[1]) <= 3
        assert reply.response_metadata["confidence"] < 0.85
    other_seed = [MockChatModel(accuracy=0.6, seed=8).invoke(p).content for p in prompts]
    assert other_seed != again


def test_accuracy_zero_is_always_wrong() -> None:
    model = MockChatModel(accuracy=0.0)
    for a in range(20):
        assert answer_number(model.invoke(f"{a} * 2").content) != a * 2


def test_no_expression_gives_up() -> None:
    reply = MockChatModel().invoke("Tell me a story.")
    assert reply.content == GIVE_UP_TOKEN


def test_reformat_prompt_still_answers_the_task() -> None:
    messages = [
        HumanMessage("What is 6 * 7?"),
        AIMessage("forty-two"),
        HumanMessage("Your previous answer could not be parsed. Reply again."),
    ]
    assert MockChatModel().invoke(messages).content == "The answer is 42"


def test_calculator_tool_is_called_then_its_result_used() -> None:
    bound = MockChatModel().bind_tools([calculator])
    first = bound.invoke("What is 17 + 25?")
    assert first.content == ""
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [("calculator", {"expression": "17 + 25"})]
    result = ToolMessage("42", tool_call_id=first.tool_calls[0]["id"])  # no name, as many solvers send
    second = bound.invoke([HumanMessage("What is 17 + 25?"), first, result])
    assert second.content == "The answer is 42"
    assert second.tool_calls == []


def test_tools_ignored_when_disabled_or_no_calculator() -> None:
    assert MockChatModel(use_tools=False).bind_tools([calculator]).invoke("2 + 2").content == "The answer is 4"
    assert MockChatModel().bind_tools([lookup]).invoke("2 + 2").content == "The answer is 4"


def test_other_tool_result_gets_a_direct_answer() -> None:
    messages = [
        HumanMessage("What is 2 + 2?"),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"key": "x"}, "id": "c1"}]),
        ToolMessage("nothing", tool_call_id="c1"),
    ]
    reply = MockChatModel().bind_tools([calculator, lookup]).invoke(messages)
    assert reply.content == "The answer is 4" and not reply.tool_calls


def test_echo_scripted_and_give_up() -> None:
    assert MockChatModel(behaviour="echo").invoke("hello there").content == "hello there"
    scripted = MockChatModel(behaviour="scripted", responses=["a", "b"])
    assert [scripted.invoke("x").content for _ in range(3)] == ["a", "b", "a"]
    assert MockChatModel(behaviour="give_up").invoke("x").content == GIVE_UP_TOKEN


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValidationError, match="responses"):
        MockChatModel(behaviour="scripted")
    with pytest.raises(ValidationError, match="behavior"):
        MockChatModel(behavior="echo")
    with pytest.raises(ValidationError):
        MockChatModel(accuracy=1.5)


def test_logprobs_sum_to_the_confidence() -> None:
    reply = MockChatModel(logprobs=True).invoke("What is 1 + 2?")
    tokens = reply.response_metadata["logprobs"]["content"]
    assert [t["token"] for t in tokens] == ["The", "answer", "is", "3"]
    total = sum(t["logprob"] for t in tokens)
    assert math.exp(total) == pytest.approx(reply.response_metadata["confidence"])


def test_latency_overlaps_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The latency is slept without holding a lock: all five calls are in it at once."""
    slept: list[float] = []
    with ThreadPoolExecutor(5) as pool, Gate() as gate:

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            with gate.inside():
                pass

        monkeypatch.setattr(mock_models, "time", SimpleNamespace(sleep=sleep, time=time.time))
        model = MockChatModel(latency_s=0.2)
        futures = [pool.submit(model.invoke, f"{i} + 1") for i in range(5)]
        assert gate.wait_for(5)  # a model that serialised its calls would never have five sleeping
        gate.open()
        replies = [future.result(timeout=TIMEOUT_S) for future in futures]
    assert [r.content for r in replies] == [f"The answer is {i + 1}" for i in range(5)]
    assert slept == [0.2] * 5


@pytest.fixture
def fresh_call_counts() -> Iterator[None]:
    """The process-wide call counts start at zero, and are zeroed again after the test."""
    mock_calls.reset()
    try:
        yield
    finally:
        mock_calls.reset()


def test_calls_are_counted_per_name(fresh_call_counts: None) -> None:
    first, second = MockChatModel(name="count-a"), MockChatModel(name="count-b")
    for _ in range(3):
        first.invoke("1 + 1")
    second.invoke("1 + 1")
    assert mock_calls.chat_calls("count-a") == 3
    assert mock_calls.chat_calls("count-b") == 1
    assert mock_calls.chat_calls() == 4
    mock_calls.reset()
    assert mock_calls.chat_calls("count-a") == 0


def test_call_log_gets_one_line_per_call(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    model = MockChatModel(name="logged", call_log=str(log))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(model.invoke, [f"{i} + 1" for i in range(12)]))
    lines = log.read_text().splitlines()
    assert len(lines) == 12
    assert {json.loads(line)["model"] for line in lines} == {"logged"}


def test_transient_failures_look_like_dropped_connections() -> None:
    model = MockChatModel(transient_failures=1)
    with pytest.raises(MockTransientError) as info:
        model.invoke("1 + 1")
    assert classify_error(info.value) == "transient"
    assert model.invoke("1 + 1").content == "The answer is 2"


def test_sampling_draws_per_call_and_stays_reproducible():
    from langchain_core.messages import HumanMessage

    prompt = [HumanMessage("What is 40 + 2?")]

    def answers(sampling):
        model = MockChatModel(behaviour="arithmetic", accuracy=0.5, seed=3, sampling=sampling)
        return [model.invoke(prompt).content for _ in range(12)]

    assert len(set(answers(False))) == 1  # the prompt alone decides
    drawn = answers(True)
    assert "The answer is 42" in drawn and len(set(drawn)) > 1  # runs of one item differ
    assert drawn == answers(True)  # same instance order, same draws
