"""The solve and adapt stages: one solver session per attempt at one item.

Solve (:func:`run_solver`): the rendered prompt becomes the first human message (after an
optional system message); the model is called with the tools bound, the tool calls it
makes are executed and their results fed back, until it answers without tool calls or
``max_steps`` model calls were made. Then the force-finish prompt asks for a final answer,
which is treated like any other. An answer containing ``I_GIVE_UP`` ends the session as
GAVE_UP. A final answer whose generation stopped at the token limit (the provider's
``finish_reason``/``stop_reason``, :mod:`ape.tasks.solving.stops`) ends the session as
TRUNCATED, unparsed: a cut answer is not the model's finished answer.

Reasoning: every reply is split into its reasoning and its answer
(:mod:`ape.tasks.solving.reasoning`, with the model's ``reasoning_tags``) where it becomes the
answer, so the adapter, the reformat prompt, the checker and a judge see the answer alone;
the transcript keeps each reply's reasoning under ``data.reasoning``. A reply that ended
inside its reasoning (a block never closed, or the token limit with no answer begun) ends
the session TRUNCATED with ``reasoning_cut`` set, apart from an answer cut after it.

Adapt (:func:`run_adaption`): the adapter gets ``solution_adaption_attempts`` attempts: the
first on the answer, then one after each reformat prompt, sent to the same model in the
same conversation. If all fail, the session ends PARSING_FAILED; a reformatted answer cut
at the token limit ends it TRUNCATED.

Model, tool and parse failures never raise: they become outcomes (ERROR, a tool error
message to the model, PARSING_FAILED) recorded in the transcript. The two stages exchange a
:class:`ape.schemas.transcript.SolverState`, so they can run as separate cached Prefect tasks.

Confidence: a model may report ``response_metadata["confidence"]`` (the built-in mock models
do). Otherwise it comes from OpenAI-style token log-probabilities
(``response_metadata["logprobs"]["content"]``, a list of ``{"token", "logprob"}``):
``token_nll = -sum(logprob)``, ``token_count`` = number of tokens and
``confidence = exp(-token_nll / token_count)``, the geometric mean probability of the
answer's tokens. All three describe the final answer message. Token usage
(``AIMessage.usage_metadata``) is summed over all the session's model calls, the reasoning
tokens (``output_token_details.reasoning``) too.

Models are LangChain chat models (any ``Runnable`` taking messages). A
``ModelAdapter`` runs the same dialogue as an :class:`ape.tasks.models.adapter_chat.AdapterChatModel`
(:func:`build_model` wraps it so; a raw adapter given here is wrapped on the spot): each call
is one ``generate(prompt, item)`` without tools, and the session's item reaches it as the
``item`` call option, which only adapter-backed models are given. An adapter's
``Generation`` reports ``confidence``, ``token_nll`` and ``token_count`` in the reply's
``response_metadata``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic_core import to_jsonable_python

from ape.schemas.config import GIVE_UP_TOKEN, SolverConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import ErrorInfo, Outcome
from ape.schemas.transcript import EntryKind, SolveRecord, SolverState, TranscriptEntry
from ape.tasks.common.deadline import PluginTimeout, call_with_timeout
from ape.tasks.models.adapter_chat import AdapterChatModel, is_model_adapter, takes_item
from ape.tasks.solving.reasoning import DEFAULT_TAGS, ReplyParts, cut_while_reasoning, split_reply
from ape.tasks.solving.stops import InfrastructureError, SessionLimit, is_cut, stop_reason

NOT_EXECUTED = "Not executed: no more tool calls now. Reply with your final answer as text."


def build_messages(prompt: str, system: str | None) -> list[BaseMessage]:
    """The opening of every chat session: an optional system message, then the prompt."""
    messages: list[BaseMessage] = []
    if system:
        messages.append(SystemMessage(content=system))
    messages.append(HumanMessage(content=prompt))
    return messages


def as_chat_model(model: Any) -> Runnable[Any, Any]:
    """LangChain chat models (also wrapped ones: with_retry, bind) as they are; a
    ModelAdapter wrapped in an :class:`AdapterChatModel`."""
    if isinstance(model, (BaseChatModel, Runnable)):
        return model
    if is_model_adapter(model):
        return AdapterChatModel(adapter=model)
    raise TypeError(f"{type(model).__name__} is neither a LangChain chat model nor a ModelAdapter")


def bind_tools(model: Any, tools: Sequence[BaseTool]) -> Any:
    """Bind tools only when there are some, so models without tool support still work."""
    if not tools:
        return model
    try:
        return model.bind_tools(list(tools))
    except (NotImplementedError, AttributeError) as exc:
        wrapped = ""
        if not isinstance(model, BaseChatModel):
            wrapped = (
                "; a wrapped runnable (with_retry, with_fallbacks) cannot bind tools, "
                "so bind them to the chat model before wrapping it"
            )
        raise ApeError(
            f"the model {type(model).__name__} does not support tool calling (bind_tools); "
            f"remove the [tools] sections and [checker] expose_as_tool, or use a model that "
            f"supports tools ({type(exc).__name__}: {exc}){wrapped}",
            where="[tools]",
        ) from None


def answer_stats(message: AIMessage) -> tuple[float | None, float | None, int | None]:
    """(confidence, token_nll, token_count) of one model response, where reported."""
    meta = message.response_metadata or {}
    token_nll: float | None = None
    token_count: int | None = None
    logprobs = meta.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else logprobs
    if isinstance(content, list):
        values = [
            float(tok["logprob"])
            for tok in content
            if isinstance(tok, dict) and isinstance(tok.get("logprob"), (int, float))
        ]
        if values:
            token_nll = -sum(values)
            token_count = len(values)
    if token_nll is None:  # reported directly (a ModelAdapter's Generation)
        nll, count = meta.get("token_nll"), meta.get("token_count")
        if isinstance(nll, (int, float)) and not isinstance(nll, bool):
            token_nll = float(nll)
        if isinstance(count, int) and not isinstance(count, bool):
            token_count = count
    reported = meta.get("confidence")
    if isinstance(reported, (int, float)) and not isinstance(reported, bool):
        confidence: float | None = min(1.0, max(0.0, float(reported)))
    elif token_nll is not None and token_count:
        confidence = math.exp(-token_nll / token_count)
    else:
        confidence = None
    return confidence, token_nll, token_count


def message_text(message: BaseMessage) -> str:
    """Text of a message whether its content is a string or a list of content blocks."""
    return str(message.text)


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class _Recorder:
    """The transcript of one session, timed from the session start (``offset`` carries the
    solve stage's time into the adapt stage)."""

    def __init__(self, offset: float = 0.0, entries: list[TranscriptEntry] | None = None):
        self.offset = offset
        self.start = time.perf_counter()
        self.entries = list(entries or [])

    def now(self) -> float:
        return self.offset + (time.perf_counter() - self.start)

    def add(
        self,
        kind: EntryKind,
        content: str | None = None,
        *,
        name: str | None = None,
        data: dict[str, Any] | None = None,
        error: ErrorInfo | None = None,
    ) -> None:
        self.entries.append(
            TranscriptEntry(
                kind=kind,
                t=self.now(),
                content=content,
                name=name,
                data=_jsonable(data or {}),
                error=error,
            )
        )


class _Stats:
    """Counters shared by both stages: model calls, token usage, the last answer's confidence."""

    def __init__(self, state: SolverState | None = None):
        self.steps = state.steps if state else 0
        self.input_tokens = state.input_tokens if state else None
        self.output_tokens = state.output_tokens if state else None
        self.confidence = state.confidence if state else None
        self.token_nll = state.token_nll if state else None
        self.token_count = state.token_count if state else None
        self.stop_reason = state.stop_reason if state else None  # of the last answer
        self.reasoning_tokens = state.reasoning_tokens if state else None
        self.reasoning_cut = state.reasoning_cut if state else False  # of the last answer

    def add_usage(self, usage: dict[str, Any] | None) -> None:
        if not usage:
            return
        self.input_tokens = (self.input_tokens or 0) + int(usage.get("input_tokens") or 0)
        self.output_tokens = (self.output_tokens or 0) + int(usage.get("output_tokens") or 0)
        reasoning = reasoning_tokens(usage)
        if reasoning is not None:
            self.reasoning_tokens = (self.reasoning_tokens or 0) + reasoning

    def cut(self) -> bool:
        """Whether the last answer was cut: at the token limit, or inside its reasoning."""
        return is_cut(self.stop_reason) or self.reasoning_cut

    def fields(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "confidence": self.confidence,
            "token_nll": self.token_nll,
            "token_count": self.token_count,
            "stop_reason": self.stop_reason,
            "reasoning_tokens": self.reasoning_tokens,
            "reasoning_cut": self.reasoning_cut,
        }


class _ChatDialogue:
    """A conversation with a chat model and its tools.

    ``item`` is the session's item; a model that answers through a ModelAdapter gets it
    with every call (as the ``item`` call option), other models never see it.
    """

    def __init__(
        self,
        model: Any,
        tools: Sequence[BaseTool],
        messages: list[BaseMessage],
        recorder: _Recorder,
        stats: _Stats,
        tool_timeout_s: float | None = None,
        item: Any = None,
    ):
        self.model = as_chat_model(model)
        self.item = item
        self.tool_timeout_s = tool_timeout_s
        self.tools = list(tools)
        self.by_name = {tool.name: tool for tool in self.tools}
        self.messages = messages
        self.rec = recorder
        self.stats = stats
        self._bound: Any = None
        # the model's reasoning tags ([model] reasoning_tags, kept by the managed model)
        self.tags = tuple(getattr(self.model, "reasoning_tags", None) or DEFAULT_TAGS)
        self.parts = ReplyParts(None, "")  # the last reply, split into reasoning and answer

    def call(self) -> AIMessage:
        """One model call; records the response, or MODEL_ERROR and re-raises."""
        step = self.stats.steps + 1
        try:
            if self._bound is None:
                bound = bind_tools(self.model, self.tools)
                self._bound = bound.bind(item=self.item) if takes_item(self.model) else bound
            reply = self._bound.invoke(self.messages)
        except Exception as exc:
            self.stats.steps = step
            self.rec.add(EntryKind.MODEL_ERROR, data={"step": step}, error=ErrorInfo.from_exception(exc))
            raise
        self.stats.steps = step
        if isinstance(reply, str):
            reply = AIMessage(content=reply)
        if not isinstance(reply, AIMessage):
            self.rec.add(
                EntryKind.MODEL_ERROR,
                data={"step": step},
                error=ErrorInfo(type="TypeError", message=f"the model returned {type(reply).__name__}"),
            )
            raise TypeError(f"the model returned {type(reply).__name__}, expected an AIMessage")
        for index, call in enumerate([*reply.tool_calls, *reply.invalid_tool_calls]):
            if not call.get("id"):  # some servers omit ids; results must refer to their call
                call["id"] = f"call_{step}_{index}"
        self.messages.append(reply)
        self.stats.add_usage(reply.usage_metadata)  # type: ignore[arg-type]
        confidence, nll, count = answer_stats(reply)
        self.stats.confidence, self.stats.token_nll, self.stats.token_count = confidence, nll, count
        self.stats.stop_reason = reason = stop_reason(reply.response_metadata)
        self.parts = parts = split_reply(reply, self.tags)
        self.stats.reasoning_cut = cut_while_reasoning(parts, is_cut(reason))
        data: dict[str, Any] = {"step": step}
        calls = [*reply.tool_calls, *reply.invalid_tool_calls]
        if calls:
            data["tool_calls"] = [{"name": c.get("name"), "id": c.get("id")} for c in calls]
        if reply.usage_metadata:
            data["usage"] = {
                "input_tokens": reply.usage_metadata.get("input_tokens"),
                "output_tokens": reply.usage_metadata.get("output_tokens"),
            }
            spent = reasoning_tokens(reply.usage_metadata)  # type: ignore[arg-type]
            if spent is not None:
                data["usage"]["reasoning_tokens"] = spent
        if parts.reasoning is not None:  # kept apart from the answer: never parsed, checked or judged
            data["reasoning"] = parts.reasoning
        if self.stats.reasoning_cut:
            data["reasoning_cut"] = True
        known = (("confidence", confidence), ("token_nll", nll), ("token_count", count), ("stop_reason", reason))
        for key, value in known:
            if value is not None:
                data[key] = value
        self.rec.add(EntryKind.MODEL_RESPONSE, parts.answer, data=data)
        return reply

    def say(self, text: str, kind: EntryKind) -> None:
        self.messages.append(HumanMessage(content=text))
        self.rec.add(kind, text)

    def reply(self, text: str, kind: EntryKind) -> str:
        """Send a follow-up prompt and return the answer text (tool calls are declined)."""
        self.say(text, kind)
        answer = self.call()
        self.decline_tools(answer)
        return self.parts.answer

    def execute_tools(self, reply: AIMessage) -> None:
        """Run every tool call of a reply; failures go back to the model as error messages."""
        for index, call in enumerate(reply.tool_calls):
            call_id = call.get("id") or f"call_{self.stats.steps}_{index}"
            name = call["name"]
            self.rec.add(EntryKind.TOOL_CALL, name=name, data={"id": call_id, "args": call["args"]})
            tool = self.by_name.get(name)
            if tool is None:
                available = ", ".join(self.by_name) or "none"
                self._tool_error(
                    call_id,
                    name,
                    ErrorInfo(type="UnknownTool", message=f"there is no tool named '{name}'"),
                    f"Error: there is no tool named '{name}'. Available tools: {available}.",
                )
                continue
            try:
                output = call_with_timeout(
                    tool.invoke,
                    {**call, "id": call_id, "type": "tool_call"},
                    limit_s=self.tool_timeout_s,
                    label=f"tool '{name}'",
                    key="[solver] tool_timeout_s",
                )
            except (PluginTimeout, InfrastructureError) as exc:  # a hung tool or a broken sandbox ends the session
                self.rec.add(EntryKind.TOOL_ERROR, name=name, data={"id": call_id}, error=ErrorInfo.from_exception(exc))
                raise
            except SessionLimit as exc:  # the session ends at a limit, with its reason
                self.messages.append(
                    ToolMessage(content=f"Stopped: {exc}", tool_call_id=call_id, name=name, status="error")
                )
                info = ErrorInfo.from_exception(exc)
                self.rec.add(EntryKind.TOOL_ERROR, str(exc), name=name, data={"id": call_id}, error=info)
                raise
            except Exception as exc:
                info = ErrorInfo.from_exception(exc)
                self._tool_error(call_id, name, info, f"Error: {info.type}: {info.message}")
                continue
            content = output.content if isinstance(output, ToolMessage) else str(output)
            text = content if isinstance(content, str) else str(_jsonable(content))
            if isinstance(output, ToolMessage) and output.status == "error":
                self._tool_error(call_id, name, ErrorInfo(type="ToolError", message=text), content)
                continue
            self.messages.append(ToolMessage(content=content, tool_call_id=call_id, name=name))
            self.rec.add(EntryKind.TOOL_RESULT, text, name=name, data={"id": call_id})
        for index, bad in enumerate(reply.invalid_tool_calls):
            call_id = bad.get("id") or f"invalid_{self.stats.steps}_{index}"
            name = bad.get("name") or "unknown"
            self.rec.add(EntryKind.TOOL_CALL, name=name, data={"id": call_id, "args": bad.get("args")})
            message = f"the arguments are not valid: {bad.get('error') or 'could not be parsed'}"
            self._tool_error(
                call_id,
                name,
                ErrorInfo(type="InvalidToolCall", message=message),
                f"Error: {message}",
            )

    def decline_tools(self, reply: AIMessage) -> None:
        """Answer tool calls made when a final answer was asked for, without running them,
        so the conversation stays valid for providers that require a result per call."""
        calls = [*reply.tool_calls, *reply.invalid_tool_calls]
        for index, call in enumerate(calls):
            call_id = call.get("id") or f"call_{self.stats.steps}_{index}"
            name = call.get("name") or "unknown"
            self.rec.add(EntryKind.TOOL_CALL, name=name, data={"id": call_id, "args": call.get("args")})
            self._tool_error(
                call_id,
                name,
                ErrorInfo(type="ToolCallRefused", message="tool call after the final-answer request"),
                NOT_EXECUTED,
            )

    def _tool_error(self, call_id: str, name: str, info: ErrorInfo, content: Any) -> None:
        text = content if isinstance(content, str) else str(_jsonable(content))
        self.messages.append(ToolMessage(content=content, tool_call_id=call_id, name=name, status="error"))
        self.rec.add(EntryKind.TOOL_ERROR, text, name=name, data={"id": call_id}, error=info)


TOKEN_LIMIT = "token_limit"


def reasoning_tokens(usage: dict[str, Any] | None) -> int | None:
    """The reasoning tokens of one call's usage (LangChain's ``usage_metadata``:
    ``output_token_details.reasoning``, from OpenAI's
    ``completion_tokens_details.reasoning_tokens``), None when unreported. They are part of
    ``output_tokens`` already, so cost counts them once, as output."""
    details = (usage or {}).get("output_token_details") or {}
    value = details.get("reasoning") if isinstance(details, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _cut_data(stats: _Stats) -> dict[str, Any]:
    """The TRUNCATED entry's data: the stop reason, and whether the cut fell in the reasoning."""
    return {"stop_reason": stats.stop_reason, **({"reasoning_cut": True} if stats.reasoning_cut else {})}


def _over_budget(stats: _Stats, settings: SolverConfig) -> bool:
    """Whether the session's tokens so far reach ``[solver] max_session_tokens`` (checked before
    each model call: the call that crosses it cannot be undone, the next one is not made)."""
    cap = settings.max_session_tokens
    if cap is None or stats.steps == 0:
        return False
    return (stats.input_tokens or 0) + (stats.output_tokens or 0) >= cap


def run_solver(
    model: Any,
    prompt: str,
    system: str | None,
    *,
    tools: Sequence[BaseTool] = (),
    settings: SolverConfig,
    item: Any = None,
) -> SolverState:
    """The solve stage: call the model (and its tools) until it gives an answer."""
    rec = _Recorder()
    stats = _Stats()
    if system:
        rec.add(EntryKind.SYSTEM, system)
    rec.add(EntryKind.PROMPT, prompt)
    error: ErrorInfo | None = None
    answer: str | None = None
    forced = False
    end_reason: str | None = None
    chat = _ChatDialogue(model, tools, build_messages(prompt, system), rec, stats, settings.tool_timeout_s, item)
    try:
        while True:
            if _over_budget(stats, settings):  # no further model call: the session ends at its token limit
                end_reason = TOKEN_LIMIT
                used = (stats.input_tokens or 0) + (stats.output_tokens or 0)
                cap = settings.max_session_tokens
                message = f"the session used {used} tokens, its limit ([solver] max_session_tokens) is {cap}"
                rec.add(EntryKind.LIMIT, message, data={"reason": end_reason, "step": stats.steps, "tokens": used})
                answer = ""
                break
            reply = chat.call()
            if not (reply.tool_calls or reply.invalid_tool_calls):
                answer = chat.parts.answer
                break
            try:
                chat.execute_tools(reply)
            except SessionLimit as exc:  # no more tool calls: the session ends at its limit
                end_reason = exc.reason
                rec.add(EntryKind.LIMIT, str(exc), data={"reason": end_reason, "step": stats.steps})
                answer = ""
                break
            if stats.steps >= settings.max_steps and not _over_budget(stats, settings):
                forced = True
                end_reason = "step_limit"
                rec.add(EntryKind.LIMIT, data={"reason": end_reason, "step": stats.steps})
                answer = chat.reply(settings.force_finish_prompt, EntryKind.FORCE_FINISH)
                break
    except Exception as exc:
        error = ErrorInfo.from_exception(exc)
    gave_up = error is None and answer is not None and GIVE_UP_TOKEN in answer
    if gave_up:
        rec.add(EntryKind.GAVE_UP, answer)
    elif error is None and answer is not None and stats.cut():
        rec.add(EntryKind.TRUNCATED, answer, data=_cut_data(stats))
    return SolverState(
        prompt=prompt,
        system=system,
        messages=_jsonable(messages_to_dict(chat.messages)),
        answer=answer,
        gave_up=gave_up,
        forced=forced,
        error=error,
        end_reason=end_reason,
        elapsed_s=rec.now(),
        transcript=rec.entries,
        **stats.fields(),
    )


def run_adaption(
    model: Any,
    state: SolverState,
    *,
    adapter: Callable[[str], Any],
    settings: SolverConfig,
    tools: Sequence[BaseTool] = (),
    item: Any = None,
) -> SolveRecord:
    """The adapt stage: parse the answer, asking the model to reformat after each failure.

    ``tools`` must be the tools the solve stage bound (the conversation may refer to them);
    ``item`` is passed to a ModelAdapter's ``generate`` on a reformat attempt.
    """
    rec = _Recorder(offset=state.elapsed_s, entries=state.transcript)
    stats = _Stats(state)

    def record(
        outcome: Outcome, answer: str | None, error: ErrorInfo | None = None, solution: Any = None
    ) -> SolveRecord:
        return SolveRecord(
            outcome=outcome,
            solution=solution,
            raw_output=answer,
            error=error,
            latency_s=rec.now(),
            end_reason=state.end_reason,
            state_check=state.state_check,
            sandbox=state.sandbox,
            transcript=rec.entries,
            **stats.fields(),
        )

    if state.error is not None:
        return record(Outcome.ERROR, state.answer, state.error)
    if state.gave_up:
        return record(Outcome.GAVE_UP, state.answer)
    if is_cut(state.stop_reason) or state.reasoning_cut:  # cut: a prefix, not an answer to parse
        return record(Outcome.TRUNCATED, state.answer)

    dialogue = _ChatDialogue(
        model, tools, messages_from_dict(state.messages), rec, stats, settings.tool_timeout_s, item
    )

    answer = state.answer or ""
    # past the token limit no reformat prompt is sent: each would be one more model call
    attempts = 1 if state.end_reason == TOKEN_LIMIT else settings.solution_adaption_attempts
    last_error = ErrorInfo(type="ValueError", message="no parse attempt was made")
    for attempt in range(1, attempts + 1):
        rec.add(EntryKind.PARSE_ATTEMPT, answer, data={"attempt": attempt, "of": attempts})
        try:
            value = adapter(answer)
        except PluginTimeout as exc:  # a hung adapter ends the session, not a parse failure
            return record(Outcome.ERROR, answer, ErrorInfo.from_exception(exc))
        except Exception as exc:
            last_error = ErrorInfo.from_exception(exc)
            rec.add(EntryKind.PARSE_FAILED, data={"attempt": attempt}, error=last_error)
            if attempt == attempts:
                break
            prompt = settings.reformat_prompt.replace("{error}", _error_text(exc))
            try:
                answer = dialogue.reply(prompt, EntryKind.REFORMAT_PROMPT)
            except Exception as model_exc:
                return record(Outcome.ERROR, answer, ErrorInfo.from_exception(model_exc))
            if GIVE_UP_TOKEN in answer:
                rec.add(EntryKind.GAVE_UP, answer)
                return record(Outcome.GAVE_UP, answer)
            if stats.cut():
                rec.add(EntryKind.TRUNCATED, answer, data=_cut_data(stats))
                return record(Outcome.TRUNCATED, answer)
            continue
        solution = _jsonable(value)
        rec.add(EntryKind.PARSED, data={"attempt": attempt, "solution": solution})
        return record(Outcome.SOLVED, answer, solution=solution).keep_value(value)
    return record(Outcome.PARSING_FAILED, answer, last_error)


def revalued(record: SolveRecord, adapter: Callable[[str], Any]) -> SolveRecord:
    """A cached record with the adapter's own object again, for the checker.

    The cache keeps records as JSON (never a pickle: :mod:`ape.tasks.storage.cache_format`),
    which keeps the solution's JSON form but not the object the adapter returned (a pydantic
    model, say), so a checker written for that object would grade a cached session
    differently. The adapter parses the answer it parsed before; its object is kept only when
    its JSON form is the recorded solution (else the record keeps its JSON form, as before).
    """
    if record.has_value or record.outcome is not Outcome.SOLVED or record.raw_output is None:
        return record
    try:
        value = adapter(record.raw_output)
    except Exception:
        return record
    if _jsonable(value) == record.solution:
        record.keep_value(value)
    return record


def solve_session(
    model: Any,
    prompt: str,
    system: str | None,
    *,
    tools: Sequence[BaseTool] = (),
    adapter: Callable[[str], Any],
    settings: SolverConfig,
    item: Any = None,
) -> SolveRecord:
    """One whole session (solve, then adapt) in one call; failures become outcomes."""
    state = run_solver(model, prompt, system, tools=tools, settings=settings, item=item)
    return run_adaption(model, state, adapter=adapter, settings=settings, tools=tools, item=item)
