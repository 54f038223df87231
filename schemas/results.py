"""What a session produces and what the runner saves: the contract between
solve/check/score, the save handler and the reports.

``results.jsonl`` holds one :class:`OutputBatch` per line (one item, all its
sessions). Reports read only these files, so ``ape report`` never needs a model.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Outcome(str, Enum):
    """The five ways a solver session ends.

    TRUNCATED is an outcome of its own, not a flag on a wrong answer: an answer cut at the
    token limit was never finished, so parsing and checking it would grade a prefix and
    count the budget as the model's mistake. Scoring treats it like any unsolved session
    (score 0, not correct), so accuracy stays what the model delivered under its budget;
    the report, run health and the history count it apart, and ``ape retry --outcomes
    TRUNCATED`` redoes it (after raising ``[model] max_tokens``).
    """

    SOLVED = "SOLVED"  # a solution was parsed (whether it is correct is the checker's call)
    PARSING_FAILED = "PARSING_FAILED"  # every solution_adaption_attempt failed
    GAVE_UP = "GAVE_UP"  # the answer contained I_GIVE_UP
    TRUNCATED = "TRUNCATED"  # the final answer stopped at the token limit (finish_reason "length")
    ERROR = "ERROR"  # a model or infrastructure failure that survived retries


class CheckStatus(str, Enum):
    PASSED = "PASSED"
    FAILED = "FAILED"
    ERROR = "ERROR"  # the checker raised


class ErrorInfo(Record):
    type: str
    message: str
    # where the exception was raised in the plugin's own code ("checker.py:12 in check"),
    # so a one-line error points at the line to fix; None for errors APE reports itself
    where: str | None = None
    traceback: str | None = None  # the last frames, for run.log under --debug

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        frames = list(traceback.extract_tb(exc.__traceback__)) if exc.__traceback__ is not None else []
        # notes (BaseException.add_note) say what the message leaves out: the endpoint of a
        # connection failure (ape.tasks.models.limits.policy.endpoint_note)
        notes = [str(note) for note in getattr(exc, "__notes__", ()) if str(note).strip()]
        message = str(exc) + "".join(f" ({note})" for note in notes)
        return cls(
            type=type(exc).__name__,
            message=message[:2000],
            where=_user_frame(frames),
            traceback="".join(traceback.format_exception(exc, limit=-12))[-4000:] if frames else None,
        )

    def line(self) -> str:
        """``Type: message (at file:line in function)``, on one line."""
        text = f"{self.type}: {self.message}"
        return f"{text} (at {self.where})" if self.where else text


_ROOT = Path(__file__).resolve().parent.parent  # the repository, or site-packages/ape in a wheel
# APE's own code (the shipped examples count as user code); in a wheel ape/*.py lie in _ROOT
_APE_DIRS = tuple(str(_ROOT / name) for name in ("ape", "schemas", "tasks", "flows", "deployments"))
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_path(key))
)


def _user_frame(frames: list[traceback.FrameSummary]) -> str | None:
    """The innermost frame in the user's code: outside APE, the standard library and
    installed packages (a checker that fails inside pandas is shown at its own line that
    called pandas); None when the error arose in none of it (a dropped connection)."""
    own = [
        f
        for f in frames
        if not (_within(f.filename, _APE_DIRS) or _ape_module(f.filename) or _within(f.filename, _LIBRARY_DIRS))
    ]
    if not own:
        return None
    frame = own[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def _ape_module(filename: str) -> bool:
    """ape/*.py of a wheel install, which lie directly in _ROOT."""
    return _ROOT.name == "ape" and Path(filename).parent == _ROOT


def _within(filename: str, folders: tuple[str, ...]) -> bool:
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return any(path == folder or path.startswith(folder + os.sep) for folder in folders)


class CheckResult(Record):
    status: CheckStatus
    score: float | None = None  # graded metrics report a score; pass/fail checkers 1.0/0.0
    runtime_s: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: ErrorInfo | None = None


class SessionResult(Record):
    """One attempt at one item, after solve, adapt, check and score."""

    item_id: str
    run_index: int
    model_id: str
    outcome: Outcome
    solution: Any = None  # the adapter's output, JSON-encoded
    raw_output: str | None = None  # the model's last answer text
    error: ErrorInfo | None = None
    check: CheckResult | None = None
    metric: str | None = None
    score: float = 0.0  # 0.0 when the session produced no checkable solution
    correct: bool = False
    confidence: float | None = None  # in [0, 1]; None when the model reports none
    token_nll: float | None = None
    token_count: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None  # reasoning tokens included, as providers bill them
    reasoning_tokens: int | None = None  # of output_tokens, spent reasoning; None when unreported
    # TRUNCATED inside the reasoning (the budget spent thinking, no answer begun), not an
    # answer cut after it: raise max_tokens or lower reasoning_effort
    reasoning_cut: bool = False
    steps: int = 0  # model calls made
    latency_s: float = 0.0  # wall time of solve + adapt
    category: str | None = None
    cached: bool = False  # True when the generation came from the result cache
    cluster: str | None = None  # the item's [data] cluster_field value
    # tokens x the model's prices, spent this run: 0 for a session answered from the cache;
    # None without prices or tokens
    cost: float | None = None
    # a cached session's price had it been asked again (what the cache saved); None otherwise
    cached_cost: float | None = None
    prompt_hash: str | None = None  # the rendered prompt's sha256, 16 hex digits (run health)
    # why the final answer's generation stopped, as the provider said it (OpenAI's
    # finish_reason "stop"/"length", Anthropic's stop_reason "end_turn"/"max_tokens"); None
    # when the model reports none
    stop_reason: str | None = None
    batch: bool = False  # True when the model answered through its provider's batch API ([model] batch)
    # why an agent's tool loop ended early ("step_limit", "token_limit", "sandbox_time_limit"); None when it answered
    end_reason: str | None = None
    # seconds of an agent session's sandbox: start_s, commands_s, grade_s, teardown_s ([sandbox]);
    # killed_memory, killed_cpu, killed_file_size: commands a limit killed (absent: none);
    # net_allowed, net_refused, net_bytes: connections through the proxy ([sandbox] allow_hosts)
    sandbox: dict[str, float] | None = None


class OutputBatch(Record):
    """All sessions of one item: the unit that is saved, resumed and retried."""

    item_id: str
    model_id: str
    sessions: list[SessionResult]
    saved_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def has_error(self) -> bool:
        return any(s.outcome is Outcome.ERROR for s in self.sessions)

    @property
    def check_errors(self) -> int:
        """Sessions whose checker raised, returned no grade, or ran past its time limit."""
        return sum(s.check is not None and s.check.status is CheckStatus.ERROR for s in self.sessions)

    @property
    def counts(self) -> tuple[int, int]:
        """(sessions, correct sessions): what the progress line adds up, also for resumed items."""
        return len(self.sessions), sum(s.correct for s in self.sessions)

    @property
    def needs_redo(self) -> bool:
        """A rerun (and ``ape retry``) redoes this item: a session or a check errored."""
        return self.has_error or self.check_errors > 0


class Generation(BaseModel):
    """What a ModelAdapter returns for one prompt."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The answer.")
    confidence: float = Field(
        ge=0.0, le=1.0, description="Required: the model's probability that the answer is right (calibration)."
    )
    token_nll: float | None = Field(
        default=None, description="Optional: the answer tokens' summed negative log-likelihood."
    )
    token_count: int | None = Field(default=None, description="Optional: how many tokens the answer has.")
