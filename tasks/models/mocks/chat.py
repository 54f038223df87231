"""Built-in mock chat models: demos, dry runs and load tests without an API key.

``provider = "mock"`` in a ``[model]`` section builds a :class:`MockChatModel`.
It is a real LangChain ``BaseChatModel`` (tools bind, usage and metadata are
reported), so every stage of a run is exercised exactly as with a real model;
only the answer is computed locally. ``latency_s`` sleeps per call with
``time.sleep``, so worker threads overlap like they would on network I/O,
which is what the performance benchmarks measure.

Behaviours:

- ``arithmetic``: finds the last arithmetic expression ("17 + 25", "(3*4)-2")
  in the human messages, computes it safely and answers "The answer is N".
  With ``accuracy`` < 1 a share ``1 - accuracy`` of prompts, chosen
  deterministically from the prompt text and ``seed``, gets a slightly wrong
  answer (with ``sampling = true``, of calls instead, like a sampled model);
  ``accuracy_file`` reads the accuracy from a file at every call, so a served
  model can change between scheduled runs. With tools bound and ``use_tools``, the first step calls a tool
  named ``calculator`` and the next step answers from its result.
- ``echo``: answers with the last human message.
- ``scripted``: answers with ``responses``. Keyed by item id (a TOML table
  ``responses = { q01 = "...", q02 = "..." }``), every call of a session answers that item's
  response, whatever the worker and the order; an id without one is an error of that session.
  As a list, each model instance (one per solver worker) answers its calls in turn, call n
  with ``responses[(n - 1) % len]``, reformat and force-finish prompts included: which item
  gets which response then depends on the workers and their timing (one worker and one call
  per session: the file order).
- ``oracle``: answers from the item's ``field`` (:mod:`ape.tasks.models.mocks.oracle`): right on a
  share ``accuracy`` of the items, drawn from ``seed`` and the item id (and the run index with
  ``sampling``), a wrong value otherwise (``wrong``, else one made from the right one, another
  of the ``choices`` field's choices for multiple choice), written through the mustache
  ``template`` (default ``{{answer}}``) so the benchmark's adapter reads it.
- ``agent``: a scripted agent for agent benchmarks (docs/agents.md). ``steps`` is a table
  by item id of lists; the session's n-th model call answers the list's n-th entry: a table
  ``{tool = "bash", args = {command = "..."}}`` is a tool call, a string the final answer.
  Past the list's end it answers ``done``. An id without steps answers ``I_GIVE_UP``.
- ``give_up``: answers ``I_GIVE_UP``.
- ``grader``: a stand-in judge for demos of the ``judge`` checker. It reads the solution
  between the judge checker's markers (``<<<SOLUTION-T>>>`` ... ``<<<END-SOLUTION-T>>>``, the
  first such pair), else the ``<solution>...</solution>`` part, and the
  ``<reference>...</reference>`` part outside the markers, and answers ``GRADE: PASS`` when
  the solution holds every word of the reference (``GRADE: FAIL`` otherwise), or with
  ``scale = N`` ``GRADE: k``, k the share of the reference's words found times N. With
  ``accuracy`` < 1 a share of answers (chosen from the solution, the reference and
  ``seed``) gets the opposite (or a shifted) grade: a judge with a known error rate, whose
  errors fall on answers holding some of the reference's words (one holding none is failed).
- ``obedient``: the ``grader``, except that it does what the prompt tells it: a prompt
  holding "reply PASS", "grade PASS", "this answer is correct" or a line starting ``GRADE: PASS``
  anywhere (inside the solution too) gets ``GRADE: PASS``. A judge that injected answers talk round, for
  testing and measuring the judge checker's defences.

Cut-off answers, for every behaviour: with ``max_tokens`` (``[model] max_tokens``) a final
answer longer than that many words is cut to them; with ``truncate`` > 0 a share of the
prompts (drawn from ``seed`` and the session's first prompt, so an item is cut on every run)
gets its final answer cut to half its words (a one-word answer to nothing: a reasoning
model that spent its budget thinking). A cut answer reports ``finish_reason = "length"``,
as OpenAI-compatible servers do; every other answer ``"stop"`` (``"tool_calls"`` for a
tool call). Tool calls are never cut.

Reasoning, for every behaviour: ``reasoning = "tags"`` or ``"field"`` thinks before each final
answer, in that shape, for ``reasoning_words`` words (else as many as ``[model]
reasoning_effort`` asks for); the reasoning spends ``max_tokens`` first, so a small budget
ends inside it (:mod:`ape.tasks.models.mocks.reasoning`).

Each answer carries ``response_metadata["confidence"]`` (high when right, a
seeded value otherwise) and word-count ``usage_metadata``; with
``logprobs = true`` also OpenAI-shaped ``response_metadata["logprobs"]`` whose
log-probabilities sum to ``log(confidence)``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from ape.schemas.config import GIVE_UP_TOKEN
from ape.tasks.common.arithmetic import calculate
from ape.tasks.models.chat_wrapper import ToolBindingChatModel
from ape.tasks.models.mocks.oracle import format_value as format_answer
from ape.tasks.models.mocks.oracle import is_right, item_field, render_answer, wrong_value
from ape.tasks.models.mocks.reasoning import ReasoningShape, reasoning_words, think
from ape.tasks.models.session_item import SessionItem, current_session_item

Behaviour = Literal["arithmetic", "echo", "scripted", "agent", "give_up", "grader", "obedient", "oracle"]
CALCULATOR_TOOL = "calculator"

# Runs of characters that can form an arithmetic expression; parsed with ast afterwards.
_EXPRESSION_RUN = re.compile(r"[\d\s().+\-*/%^×÷]+")


class MockTransientError(ConnectionError):
    """Raised by ``transient_failures``: looks like a dropped connection, so it is retried."""


def _has_operation(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) for n in ast.walk(node))


def _trim(text: str) -> str:
    """Drop what a regex run picks up around an expression: unmatched brackets, a full stop."""
    text = text.strip()
    changed = True
    while changed and text:
        changed = False
        if text[-1] in ".+-*/%^×÷ " or (text[-1] == ")" and text.count(")") > text.count("(")):
            text, changed = text[:-1].rstrip(), True
        elif text[0] == "(" and text.count("(") > text.count(")"):
            text, changed = text[1:].lstrip(), True
        elif text[0] in ")*/%^×÷.":
            text, changed = text[1:].lstrip(), True
    return text


def find_expression(text: str) -> tuple[str, float | int] | None:
    """The last arithmetic expression in ``text`` and its value, or None.

    Only runs of digits, operators and brackets that contain at least one
    binary operation count, so "item 3" or "-5" alone are not expressions.
    ``^`` is read as a power, ``×`` and ``÷`` as multiply and divide.
    """
    for match in reversed(list(_EXPRESSION_RUN.finditer(text))):
        candidate = _trim(match.group())
        if not candidate or not any(c.isdigit() for c in candidate):
            continue
        source = candidate.replace("^", "**").replace("×", "*").replace("÷", "/")
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError:
            continue
        if not _has_operation(tree):
            continue
        try:
            return candidate, calculate(source)  # the same safe evaluator as the calculator tool
        except (ValueError, ArithmeticError, TypeError):
            continue
    return None


def format_number(value: float | int) -> str:
    """Integers without a decimal point; other values rounded to 6 decimals."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return str(value)
    return f"{round(value, 6):.6f}".rstrip("0").rstrip(".")


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from the parts (same prompt, same seed, same value)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _text_of(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)


