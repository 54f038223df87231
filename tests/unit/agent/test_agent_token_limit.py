"""The token limit of a session (``[solver] max_session_tokens``, issue 49): a session whose
model calls used the budget makes no further call and ends with ``end_reason`` ``token_limit``
(not an error), recorded in a ``LIMIT`` entry; the adapt stage sends it no reformat prompt."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import StructuredTool

from ape.schemas.config import SolverConfig
from ape.schemas.results import Outcome
from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.models.session_item import session_item
from ape.tasks.report.health import LIMIT_SETTINGS
from ape.tasks.solving.solve import run_adaption, run_solver


def note(text: str) -> str:
    """Remember a line."""
    calls.append(text)
    return "noted"


calls: list[str] = []
TOOL = StructuredTool.from_function(note, name="note")
STEPS: list[Any] = [{"tool": "note", "args": {"text": f"line {i}"}} for i in range(20)] + ["done"]


def session(settings: SolverConfig, adapter: Any = str):  # type: ignore[no-untyped-def]
    model = MockChatModel(behaviour="agent", steps={"t1": STEPS})
    calls.clear()
    with session_item({"id": "t1"}, "t1", 0):
        state = run_solver(model, "write twenty lines", None, tools=[TOOL], settings=settings, item={"id": "t1"})
        record = run_adaption(model, state, adapter=adapter, settings=settings, tools=[TOOL], item={"id": "t1"})
    return state, record


def test_a_session_past_its_token_budget_ends_with_token_limit_not_an_error() -> None:
    unlimited, _ = session(SolverConfig(max_steps=30))
    assert unlimited.end_reason is None and unlimited.steps == 21
    budget = 60
    state, record = session(SolverConfig(max_steps=30, max_session_tokens=budget))
    assert state.error is None and state.end_reason == "token_limit" and record.end_reason == "token_limit"
    used = (state.input_tokens or 0) + (state.output_tokens or 0)
    assert used >= budget and 1 <= state.steps < 21 and len(calls) == state.steps
    limit = [entry for entry in state.transcript if entry.kind.value == "LIMIT"]
    assert len(limit) == 1 and limit[0].data["reason"] == "token_limit" and limit[0].data["tokens"] == used
    assert "max_session_tokens" in (limit[0].content or "")
    assert record.outcome is Outcome.SOLVED  # graded on what it left, like the other limits
    assert LIMIT_SETTINGS["token_limit"] == "[solver] max_session_tokens"


def test_no_model_call_is_made_past_the_budget_not_even_to_reformat_or_force_finish() -> None:
    def refuse(answer: str) -> str:
        raise ValueError("not parsable")

    state, record = session(SolverConfig(max_steps=2, max_session_tokens=1, solution_adaption_attempts=3), refuse)
    # one call crossed the budget; neither the force-finish prompt nor a reformat prompt followed
    assert state.steps == 1 and record.steps == 1 and not state.forced
    assert record.outcome is Outcome.PARSING_FAILED and record.end_reason == "token_limit"
    kinds = [entry.kind.value for entry in record.transcript]
    assert "FORCE_FINISH" not in kinds and "REFORMAT_PROMPT" not in kinds


def test_the_token_limit_is_in_the_cache_key_only_when_set() -> None:
    """A budget changes the answers, so a set one keys the cache; unset it is left out, so the
    sessions cached before the setting existed keep their key."""
    from ape.config import load_config
    from ape.tasks.setup.model import make_setup
    from tests.helpers.paths import REPO_ROOT

    config = load_config(REPO_ROOT / "examples" / "agent" / "config.toml")
    unset = make_setup(config, config.model[0]).fingerprint["solver"]
    assert "max_session_tokens" not in unset
    config.solver.max_session_tokens = 5000
    assert make_setup(config, config.model[0]).fingerprint["solver"]["max_session_tokens"] == 5000
