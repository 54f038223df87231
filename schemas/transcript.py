"""Session transcripts and the records that travel between the solve, adapt and check stages.

A *session* is one attempt at one item. While it runs, the solver appends
:class:`TranscriptEntry` objects (prompts, model responses, tool calls, parse
attempts, failures); when it closes, :class:`ape.tasks.storage.transcripts.SessionLog`
appends a ``CHECK`` and a ``SESSION_END`` entry and writes the session to two
files in the output folder:

``sessions.log``
    Readable text, one block per session, blocks never interleaved.

``sessions.jsonl``
    JSON Lines, one line per session, each line a :class:`SessionTranscript`::

        {
          "item_id": "q7",            # the DataModel id
          "run_index": 0,             # 0 .. runs_per_data - 1
          "model_id": "mock/rule",
          "outcome": "SOLVED",        # SOLVED | PARSING_FAILED | GAVE_UP | TRUNCATED | ERROR
          "score": 1.0,               # from the checker / metric, 0.0 without a solution
          "correct": true,
          "check_status": "PASSED",   # PASSED | FAILED | ERROR | null (nothing was checked)
          "solution": 42,             # the parsed solution, JSON-encoded
          "error": null,              # {"type", "message"} of the session, if any
          "confidence": 0.93,         # null when the model reports none
          "steps": 3,                 # model calls made
          "input_tokens": 120,        # summed over the session's calls, null if unreported
          "output_tokens": 18,         # reasoning tokens included
          "reasoning_tokens": 6,      # null when the provider reports none
          "reasoning_cut": false,     # TRUNCATED inside the reasoning (no answer begun)
          "latency_s": 1.42,          # wall time of solve + adapt
          "stop_reason": "stop",      # why the final answer stopped (finish_reason / stop_reason)
          "written_at": "2025-01-01T12:00:00+00:00",
          "entries": [                # TranscriptEntry objects, in order
            {"kind": "PROMPT", "t": 0.0, "content": "What is 6*7?", "name": null,
             "data": {}, "error": null},
            {"kind": "MODEL_RESPONSE", "t": 0.41, "content": "",
             "data": {"step": 1, "tool_calls": [{"name": "calculator", "id": "c1"}],
                      "usage": {"input_tokens": 40, "output_tokens": 6}}, ...},
            {"kind": "TOOL_CALL", "t": 0.41, "name": "calculator",
             "data": {"id": "c1", "args": {"expression": "6*7"}}, ...},
            {"kind": "TOOL_RESULT", "t": 0.42, "name": "calculator", "content": "42", ...},
            ...,
            {"kind": "SESSION_END", "t": 1.43, "content": "SOLVED", "data": {...}, ...}
          ]
        }

Entry kinds and what they carry (``t`` is always seconds since the session started):

=================  ============================================================================
SYSTEM             ``content``: the system prompt.
PROMPT             ``content``: the rendered prompt (the first human message).
MODEL_RESPONSE     ``content``: the answer text (the reasoning split off,
                   :mod:`ape.tasks.solving.reasoning`); ``data``: ``step``, ``tool_calls`` (name,
                   id), ``reasoning`` (the reply's reasoning, when it showed any),
                   ``reasoning_cut`` (true: it ended inside its reasoning), ``usage``
                   (input/output/reasoning tokens when reported), ``confidence``, ``token_nll``,
                   ``token_count`` when known, ``stop_reason`` (the provider's finish_reason /
                   stop_reason, e.g. "stop", "length", "end_turn", "max_tokens") when reported.
MODEL_ERROR        ``error``: the exception the model call raised; ``data.step``.
TOOL_CALL          ``name``: the tool; ``data``: ``id`` and ``args``.
TOOL_RESULT        ``name``, ``content``: what the tool returned (as sent to the model).
TOOL_ERROR         ``name``, ``content``: the error text sent to the model; ``error``.
FORCE_FINISH       ``content``: the force-finish prompt, sent after ``max_steps`` model calls.
PARSE_ATTEMPT      ``content``: the text given to the adapter; ``data``: ``attempt``, ``of``.
PARSED             ``data.solution``: what the adapter returned (JSON-encoded).
PARSE_FAILED       ``error``: why the adapter rejected the text; ``data.attempt``.
REFORMAT_PROMPT    ``content``: the reformat prompt sent after a failed parse.
GAVE_UP            ``content``: the answer that contained the give-up token.
TRUNCATED          ``content``: the final answer, cut at the token limit (not parsed);
                   ``data.stop_reason``: what the provider said ("length", "max_tokens");
                   ``data.reasoning_cut``: true when the budget ran out inside the reasoning.
CHOICE             A log-likelihood session ([choices]): one entry per choice, ``content``: its
                   continuation; ``data``: ``index``, ``label``, ``loglikelihood`` (summed over
                   its tokens), ``token_count``, ``chars`` (what acc_norm divides by),
                   ``greedy`` (every token the most likely one, when the model says).
CHECK              ``content``: PASSED / FAILED / ERROR; ``data``: ``score``, ``runtime_s``,
                   ``metadata``; ``error`` when the checker raised.
NETWORK            An agent session with ``[sandbox] allow_hosts``, after its commands:
                   ``data``: ``allowed``, ``refused`` (connections), ``bytes`` (both ways), and
                   ``connections``, each ``method``, ``host``, ``port``, ``allowed``,
                   ``address``, ``reason`` (refused), ``bytes_out``, ``bytes_in``, ``t``
                   (seconds since the proxy started); ``not_listed`` past 500 connections.
SESSION_END        ``content``: the outcome; ``data``: ``score``, ``correct``, ``steps``,
                   ``latency_s``, token counts; ``error``: the session error, if any.
=================  ============================================================================

:class:`SolverState` and :class:`SolveRecord` are plain data (JSON-serialisable and
picklable) so the solve and adapt stages can run as separate, cached Prefect tasks; the
cache keeps them as JSON (:mod:`ape.tasks.storage.cache_format`).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome, SessionResult


class EntryKind(str, Enum):
    """What one transcript entry records (see the table in the module docstring)."""

    SYSTEM = "SYSTEM"
    PROMPT = "PROMPT"
    MODEL_RESPONSE = "MODEL_RESPONSE"
    MODEL_ERROR = "MODEL_ERROR"
    TOOL_CALL = "TOOL_CALL"
    TOOL_RESULT = "TOOL_RESULT"
    TOOL_ERROR = "TOOL_ERROR"
    FORCE_FINISH = "FORCE_FINISH"
    PARSE_ATTEMPT = "PARSE_ATTEMPT"
    PARSED = "PARSED"
    PARSE_FAILED = "PARSE_FAILED"
    REFORMAT_PROMPT = "REFORMAT_PROMPT"
    GAVE_UP = "GAVE_UP"
    TRUNCATED = "TRUNCATED"
    CHOICE = "CHOICE"
    CHECK = "CHECK"
    SESSION_END = "SESSION_END"
    # the session's tool loop ended at a limit (data.reason: step_limit, token_limit, sandbox_time_limit)
    LIMIT = "LIMIT"
    STATE_CHECK = "STATE_CHECK"  # the sandbox_state grade of the folder the session left (data: exit code)
    NETWORK = "NETWORK"  # [sandbox] allow_hosts: the session's connections through its proxy (data)


class TranscriptEntry(BaseModel):
    """One event of a session, timed from the session start."""

    model_config = ConfigDict(extra="forbid")

    kind: EntryKind
    t: float = Field(ge=0.0, description="Seconds since the session started.")
    content: str | None = None
    name: str | None = Field(default=None, description="Tool name, for tool entries.")
    data: dict[str, Any] = Field(default_factory=dict)
    error: ErrorInfo | None = None


class SolverState(BaseModel):
    """A session after the solve stage: the conversation so far and the last answer.

    ``messages`` holds LangChain messages as dicts (``messages_to_dict``), so the
    adapt stage can continue the same conversation with reformat prompts, even in
    another process.
    """

    model_config = ConfigDict(extra="forbid")

    prompt: str
    system: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    answer: str | None = None
    gave_up: bool = False
    forced: bool = Field(default=False, description="True when the force-finish prompt was sent.")
    stop_reason: str | None = Field(default=None, description="Why the last answer's generation stopped.")
    error: ErrorInfo | None = None
    steps: int = 0
    confidence: float | None = None
    token_nll: float | None = None
    token_count: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = Field(
        default=None, description="Reasoning tokens (part of output_tokens) summed over calls; None: unreported."
    )
    reasoning_cut: bool = Field(
        default=False, description="The last answer ended inside its reasoning (no answer begun): TRUNCATED."
    )
    elapsed_s: float = 0.0
    end_reason: str | None = Field(
        default=None,
        description="Why the tool loop ended early: 'step_limit', 'token_limit', 'sandbox_time_limit'; "
        "None: it answered.",
    )
    state_check: CheckResult | None = Field(
        default=None, description="The sandbox_state grade, made before the session's sandbox was removed."
    )
    sandbox: dict[str, float] | None = Field(
        default=None,
        description="Seconds of the session's sandbox: start_s, commands_s, grade_s, teardown_s; and "
        "killed_memory, killed_cpu, killed_file_size: how many of its commands a limit killed (absent: none); "
        "with allow_hosts, net_allowed, net_refused (connections) and net_bytes.",
    )
    transcript: list[TranscriptEntry] = Field(default_factory=list)


class SolveRecord(BaseModel):
    """A session after solve and adapt: the outcome, the parsed solution and the transcript.

    ``solution`` is JSON-encoded (pydantic solutions through ``model_dump(mode="json")``)
    so the record can be cached and saved. The adapter's original object is kept on
    the side as :attr:`value` for the checker; it survives pickling but not a JSON
    round trip, where :attr:`value` falls back to the JSON form.
    """

    model_config = ConfigDict(extra="forbid")

    outcome: Outcome
    solution: Any = None
    raw_output: str | None = None
    error: ErrorInfo | None = None
    stop_reason: str | None = None
    confidence: float | None = None
    token_nll: float | None = None
    token_count: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None  # SolverState.reasoning_tokens
    reasoning_cut: bool = False  # SolverState.reasoning_cut
    steps: int = 0
    latency_s: float = 0.0
    end_reason: str | None = None  # SolverState.end_reason
    state_check: CheckResult | None = None  # SolverState.state_check
    sandbox: dict[str, float] | None = None  # SolverState.sandbox
    transcript: list[TranscriptEntry] = Field(default_factory=list)

    _value: Any = PrivateAttr(default=None)
    _has_value: bool = PrivateAttr(default=False)

    def keep_value(self, value: Any) -> SolveRecord:
        """Remember the adapter's own object (e.g. a pydantic model) for the checker."""
        self._value = value
        self._has_value = True
        return self

    @property
    def has_value(self) -> bool:
        """Whether the adapter's own object is kept (not after a JSON round trip, e.g. the cache)."""
        return self._has_value

    @property
    def value(self) -> Any:
        """The solution as the adapter returned it, or its JSON form when that was lost."""
        return self._value if self._has_value else self.solution