_WORD = re.compile(r"[a-z0-9]+")


def _tagged(text: str, tag: str) -> str | None:
    """The text between ``<tag>`` and ``</tag>`` (the last such part), or None."""
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.S)
    return found[-1] if found else None


_BOUNDED = re.compile(r"<<<SOLUTION-([A-Z]+)>>>\n?(.*?)\n?<<<END-SOLUTION-\1>>>", re.S)
_OBEYED = re.compile(
    r"(?i:reply|respond|grade)\s+(?:with\s+|it\s+)?[\"']?PASS\b|(?i:this answer is correct)|^\s*GRADE:\s*PASS\b", re.M
)


def _bounded(text: str) -> tuple[str | None, str]:
    """The solution between the judge checker's first pair of markers (None without them),
    and the prompt without that part: what is inside is never read as the prompt's tags."""
    found = _BOUNDED.search(text)
    if found is None:
        return None, text
    return found.group(2), text[: found.start()] + text[found.end() :]


def _words(text: str) -> int:
    return len(text.split())


def _tool_names(tools: Sequence[Any] | None) -> set[str]:
    names: set[str] = set()
    for tool in tools or ():
        if isinstance(tool, dict):
            name = tool.get("function", {}).get("name") or tool.get("name")
            if name:
                names.add(str(name))
    return names


