"""Multiple-choice items scored by log-likelihood: the ``[choices]`` section and MMLU's layout.

A config with a ``[choices]`` section scores every item the way lm-evaluation-harness
scores its ``multiple_choice`` tasks (``loglikelihood`` requests): the model writes
nothing; for each choice, the log-probability of its *continuation* after the rendered
prompt is summed over the continuation's tokens, and the most likely choice is the
answer. Two rules pick it (both are saved with every session):

``acc``
    the highest summed log-likelihood;
``acc_norm``
    the highest log-likelihood divided by the length of the choice's text in
    characters (Python ``len``, Unicode code points, the delimiter not counted), as
    lm-evaluation-harness divides (``completion_len = len(choice)``), so that numbers
    compare with the ones it publishes. Characters rather than bytes: that is its
    ``acc_norm``; bytes are its separate ``acc_bytes``, and they would weigh a choice
    in Greek twice a choice in English for the same number of letters.

Continuations are ``delimiter + text`` (lm-evaluation-harness's ``target_delimiter``),
where the text is the choice itself (``continuation = "text"``: ARC, HellaSwag) or its
letter (``continuation = "letter"``: " A", " B", ...; MMLU, whose prompt lists the
options).

:class:`MMLUItem` reads MMLU's CSV files (``question,A,B,C,D,answer``) as they are,
with or without that header row: ``[data] schema = "mmlu"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

__all__ = ["ChoicesConfig", "MMLUItem", "CHOICE_LETTERS"]

CHOICE_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class ChoicesConfig(BaseModel):
    """``[choices]``: where an item's choices and its gold choice are, and how they are scored."""

    model_config = ConfigDict(extra="forbid")

    field: str | None = Field(default=None, description="The DataModel field holding the choices as a list of texts.")
    fields: list[str] | None = Field(
        default=None,
        description="Or one field per choice, in order (MMLU's columns A, B, C, D).",
    )
    gold: str = Field(
        default="answer",
        description="The field holding the gold choice: an index from 0, a letter (A, B, ...) or the choice's text.",
    )
    gold_is: Literal["auto", "index", "letter", "text"] = Field(
        default="auto",
        description="How to read 'gold'; 'auto': a number is an index, a text that is a choice is that choice, "
        "a single letter is a letter.",
    )
    continuation: Literal["text", "letter"] = Field(
        default="text",
        description="What is scored after the prompt: the choice's text, or its letter (when the prompt lists them).",
    )
    delimiter: str = Field(
        default=" ", description="Put between the prompt and every continuation (lm-eval's target_delimiter)."
    )
    min_choices: int = Field(
        default=2,
        ge=1,
        le=2,
        description="Fewest choices an item may have; 1 scores a single continuation (a log-likelihood task such "
        "as LAMBADA: its log-likelihood and whether it is the model's greedy text), where acc is always 1.",
    )
    metric: Literal["acc", "acc_norm"] = Field(
        default="acc",
        description="The session's score and answer: acc (highest log-likelihood) or acc_norm (per character); "
        "both are saved.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ChoicesConfig:
        if (self.field is None) == (self.fields is None):
            raise ValueError("set exactly one of 'field' (a list field) or 'fields' (one field per choice)")
        if self.fields is not None and len(self.fields) < 2:
            raise ValueError("'fields' needs at least two choices")
        return self

    def source_fields(self) -> list[str]:
        """The DataModel fields the choices are read from."""
        return list(self.fields) if self.fields is not None else [str(self.field)]


def _subject(file: Any) -> str | None:
    """``abstract_algebra`` from ``.../abstract_algebra_test.csv`` (MMLU names its files so)."""
    if not file:
        return None
    stem = Path(str(file)).name.split(".")[0]
    for split in ("_test", "_dev", "_val", "_validation", "_train", "_auxiliary_train"):
        if stem.endswith(split):
            return stem[: -len(split)]
    return stem


class MMLUItem(BaseModel):
    """One row of an MMLU CSV file: ``question,A,B,C,D,answer`` (header row optional).

    MMLU's files have no id column: an item's id is its line number in the file, unless
    the file has an ``id`` column. ``subject`` is the file's name without ``_test.csv``
    (``abstract_algebra``), unless the file has a ``subject`` column; it is the natural
    ``[data] category_field``. Use it with ``[choices] field = "choices"`` (the four
    options in order) and ``continuation = "letter"``.
    """

    model_config = ConfigDict(extra="forbid")

    # the columns of a header-less MMLU file, in order (read by ape.tasks.storage.data)
    csv_columns: ClassVar[tuple[str, ...]] = ("question", "A", "B", "C", "D", "answer")

    id: str
    question: str
    A: str
    B: str
    C: str
    D: str
    answer: Literal["A", "B", "C", "D"]
    subject: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any, info: ValidationInfo) -> Any:
        """Fill ``id`` from the line number and ``subject`` from the file name the data
        loader passes as validation context, when the row has no such columns."""
        if not isinstance(data, dict):
            return data
        context = info.context if isinstance(info.context, dict) else {}
        data = dict(data)
        if data.get("id") in (None, "") and context.get("line") is not None:
            data["id"] = str(context["line"])
        if data.get("subject") in (None, "") and context.get("file") is not None:
            data["subject"] = _subject(context["file"])
        if isinstance(data.get("answer"), str):
            data["answer"] = data["answer"].strip().upper()
        return data

    @property
    def choices(self) -> list[str]:
        return [self.A, self.B, self.C, self.D]
