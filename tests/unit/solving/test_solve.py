"""Solver sessions driven by scripted fake chat models: every branch of solve and adapt."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from ape.schemas.config import GIVE_UP_TOKEN, SolverConfig
from ape.schemas.results import CheckStatus, Generation, Outcome
from ape.schemas.transcript import EntryKind, SolveRecord, SolverState
from ape.tasks.checking.check import checker_tool
from ape.tasks.solving.adapt import JsonAdapter, LastNumberAdapter, RawAdapter, StripAdapter
from ape.tasks.solving.solve import (
    NOT_EXECUTED,
    answer_stats,
    build_messages,
    run_adaption,
    run_solver,
    solve_session,
)
from ape.tasks.solving.tools import calculator


class ScriptedChat(GenericFakeChatModel):
    """Replies from a script (an AIMessage, a str, or an exception to raise) and remembers
    what it was sent and which tools were bound."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[str] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        self.bound = [t.name for t in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        step = next(self.messages)
        if isinstance(step, Exception):
            raise step
        message = AIMessage(content=step) if isinstance(step, str) else step
        return ChatResult(generations=[ChatGeneration(message=message)])


def scripted(*steps: Any) -> ScriptedChat:
    return ScriptedChat(messages=iter(steps))


def call(name: str, args: dict[str, Any], call_id: str, text: str = "") -> AIMessage:
    return AIMessage(content=text, tool_calls=[{"name": name, "args": args, "id": call_id}])


def kinds(record: SolveRecord | SolverState) -> list[EntryKind]:
    return [entry.kind for entry in record.transcript]


SETTINGS = SolverConfig(max_steps=4, solution_adaption_attempts=2)


@tool
def explode(x: int) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"boom {x}")


def test_build_messages_puts_system_first_and_prompt_as_human():
    with_system = build_messages("What is 2+2?", "Be brief.")
    assert [type(m) for m in with_system] == [SystemMessage, HumanMessage]
    assert with_system[1].content == "What is 2+2?"
    assert [type(m) for m in build_messages("Q", None)] == [HumanMessage]


