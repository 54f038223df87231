"""The DataModel of the multiple-choice example: a question, its choices and the gold index."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ChoiceQuestion(BaseModel):
    """One question with two or more choices; ``answer`` is the gold choice's index, from 0."""

    model_config = ConfigDict(extra="forbid")

    id: str
    category: str
    question: str
    choices: list[str] = Field(min_length=2)
    answer: int = Field(ge=0)
