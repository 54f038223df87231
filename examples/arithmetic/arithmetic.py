"""The example benchmark's DataModel: one arithmetic question per item."""

from pydantic import BaseModel, Field


class Problem(BaseModel):
    id: str
    question: str
    answer: int
    category: str = Field(description="addition, multiplication or mixed")