def test_plain_answer_is_solved_with_usage_and_reported_confidence():
    model = scripted(
        AIMessage(
            content=" 42 ",
            usage_metadata={"input_tokens": 11, "output_tokens": 3, "total_tokens": 14},
            response_metadata={"confidence": 0.8},
        )
    )
    record = solve_session(model, "Q?", "sys", tools=[], adapter=LastNumberAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED
    assert record.solution == 42 and record.raw_output == " 42 "
    assert record.steps == 1
    assert (record.input_tokens, record.output_tokens) == (11, 3)
    assert record.confidence == 0.8
    assert kinds(record) == [
        EntryKind.SYSTEM,
        EntryKind.PROMPT,
        EntryKind.MODEL_RESPONSE,
        EntryKind.PARSE_ATTEMPT,
        EntryKind.PARSED,
    ]
    times = [e.t for e in record.transcript]
    assert times == sorted(times) and record.latency_s >= times[-1]
    assert model.bound == []  # no tools: nothing bound


def test_tool_loop_executes_calls_and_feeds_results_back():
    model = scripted(
        call("calculator", {"expression": "6*7"}, "c1"),
        call("calculator", {"expression": "42+0"}, "c2"),
        "The answer is 42",
    )
    record = solve_session(model, "6*7?", None, tools=[calculator()], adapter=LastNumberAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED and record.solution == 42
    assert model.bound == ["calculator"]
    assert record.steps == 3
    second_call = model.seen[1]
    assert isinstance(second_call[-1], ToolMessage)
    assert second_call[-1].content == "42" and second_call[-1].tool_call_id == "c1"
    results = [e for e in record.transcript if e.kind is EntryKind.TOOL_RESULT]
    assert [r.content for r in results] == ["42", "42"]
    tool_calls = [e for e in record.transcript if e.kind is EntryKind.TOOL_CALL]
    assert tool_calls[0].data == {"id": "c1", "args": {"expression": "6*7"}}
    assert EntryKind.FORCE_FINISH not in kinds(record)


def test_force_finish_after_max_steps_and_forced_answer_is_parsed():
    settings = SolverConfig(max_steps=2, force_finish_prompt="FINISH NOW")
    model = scripted(
        call("calculator", {"expression": "1+1"}, "a"),
        call("calculator", {"expression": "2+2"}, "b"),
        call("calculator", {"expression": "3+3"}, "c", text="final: 7"),  # forced reply
    )
    state = run_solver(model, "Q", None, tools=[calculator()], settings=settings)
    assert state.forced and state.steps == 3 and state.answer == "final: 7"
    assert model.seen[2][-1] == HumanMessage(content="FINISH NOW")
    # the tool call in the forced reply is answered but not run
    assert kinds(state)[-2:] == [EntryKind.TOOL_CALL, EntryKind.TOOL_ERROR]
    assert state.transcript[-1].content == NOT_EXECUTED
    record = run_adaption(model, state, adapter=LastNumberAdapter(), settings=settings, tools=[calculator()])
    assert record.outcome is Outcome.SOLVED and record.solution == 7
    assert kinds(record).count(EntryKind.FORCE_FINISH) == 1


def test_forced_answer_with_give_up_token_gives_up():
    settings = SolverConfig(max_steps=1)
    model = scripted(call("calculator", {"expression": "1"}, "a"), f"Sorry. {GIVE_UP_TOKEN}")
    record = solve_session(model, "Q", None, tools=[calculator()], adapter=RawAdapter(), settings=settings)
    assert record.outcome is Outcome.GAVE_UP
    assert EntryKind.FORCE_FINISH in kinds(record) and kinds(record)[-1] is EntryKind.GAVE_UP
    assert record.error is None and record.solution is None


def test_give_up_skips_the_adapter():
    def must_not_run(text: str) -> Any:
        raise AssertionError("adapter called")

    model = scripted(f"I cannot do this. {GIVE_UP_TOKEN}")
    record = solve_session(model, "Q", None, tools=[], adapter=must_not_run, settings=SETTINGS)
    assert record.outcome is Outcome.GAVE_UP
    assert EntryKind.PARSE_ATTEMPT not in kinds(record)


def test_reformat_succeeds_on_second_attempt_in_the_same_conversation():
    settings = SolverConfig(solution_adaption_attempts=3, reformat_prompt='Bad: {error}. Use JSON like {"a": 1}.')
    model = scripted("I think it is forty-two", "42")
    record = solve_session(model, "Q", "sys", tools=[], adapter=LastNumberAdapter(), settings=settings)
    assert record.outcome is Outcome.SOLVED and record.solution == 42
    assert record.steps == 2 and record.raw_output == "42"
    reformat = model.seen[1]
    assert [type(m) for m in reformat] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert reformat[-1].content == 'Bad: the answer contains no number. Use JSON like {"a": 1}.'
    assert kinds(record)[-6:] == [
        EntryKind.PARSE_ATTEMPT,
        EntryKind.PARSE_FAILED,
        EntryKind.REFORMAT_PROMPT,
        EntryKind.MODEL_RESPONSE,
        EntryKind.PARSE_ATTEMPT,
        EntryKind.PARSED,
    ]


def test_parsing_failed_after_all_attempts():
    model = scripted("no", "still no", "never asked")
    record = solve_session(model, "Q", None, tools=[], adapter=LastNumberAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.PARSING_FAILED
    assert len(model.seen) == 2  # the answer plus exactly one reformat (2 attempts in total)
    assert record.error is not None and record.error.type == "ValueError"
    assert "no number" in record.error.message
    assert kinds(record).count(EntryKind.PARSE_FAILED) == 2
    assert record.raw_output == "still no"


def test_single_attempt_sends_no_reformat_prompt():
    model = scripted("no")
    settings = SolverConfig(solution_adaption_attempts=1)
    record = solve_session(model, "Q", None, tools=[], adapter=LastNumberAdapter(), settings=settings)
    assert record.outcome is Outcome.PARSING_FAILED
    assert EntryKind.REFORMAT_PROMPT not in kinds(record)


def test_give_up_in_reply_to_reformat():
    model = scripted("hmm", GIVE_UP_TOKEN)
    record = solve_session(model, "Q", None, tools=[], adapter=LastNumberAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.GAVE_UP


def test_checker_exposed_as_tool_lets_the_model_verify():
    item = {"answer": 42}
    checks: list[Any] = []

    def checker(it: dict[str, int], solution: int) -> bool:
        checks.append(solution)
        return solution == it["answer"]

    adapter = LastNumberAdapter()
    verify = checker_tool(checker, item, adapter, "check_solution")
    model = scripted(
        call("check_solution", {"answer": "41"}, "k1"),
        call("check_solution", {"answer": "no number"}, "k2"),
        call("check_solution", {"answer": "42"}, "k3"),
        "42",
    )
    record = solve_session(model, "Q", None, tools=[verify], adapter=adapter, settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED and record.solution == 42
    assert model.bound == ["check_solution"]
    results = [e.content for e in record.transcript if e.kind is EntryKind.TOOL_RESULT]
    assert results[0] == CheckStatus.FAILED.value
    assert results[1].startswith("UNPARSABLE")
    assert results[2] == CheckStatus.PASSED.value
    assert checks == [41, 42]


def test_tool_that_raises_becomes_an_error_message_to_the_model():
    model = scripted(call("explode", {"x": 3}, "e1"), call("nope", {}, "e2"), "5")
    record = solve_session(model, "Q", None, tools=[explode], adapter=LastNumberAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED and record.solution == 5
    errors = [e for e in record.transcript if e.kind is EntryKind.TOOL_ERROR]
    assert errors[0].error is not None and errors[0].error.type == "RuntimeError"
    assert "boom 3" in (errors[0].content or "")
    assert errors[1].error is not None and errors[1].error.type == "UnknownTool"
    fed_back = model.seen[1][-1]
    assert isinstance(fed_back, ToolMessage) and fed_back.status == "error"
    assert "boom 3" in fed_back.content


def test_invalid_tool_calls_and_missing_ids_are_answered_with_errors():
    broken = AIMessage(
        content="",
        tool_calls=[{"name": "calculator", "args": {"expression": "2+2"}, "id": None}],
        invalid_tool_calls=[
            {
                "name": "calculator",
                "args": "{oops",
                "id": "bad1",
                "error": "bad JSON",
                "type": "invalid_tool_call",
            }
        ],
    )
    model = scripted(broken, "4")
    record = solve_session(model, "Q", None, tools=[calculator()], adapter=LastNumberAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.SOLVED and record.solution == 4
    sent = model.seen[1]
    ai, first, second = sent[-3], sent[-2], sent[-1]
    assert isinstance(ai, AIMessage) and ai.tool_calls[0]["id"] == first.tool_call_id
    assert first.content == "4" and first.status == "success"
    assert second.tool_call_id == "bad1" and second.status == "error"
    assert "bad JSON" in second.content
    errors = [e for e in record.transcript if e.kind is EntryKind.TOOL_ERROR]
    assert errors[0].error is not None and errors[0].error.type == "InvalidToolCall"


def test_model_that_raises_ends_the_session_as_error():
    model = scripted(call("calculator", {"expression": "1"}, "a"), ConnectionError("server down"))
    record = solve_session(model, "Q", None, tools=[calculator()], adapter=RawAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.ERROR
    assert record.error is not None
    assert (record.error.type, record.error.message) == ("ConnectionError", "server down")
    assert kinds(record)[-1] is EntryKind.MODEL_ERROR
    assert record.steps == 2


def test_model_that_raises_during_reformat_is_an_error():
    model = scripted("no number", TimeoutError("slow"))
    record = solve_session(model, "Q", None, tools=[], adapter=LastNumberAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.ERROR and record.error is not None
    assert record.error.type == "TimeoutError" and record.raw_output == "no number"


def test_model_without_tool_support():
    plain = GenericFakeChatModel(messages=iter(["7"]))
    ok = solve_session(plain, "Q", None, tools=[], adapter=StripAdapter(), settings=SETTINGS)
    assert ok.outcome is Outcome.SOLVED and ok.solution == "7"
    plain = GenericFakeChatModel(messages=iter(["7"]))
    bad = solve_session(plain, "Q", None, tools=[calculator()], adapter=StripAdapter(), settings=SETTINGS)
    assert bad.outcome is Outcome.ERROR and bad.error is not None
    assert "does not support tool calling" in bad.error.message


def test_confidence_from_token_logprobs():
    logprobs = {"content": [{"token": "4", "logprob": -0.1}, {"token": "2", "logprob": -0.3}]}
    message = AIMessage(content="42", response_metadata={"logprobs": logprobs})
    confidence, nll, count = answer_stats(message)
    assert nll == pytest.approx(0.4) and count == 2
    assert confidence == pytest.approx(math.exp(-0.2))
    record = solve_session(scripted(message), "Q", None, tools=[], adapter=StripAdapter(), settings=SETTINGS)
    assert record.confidence == pytest.approx(math.exp(-0.2)) and record.token_count == 2
    assert answer_stats(AIMessage(content="x")) == (None, None, None)


class FakeAdapterModel:
    """A ModelAdapter: one generate() per call."""

    model_id = "fake"

    def __init__(self, texts: list[str]):
        self.texts = list(texts)
        self.prompts: list[tuple[str, Any]] = []

    def generate(self, prompt: str, task: Any) -> Generation:
        self.prompts.append((prompt, task))
        return Generation(text=self.texts.pop(0), confidence=0.7, token_nll=1.5, token_count=3)


def test_model_adapter_session_and_reformat():
    model = FakeAdapterModel(["unsure", "12"])
    settings = SolverConfig(reformat_prompt="Numbers only ({error})")
    record = solve_session(model, "Q", "SYS", tools=[], adapter=LastNumberAdapter(), settings=settings, item="it-1")
    assert record.outcome is Outcome.SOLVED and record.solution == 12
    assert record.confidence == 0.7 and record.token_nll == 1.5 and record.token_count == 3
    assert model.prompts[0] == ("SYS\n\nQ", "it-1")
    assert model.prompts[1][0] == "SYS\n\nQ\n\nNumbers only (the answer contains no number)"
    assert record.steps == 2


def test_model_adapter_that_raises():
    class Broken:
        model_id = "broken"

        def generate(self, prompt: str, task: Any) -> Generation:
            raise RuntimeError("no GPU")

    record = solve_session(Broken(), "Q", None, tools=[], adapter=RawAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.ERROR and record.error is not None
    assert record.error.message == "no GPU"


class Answer(BaseModel):
    value: int
    unit: str


def test_state_crosses_a_serialisation_boundary_and_pydantic_solutions_are_dumped():
    model = scripted(
        call("calculator", {"expression": "2*3"}, "c1"),
        'Result:\n```json\n{"value": 6, "unit": "m"}\n```',
    )
    state = run_solver(model, "Q", None, tools=[calculator()], settings=SETTINGS)
    restored = SolverState.model_validate_json(state.model_dump_json())
    assert restored == state
    adapter = JsonAdapter(model=f"{__name__}:Answer")
    record = run_adaption(model, restored, adapter=adapter, settings=SETTINGS, tools=[calculator()])
    assert record.outcome is Outcome.SOLVED
    assert record.solution == {"value": 6, "unit": "m"}
    assert record.value == Answer(value=6, unit="m")
    assert pickle.loads(pickle.dumps(record)).value == Answer(value=6, unit="m")
    again = SolveRecord.model_validate_json(record.model_dump_json())
    assert again.value == {"value": 6, "unit": "m"}  # JSON form after a JSON round trip
    assert again.transcript == record.transcript


def test_unknown_model_type_is_a_type_error():
    with pytest.raises(TypeError, match="neither a LangChain chat model nor a ModelAdapter"):
        run_solver(object(), "Q", None, settings=SETTINGS)
