"""The item schema of the judge example: an open question and the key facts of a good answer."""

from pydantic import BaseModel


class OpenQuestion(BaseModel):
    id: str
    question: str
    reference: str  # the key words a good answer contains