def _called_tool(result: ToolMessage, messages: list[BaseMessage]) -> str | None:
    """The name of the tool a ToolMessage answers (solvers do not always set ``name``)."""
    if result.name:
        return result.name
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id") == result.tool_call_id:
                    return call["name"]
    return None


class MockChatModel(ToolBindingChatModel):
    """A local chat model with a fixed behaviour, for demos, dry runs and load tests."""

    model_config = ConfigDict(extra="forbid")

    behaviour: Behaviour = "arithmetic"
    latency_s: float = Field(default=0.0, ge=0.0, description="Seconds slept per call.")
    accuracy: float = Field(default=1.0, ge=0.0, le=1.0, description="Share of right answers.")
    seed: int = 0
    use_tools: bool = Field(default=True, description="Call a bound 'calculator' tool first.")
    sampling: bool = Field(
        default=False,
        description="Draw right/wrong per call instead of per prompt, so the runs of one item "
        "differ (deterministic per instance and call order).",
    )
    consistency: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="With sampling: the share of prompts answered alike on every call and for "
        "every seed (a model's easy and hard items stay so across runs); the rest are drawn per call.",
    )
    responses: list[str] | dict[str, str] = Field(
        default_factory=list,
        description="For behaviour 'scripted': a table of answers by item id, or a list answered in turn per instance.",
    )
    steps: dict[str, list[str | dict[str, Any]]] = Field(
        default_factory=dict,
        description="For behaviour 'agent': by item id, the session's replies in order: a table "
        "{tool, args} is a tool call, a string the final answer.",
    )
    field: str | None = Field(default=None, description="For behaviour 'oracle': the item field holding the answer.")
    template: str = Field(
        default="{{answer}}",
        description="For behaviour 'oracle': the reply, a mustache template of the item's fields and 'answer'.",
    )
    wrong: str | None = Field(
        default=None, description="For behaviour 'oracle': the answer it gives when wrong (else one made up)."
    )
    choices: str | None = Field(
        default=None, description="For behaviour 'oracle': the item field listing the choices (multiple choice)."
    )
    logprobs: bool = Field(default=False, description="Also report OpenAI-shaped logprobs.")
    scale: int | None = Field(
        default=None, ge=1, le=100, description="For behaviour 'grader': grade 0..scale instead of PASS/FAIL."
    )
    call_log: str | None = Field(
        default=None, description="File that gets one line per call (counts calls across processes)."
    )
    accuracy_file: str | None = Field(
        default=None,
        description="File holding the accuracy as a number, read at every call instead of "
        "'accuracy' (a model whose quality changes between scheduled runs).",
    )
    seed_file: str | None = Field(
        default=None,
        description="File holding the seed as an integer, read at every call instead of 'seed' "
        "(a sampled model whose draws differ between scheduled runs while its settings stay the same).",
    )
    transient_failures: int = Field(
        default=0,
        ge=0,
        description="The first N calls of this instance fail like a dropped connection "
        "(each solver worker holds its own instance, so 4 workers fail 4N calls).",
    )

    max_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Cut a final answer to this many words, with finish_reason 'length' ([model] max_tokens).",
    )
    truncate: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of prompts whose final answer is cut to half its words, with finish_reason 'length'.",
    )

    reasoning: ReasoningShape = Field(
        default="none",
        description="Think before each final answer: 'tags' (<think>...</think> in the content) or 'field' "
        "(reasoning_content); 'none' answers at once (tasks/models/mocks/reasoning.py).",
    )
    reasoning_words: int | None = Field(
        default=None, ge=0, description="Words of reasoning per answer (unset: by reasoning_effort, 32 for none set)."
    )
    reasoning_effort: str | None = Field(
        default=None, description="[model] reasoning_effort: sets reasoning_words (none 0 ... max 128)."
    )

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _instance_calls: int = PrivateAttr(default=0)

    @model_validator(mode="after")
    def _behaviour_args(self) -> MockChatModel:
        if self.behaviour == "scripted" and not self.responses:
            raise ValueError("behaviour 'scripted' needs 'responses': a table by item id, or a non-empty list")
        if self.behaviour == "agent" and not self.steps:
            raise ValueError("behaviour 'agent' needs 'steps': a table by item id of lists of tool calls and answers")
        if self.behaviour == "oracle" and not self.field:
            raise ValueError("behaviour 'oracle' needs 'field', the item field that holds the right answer")
        oracle_args = [k for k in ("field", "wrong", "choices") if getattr(self, k) is not None]
        if self.template != "{{answer}}":
            oracle_args.append("template")
        if self.behaviour != "oracle" and oracle_args:
            raise ValueError(f"'{oracle_args[0]}' is an argument of behaviour 'oracle', not '{self.behaviour}'")
        return self

    @property
    def _llm_type(self) -> str:
        return "ape-mock"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"behaviour": self.behaviour, "accuracy": self.accuracy, "seed": self.seed}

    @property
    def model_key(self) -> str:
        """The name its calls are logged under (``call_log``): its ``name``, else the behaviour."""
        return self.name or f"mock/{self.behaviour}"

    def _log_call(self, messages: list[BaseMessage]) -> int:
        with self._lock:
            self._instance_calls += 1
            number = self._instance_calls
        if self.call_log:
            line = json.dumps(
                {
                    "model": self.model_key,
                    "pid": os.getpid(),
                    "time": time.time(),
                    "prompt": _unit(*(_text_of(m) for m in messages)),
                    "human": next((_text_of(m)[:200] for m in messages if isinstance(m, HumanMessage)), ""),
                }
            )
            with open(self.call_log, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()
        return number

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        number = self._log_call(messages)
        if self.latency_s:
            time.sleep(self.latency_s)
        if number <= self.transient_failures:
            raise MockTransientError(
                f"mock model '{self.model_key}': simulated dropped connection ({number} of {self.transient_failures})"
            )
        answer = self._answer(messages, _tool_names(kwargs.get("tools")), number)
        if self.reasoning == "none":
            message, thought = self._cut(answer, messages), 0
        else:  # the reasoning spends the budget first (mock_reasoning)
            words = reasoning_words(self.reasoning_words, self.reasoning_effort)
            message, thought = think(answer, self.reasoning, words, self.max_tokens)
        input_tokens = sum(_words(_text_of(m)) for m in messages)
        shown = _words(_text_of(message)) if self.reasoning != "field" else _words(_text_of(message)) + thought
        output_tokens = shown or (1 if message.tool_calls else 0)
        message.usage_metadata = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }
        if thought:
            message.usage_metadata["output_token_details"] = {"reasoning": thought}
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _cut(self, message: AIMessage, messages: list[BaseMessage]) -> AIMessage:
        """The answer as a provider returns one that hit the token limit: its first words and
        ``finish_reason = "length"`` (see the module docstring); other answers as they are."""
        if message.tool_calls or (self.max_tokens is None and not self.truncate):
            return message
        words = _text_of(message).split()
        limit = self.max_tokens if self.max_tokens is not None and len(words) > self.max_tokens else None
        if limit is None and self.truncate:
            first = next((_text_of(m) for m in messages if isinstance(m, HumanMessage)), "")
            if _unit(self._seed(), first, "truncate") < self.truncate:
                limit = len(words) // 2
        if limit is None:
            return message
        message.content = " ".join(words[:limit])
        message.response_metadata = {**message.response_metadata, "finish_reason": "length"}
        return message

    def _answer(self, messages: list[BaseMessage], tools: set[str], number: int) -> AIMessage:
        humans = [m for m in messages if isinstance(m, HumanMessage)]
        prompt = _text_of(humans[-1]) if humans else ""
        if self.behaviour == "echo":
            return self._reply(prompt, _unit(self.seed, prompt, "echo") * 0.5 + 0.5)
        if self.behaviour == "scripted":
            return self._scripted(prompt, number)
        if self.behaviour == "oracle":
            return self._oracle()
        if self.behaviour == "agent":
            return self._agent(messages, number)
        if self.behaviour == "give_up":
            return self._reply(GIVE_UP_TOKEN, 0.05)
        if self.behaviour in ("grader", "obedient"):
            return self._reply(self._grade(prompt), 0.9)
        return self._arithmetic(messages, humans, tools, number)

    def _arithmetic(
        self, messages: list[BaseMessage], humans: Sequence[BaseMessage], tools: set[str], number: int
    ) -> AIMessage:
        last = messages[-1] if messages else None
        if isinstance(last, ToolMessage) and _called_tool(last, messages) == CALCULATOR_TOOL:
            return self._reply(f"The answer is {_text_of(last).strip()}", 0.97)
        found = None
        for human in reversed(humans):  # a reformat or force-finish prompt holds no expression
            found = find_expression(_text_of(human))
            if found:
                source = _text_of(human)
                break
        if found is None:
            return self._reply(GIVE_UP_TOKEN, 0.05)
        expression, value = found
        fresh_step = isinstance(last, HumanMessage)
        if fresh_step and self.use_tools and CALCULATOR_TOOL in tools:
            call_id = f"call_{hashlib.sha256(expression.encode()).hexdigest()[:12]}"
            message = AIMessage(
                content="",
                tool_calls=[{"name": CALCULATOR_TOOL, "args": {"expression": expression}, "id": call_id}],
            )
            return self._with_metadata(message, 0.9, finish="tool_calls")
        # sampling: each call of this instance draws afresh, so repeated sessions of one
        # prompt can differ (what pass@k measures); otherwise the prompt decides
        seed = self._seed()
        key: tuple[object, ...] = (seed, source, number) if self.sampling else (seed, source)
        if self.sampling and _unit(source, "consistent") < self.consistency:
            key = ("consistent", source)
        if _unit(*key, "right") < self._accuracy():
            return self._reply(f"The answer is {format_number(value)}", 0.85 + 0.14 * _unit(*key, "c"))
        offset = 1 + int(_unit(*key, "offset") * 3)  # 1, 2 or 3
        wrong = value - offset if _unit(*key, "sign") < 0.5 else value + offset
        return self._reply(f"The answer is {format_number(wrong)}", 0.2 + 0.6 * _unit(*key, "c"))

    def _session(self) -> SessionItem:
        """The current session's item; an error outside a session (a judge, a direct call)."""
        current = current_session_item()
        if current is None:
            raise ValueError(
                f"mock behaviour '{self.behaviour}' answers from the session's item, and this call belongs to "
                "no session (it works as a run's [model], not as a judge or outside a run)"
            )
        return current

    def _scripted(self, prompt: str, number: int) -> AIMessage:
        """Behaviour ``scripted``: the item's response (a table), or the next one of the list."""
        if isinstance(self.responses, list):
            text = self.responses[(number - 1) % len(self.responses)]
            return self._reply(text, _unit(self.seed, prompt, number) * 0.5 + 0.5)
        current = self._session()
        if current.item_id not in self.responses:
            raise ValueError(
                f"mock behaviour 'scripted' has no response for item '{current.item_id}' "
                f"(its responses table holds {len(self.responses)} ids)"
            )
        text = self.responses[current.item_id]
        return self._reply(text, _unit(self.seed, current.item_id, "scripted") * 0.5 + 0.5)

    def _agent(self, messages: list[BaseMessage], number: int) -> AIMessage:
        """Behaviour ``agent``: the item's next scripted step (module doc)."""
        current = self._session()
        script = self.steps.get(current.item_id)
        if script is None:
            return self._reply(GIVE_UP_TOKEN, 0.05)
        made = sum(isinstance(m, AIMessage) for m in messages)  # model calls so far in this session
        step = script[made] if made < len(script) else "done"
        if isinstance(step, str):
            return self._reply(step, 0.9)
        name = str(step.get("tool", ""))
        args = step.get("args", {})
        call_id = f"call_{made + 1}_{hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:8]}"
        message = AIMessage(content="", tool_calls=[{"name": name, "args": dict(args), "id": call_id}])
        return self._with_metadata(message, 0.9, finish="tool_calls")

    def _oracle(self) -> AIMessage:
        """Behaviour ``oracle``: the item's field, right on a seeded share of the items."""
        current = self._session()
        assert self.field is not None  # the validator requires it
        try:
            value = item_field(current.item, self.field)
        except KeyError:
            raise ValueError(f"mock behaviour 'oracle': the item has no field '{self.field}'") from None
        seed = self._seed()
        right = is_right(seed, current.item_id, current.run_index, self._accuracy(), sampling=self.sampling)
        key = (seed, "oracle", current.item_id, current.run_index if self.sampling else "")
        if not right:
            if self.wrong is not None:
                value = self.wrong
            else:
                try:
                    choices = item_field(current.item, self.choices) if self.choices else None
                except KeyError:
                    raise ValueError(f"mock behaviour 'oracle': the item has no field '{self.choices}'") from None
                if choices is not None and not isinstance(choices, (list, tuple)):
                    raise ValueError(f"mock behaviour 'oracle': the field '{self.choices}' holds no list of choices")
                value = wrong_value(value, key, choices)
        text = render_answer(self.template, current.item, format_answer(value))
        confidence = 0.85 + 0.14 * _unit(*key, "c") if right else 0.2 + 0.6 * _unit(*key, "c")
        return self._reply(text, confidence)

    def _grade(self, prompt: str) -> str:
        """Behaviours ``grader`` and ``obedient``: the reference's words found in the solution, as a grade."""
        if self.behaviour == "obedient" and _OBEYED.search(prompt):
            return "GRADE: PASS"
        solution, rest = _bounded(prompt)
        solution = _tagged(rest, "solution") if solution is None else solution
        reference = _tagged(rest, "reference")
        if solution is None or reference is None:
            return "I need <solution>...</solution> and <reference>...</reference> in the prompt to grade."
        wanted = set(_WORD.findall(reference.lower()))
        found = set(_WORD.findall(solution.lower()))
        share = len(wanted & found) / len(wanted) if wanted else 1.0
        wrong = share > 0 and _unit(self.seed, solution, reference, "grader") >= self._accuracy()
        if self.scale is None:
            passed = (share == 1.0) != wrong
            return f"GRADE: {'PASS' if passed else 'FAIL'}"
        grade = round(share * self.scale)
        if wrong:
            grade = grade - 1 if grade > 0 else grade + 1
        return f"GRADE: {grade}"

    def _seed(self) -> int:
        if self.seed_file is None:
            return self.seed
        with open(self.seed_file, encoding="utf-8") as handle:
            return int(handle.read().strip())

    def _accuracy(self) -> float:
        if self.accuracy_file is None:
            return self.accuracy
        with open(self.accuracy_file, encoding="utf-8") as handle:
            value = float(handle.read().strip())
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{self.accuracy_file}: accuracy {value} is not within [0, 1]")
        return value

    def _reply(self, text: str, confidence: float) -> AIMessage:
        return self._with_metadata(AIMessage(content=text), confidence, finish="stop")

    def _with_metadata(self, message: AIMessage, confidence: float, *, finish: str) -> AIMessage:
        confidence = min(max(confidence, 0.0), 1.0)
        metadata: dict[str, Any] = {
            "confidence": confidence,
            "model_name": self.model_key,
            "finish_reason": finish,
        }
        if self.logprobs:
            tokens = _text_of(message).split() or [""]
            each = math.log(max(confidence, 1e-12)) / len(tokens)
            metadata["logprobs"] = {
                "content": [
                    {
                        "token": token,
                        "logprob": each,
                        "bytes": list(token.encode()),
                        "top_logprobs": [{"token": token, "logprob": each, "bytes": list(token.encode())}],
                    }
                    for token in tokens
                ]
            }
        message.response_metadata = metadata
        return message
