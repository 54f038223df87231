"""What a checker returns. A checker is ``(item, solution) -> Passed | Failed``."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class Passed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: float = 1.0
    metadata: dict[str, Any] = Field(default_factory=dict)


class Failed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: float = 0.0
    reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Checker(Protocol):
    """Deterministic verifier: validates a solution, never solves. Returning a bool is accepted."""

    def __call__(self, item: Any, solution: Any) -> Passed | Failed | bool: ...
