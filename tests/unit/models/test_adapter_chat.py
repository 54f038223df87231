"""AdapterChatModel: ModelAdapters run through the one chat dialogue of ape.tasks.solving.solve."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, ValidationError

from ape.schemas.config import SolverConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import Generation, Outcome
from ape.schemas.transcript import EntryKind, SolveRecord
from ape.tasks.models.adapter_chat import AdapterChatModel, adapter_prompt, takes_item
from ape.tasks.models.limits.policy import RateLimiter, RetryPolicy
from ape.tasks.models.managed import ManagedChatModel
from ape.tasks.solving.adapt import LastNumberAdapter, RawAdapter
from ape.tasks.solving.solve import bind_tools, run_adaption, run_solver, solve_session
from ape.tasks.solving.tools import calculator

SETTINGS = SolverConfig(max_steps=4, solution_adaption_attempts=3, reformat_prompt="Numbers only ({error})")


class Recording:
    """A ModelAdapter that answers from a script and remembers (prompt, task) per call."""

    model_id = "recording"

    def __init__(self, *answers: Generation | str | Exception):
        self.answers = list(answers)
        self.calls: list[tuple[str, Any]] = []

    def generate(self, prompt: str, task: Any) -> Generation | str:
        self.calls.append((prompt, task))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def managed(adapter: Any, max_retries: int = 2) -> ManagedChatModel:
    return ManagedChatModel(
        inner=AdapterChatModel(adapter=adapter),
        retry=RetryPolicy(max_retries=max_retries, initial_s=0.001, max_s=0.002),
        limiter=RateLimiter(),
        model_id="m",
    )


def responses(record: SolveRecord) -> list[dict[str, Any]]:
    return [e.data for e in record.transcript if e.kind is EntryKind.MODEL_RESPONSE]


def test_prompt_is_the_opening_then_the_opening_and_the_newest_human_message():
    opening = [SystemMessage("SYS"), HumanMessage("Q")]
    assert adapter_prompt(opening) == "SYS\n\nQ"
    assert adapter_prompt(opening[1:]) == "Q"
    later = [*opening, AIMessage("a1"), HumanMessage("R1"), AIMessage("a2"), HumanMessage("R2")]
    assert adapter_prompt(later) == "SYS\n\nQ\n\nR2"  # never the earlier answers or reformats
    with pytest.raises(ValueError, match="human message"):
        adapter_prompt([SystemMessage("SYS")])


@pytest.mark.parametrize("system, opening", [("SYS", "SYS\n\nQ"), (None, "Q")])
@pytest.mark.parametrize("wrap", [lambda a: a, managed], ids=["raw", "managed"])
def test_prompts_and_item_on_the_first_call_and_on_reformats(system: str | None, opening: str, wrap: Any):
    adapter = Recording("unsure", "still unsure", Generation(text="12", confidence=0.9))
    item = {"id": "it-1"}
    record = solve_session(wrap(adapter), "Q", system, adapter=LastNumberAdapter(), settings=SETTINGS, item=item)
    assert record.outcome is Outcome.SOLVED and record.solution == 12 and record.steps == 3
    reformat = "Numbers only (the answer contains no number)"
    assert adapter.calls == [(opening, item), (f"{opening}\n\n{reformat}", item), (f"{opening}\n\n{reformat}", item)]


def test_generation_statistics_reach_the_record_and_the_transcript():
    adapter = Recording(Generation(text="7", confidence=0.7, token_nll=1.5, token_count=3))
    record = solve_session(managed(adapter), "Q", None, adapter=RawAdapter(), settings=SETTINGS, item="x")
    assert (record.confidence, record.token_nll, record.token_count) == (0.7, 1.5, 3)
    assert record.input_tokens is None and record.output_tokens is None
    assert responses(record) == [{"step": 1, "confidence": 0.7, "token_nll": 1.5, "token_count": 3}]
    plain = solve_session(Recording("7"), "Q", None, adapter=RawAdapter(), settings=SETTINGS)
    assert (plain.confidence, plain.token_nll, plain.token_count) == (None, None, None)
    assert responses(plain) == [{"step": 1}]
    partial = solve_session(
        Recording(Generation(text="7", confidence=0.5)), "Q", None, adapter=RawAdapter(), settings=SETTINGS
    )
    assert (partial.confidence, partial.token_nll, partial.token_count) == (0.5, None, None)


def test_transient_failures_are_retried_by_the_managed_wrapper():
    adapter = Recording(ConnectionResetError("dropped"), ConnectionResetError("dropped"), "42")
    record = solve_session(managed(adapter), "Q", None, adapter=LastNumberAdapter(), settings=SETTINGS, item=1)
    assert record.outcome is Outcome.SOLVED and record.solution == 42
    assert record.steps == 1 and len(adapter.calls) == 3
    assert [e.kind for e in record.transcript].count(EntryKind.MODEL_ERROR) == 0


@pytest.mark.parametrize("wrap", [lambda a: a, managed], ids=["raw", "managed"])
def test_a_raising_adapter_is_a_model_error(wrap: Any):
    record = solve_session(wrap(Recording(RuntimeError("no GPU"))), "Q", None, adapter=RawAdapter(), settings=SETTINGS)
    assert record.outcome is Outcome.ERROR and record.error is not None
    assert (record.error.type, record.error.message) == ("RuntimeError", "no GPU")
    errors = [e for e in record.transcript if e.kind is EntryKind.MODEL_ERROR]
    assert len(errors) == 1 and errors[0].data == {"step": 1}


def test_a_raising_adapter_during_a_reformat_is_an_error():
    adapter = Recording("no number", RuntimeError("gone"))
    state = run_solver(managed(adapter), "Q", None, settings=SETTINGS, item="it")
    record = run_adaption(managed(adapter), state, adapter=LastNumberAdapter(), settings=SETTINGS, item="it")
    assert record.outcome is Outcome.ERROR and record.raw_output == "no number"
    assert record.error is not None and record.error.message == "gone"


def test_binding_tools_is_the_clear_error_of_models_without_tool_support():
    with pytest.raises(NotImplementedError, match="cannot call tools"):
        AdapterChatModel(adapter=Recording()).bind_tools([calculator()])
    with pytest.raises(ApeError, match="does not support tool calling"):
        bind_tools(AdapterChatModel(adapter=Recording()), [calculator()])
    with pytest.raises(ApeError, match="does not support tools .*cannot call tools"):
        managed(Recording()).bind_tools([calculator()])
    for model in (Recording("7"), managed(Recording("7"))):
        record = solve_session(model, "Q", None, tools=[calculator()], adapter=RawAdapter(), settings=SETTINGS)
        assert record.outcome is Outcome.ERROR and record.error is not None
        assert "support tool" in record.error.message


class KeywordChat(BaseChatModel):
    """A chat model that records the call options it was given."""

    options: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "keyword-recorder"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.options.append(kwargs)
        return ChatResult(generations=[ChatGeneration(message=AIMessage("5"))])


def test_only_adapter_backed_models_get_the_item():
    chat = KeywordChat()
    record = solve_session(chat, "Q", None, adapter=RawAdapter(), settings=SETTINGS, item={"id": "x"})
    assert record.outcome is Outcome.SOLVED and chat.options == [{}]
    assert not takes_item(chat) and not takes_item(chat.bind(stop=["x"]))
    assert takes_item(AdapterChatModel(adapter=Recording())) and takes_item(managed(Recording()).bind(item=1))


def test_the_wrapper_checks_what_it_wraps_and_its_call_options():
    with pytest.raises(ValidationError, match="not a ModelAdapter"):
        AdapterChatModel(adapter=object())
    with pytest.raises(ValidationError):
        AdapterChatModel(adapter=Recording(), temperature=0.5)  # extra="forbid"
    model = AdapterChatModel(adapter=Recording("a", "b"))
    assert model.model_id == "recording"
    assert model.invoke("hi").content == "a"  # no item bound: generate gets None
    with pytest.raises(TypeError, match="no call options besides 'item'"):
        model.invoke("hi", temperature=0.1)
