"""The reasoning example's DataModel: one arithmetic question per item."""

from pydantic import BaseModel


class Problem(BaseModel):
    id: str
    question: str
    answer: int
