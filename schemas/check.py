"""What a checker returns. A checker is ``(item, solution) -> Passed | Failed``."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class Passed(BaseModel):
    """The solution is correct. ``Passed()``, or ``Passed(score=0.9, metadata={...})`` for a
    graded check (the score is what the leaderboard averages)."""

    model_config = ConfigDict(extra="forbid")

    score: float = 1.0
    metadata: dict[str, Any] = Field(default_factory=dict)


class Failed(BaseModel):
    """The solution is wrong. ``Failed("expected 42")``: the reason (positional or
    ``reason=``) appears in the transcript; ``score`` and ``metadata`` are optional."""

    model_config = ConfigDict(extra="forbid")

    score: float = 0.0
    reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, reason: str | None = None, /, **data: Any) -> None:
        if reason is not None:
            data.setdefault("reason", reason)
        super().__init__(**data)


class Checker(Protocol):
    """Deterministic verifier: validates a solution, never solves. Returning a bool is accepted."""

    def __call__(self, item: Any, solution: Any) -> Passed | Failed | bool: ...
