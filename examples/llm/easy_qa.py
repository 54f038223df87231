"""The real-model example's DataModel and checker: very easy questions with short answers.

A 135M-parameter model answers in a sentence ("The capital of France is Paris."),
not with the bare word, so the checker accepts an answer that *mentions* one of
the accepted answers as a whole word, ignoring case. That keeps the verdict
about knowledge rather than phrasing, while "Parisian" or "blueberry" still do
not count.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from ape import Failed, Passed


class Question(BaseModel):
    id: str
    question: str
    answers: list[str] = Field(min_length=1, description="Accepted answers; any one is enough.")
    category: str = "general"


def _mentions(text: str, answer: str) -> bool:
    """Whether ``answer`` occurs in ``text`` as a whole word (or phrase), ignoring case."""
    pattern = rf"(?<!\w){re.escape(answer.strip())}(?!\w)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def mentions_answer(item: Question, solution: object) -> Passed | Failed:
    """Passed when the answer text mentions an accepted answer; Failed says which were expected."""
    text = solution if isinstance(solution, str) else str(solution)
    for answer in item.answers:
        if _mentions(text, answer):
            return Passed(metadata={"matched": answer})
    return Failed(reason=f"expected one of {item.answers} in the answer")