class SessionTranscript(BaseModel):
    """One line of ``sessions.jsonl``: a whole session (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    item_id: str
    run_index: int
    model_id: str
    outcome: Outcome
    score: float = 0.0
    correct: bool = False
    check_status: CheckStatus | None = None
    solution: Any = None
    error: ErrorInfo | None = None
    confidence: float | None = None
    steps: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    reasoning_cut: bool = False
    latency_s: float = 0.0
    stop_reason: str | None = None
    end_reason: str | None = None  # why an agent's tool loop ended early (SessionResult.end_reason)
    written_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    entries: list[TranscriptEntry] = Field(default_factory=list)


def carried_fields(source: type[BaseModel], target: type[BaseModel], *, apart: Collection[str] = ()) -> tuple[str, ...]:
    """The fields ``target`` takes as they are from ``source``: every name both models declare,
    in ``target``'s order, but those in ``apart`` (the caller sets them otherwise)."""
    return tuple(name for name in target.model_fields if name in source.model_fields and name not in apart)


# A session's fields, defined once by the models that carry them from stage to stage: a
# SolveRecord's go into its SessionResult as they are (but the latency, measured again for a
# cached answer), and a SessionResult's into its line of sessions.jsonl (but the solution,
# which is made plain JSON there). A field added to two of the models travels without more code.
RESULT_FROM_RECORD = carried_fields(SolveRecord, SessionResult, apart={"latency_s"})
TRANSCRIPT_FROM_RESULT = carried_fields(SessionResult, SessionTranscript, apart={"solution"})
# What a session's SESSION_END entry says of it, in this order: SessionResult's fields, the
# ones in SESSION_END_IF_SET only when set (a model without reasoning or a price says nothing).
SESSION_END_FIELDS = (
    "score",
    "correct",
    "steps",
    "latency_s",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost",
    "confidence",
    "cached",
)
SESSION_END_IF_SET = frozenset({"reasoning_tokens", "cost"})
