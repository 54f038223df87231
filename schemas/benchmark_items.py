"""DataModels of the catalogue's benchmarks (``ape benchmarks``), in their Hugging Face shapes.

Each model reads one row of the dataset as the Hub serves it (and as local ``.jsonl`` files in
the same shape hold it), so ``[data] hf_path`` or ``hf_data_files`` needs no conversion. Rows
without an id get their row number (the ``line`` the data loader passes as validation
context). The fields a prompt or checker needs beyond the row's own are properties:
GSM8K's ``target`` (the number after ``####``), a multiple-choice item's ``choices`` and
``gold`` (an index from 0), MBPP's ``tests``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, computed_field, model_validator

__all__ = [
    "ARCItem",
    "GSM8KItem",
    "HellaSwagItem",
    "HumanEvalItem",
    "MATHItem",
    "MBPPItem",
    "MMLUHubItem",
    "TruthfulQAMC1Item",
    "WinoGrandeItem",
]


class _Row(BaseModel):
    """A dataset row: extra columns are ignored (datasets add some over time), the id is the
    row number unless the row has one."""

    model_config = ConfigDict(extra="ignore")

    id: str

    @model_validator(mode="before")
    @classmethod
    def _row_id(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        context = info.context if isinstance(info.context, dict) else {}
        data = dict(data)
        own = next((data[k] for k in ("id", "task_id", "unique_id", "ind") if data.get(k) not in (None, "")), None)
        if own is not None:
            data["id"] = str(own)
        elif context.get("line") is not None:
            data["id"] = str(context["line"])
        return data


class GSM8KItem(_Row):
    """``openai/gsm8k`` (configuration ``main``): a question and a worked answer ending ``#### 42``."""

    question: str
    answer: str

    @property
    def target(self) -> str:
        """The final number after ``####``, without thousands separators (as the harness compares)."""
        final = self.answer.rsplit("####", 1)[-1]
        return normalize_number(final)


def normalize_number(text: str) -> str:
    """lm-evaluation-harness's GSM8K normalization: no commas, no ``$``, no final period."""
    return re.sub(r"\.$", "", re.sub(r"[,$]", "", text.strip())).strip()


class _MultipleChoice(_Row):
    """An item with ``choices`` (texts, in order) and ``gold`` (an index from 0)."""

    @property
    def choices(self) -> list[str]:
        raise NotImplementedError

    @property
    def gold(self) -> int:
        raise NotImplementedError


class MMLUHubItem(_MultipleChoice):
    """``cais/mmlu``: question, subject, four choices and the gold index."""

    question: str
    subject: str = ""
    options: list[str]
    answer: int

    @model_validator(mode="before")
    @classmethod
    def _options(cls, data: Any) -> Any:
        """The dataset's ``choices`` column is ``options`` here (``choices`` is what [choices]
        reads); the question stripped, as the harness's prompt strips it."""
        if isinstance(data, dict) and "choices" in data and "options" not in data:
            data = {**data, "options": data["choices"]}
        if isinstance(data, dict) and isinstance(data.get("question"), str):
            data = {**data, "question": data["question"].strip()}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def topic(self) -> str:
        """The subject as the harness's description names it: ``abstract algebra``."""
        return self.subject.replace("_", " ")

    @property
    def choices(self) -> list[str]:
        return self.options

    @property
    def gold(self) -> int:
        return self.answer

    @computed_field  # type: ignore[prop-decorator]
    @property
    def A(self) -> str:  # noqa: N802 - the letters the prompt lists
        return self.options[0]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def B(self) -> str:  # noqa: N802
        return self.options[1]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def C(self) -> str:  # noqa: N802
        return self.options[2]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def D(self) -> str:  # noqa: N802
        return self.options[3]


class ARCItem(_MultipleChoice):
    """``allenai/ai2_arc`` (``ARC-Challenge``, ``ARC-Easy``): choices as ``{text, label}`` lists."""

    question: str
    choice_texts: list[str]
    choice_labels: list[str]
    answerKey: str  # noqa: N815 - the dataset's column name

    @model_validator(mode="before")
    @classmethod
    def _split_choices(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("choices"), dict):
            choices = data["choices"]
            data = {**data, "choice_texts": choices.get("text"), "choice_labels": choices.get("label")}
        return data

    @property
    def choices(self) -> list[str]:
        return self.choice_texts

    @property
    def gold(self) -> int:
        return self.choice_labels.index(self.answerKey)


def _hellaswag_text(text: str) -> str:
    """The harness's HellaSwag cleaning: WikiHow's ``[title]`` markers and double spaces out."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


class HellaSwagItem(_MultipleChoice):
    """``Rowan/hellaswag``: a context and four endings; ``label`` is the gold index (a string)."""

    activity_label: str
    ctx_a: str
    ctx_b: str
    endings: list[str]
    label: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def query(self) -> str:
        """``activity: ctx_a Ctx_b``, cleaned, as lm-evaluation-harness's hellaswag task builds it."""
        ctx = f"{self.ctx_a} {self.ctx_b.capitalize()}"
        return _hellaswag_text(f"{self.activity_label}: {ctx}")

    @property
    def choices(self) -> list[str]:
        return [_hellaswag_text(ending) for ending in self.endings]

    @property
    def gold(self) -> int:
        return self.label


class WinoGrandeItem(_MultipleChoice):
    """``allenai/winogrande``: a sentence with a blank ``_``, two options, answer ``"1"`` or ``"2"``."""

    sentence: str
    option1: str
    option2: str
    answer: int

    @property
    def choices(self) -> list[str]:
        return [self.option1, self.option2]

    @property
    def gold(self) -> int:
        return self.answer - 1


class TruthfulQAMC1Item(_MultipleChoice):
    """``truthfulqa/truthful_qa`` (``multiple_choice``): ``mc1_targets`` holds the choices, the
    one true answer labelled 1."""

    question: str
    mc1_choices: list[str]
    mc1_labels: list[int]

    @model_validator(mode="before")
    @classmethod
    def _targets(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("mc1_targets"), dict):
            targets = data["mc1_targets"]
            data = {**data, "mc1_choices": targets.get("choices"), "mc1_labels": targets.get("labels")}
        return data

    @property
    def choices(self) -> list[str]:
        return self.mc1_choices

    @property
    def gold(self) -> int:
        return self.mc1_labels.index(1)


class HumanEvalItem(_Row):
    """``openai/openai_humaneval``: a function's prompt, its tests and entry point."""

    prompt: str
    entry_point: str
    test: str
    canonical_solution: str = ""

    @property
    def preamble(self) -> str:
        """The prompt up to the function to write: its imports and helper functions."""
        match = re.search(rf"^def {re.escape(self.entry_point)}\s*\(", self.prompt, re.MULTILINE)
        return self.prompt[: match.start()] if match else ""

    @property
    def tests(self) -> str:
        """What ``code_exec`` runs after the solution: preamble, ``check``, ``check(entry_point)``."""
        return f"{self.preamble}\n{self.test}\n\ncheck({self.entry_point})\n"


class MBPPItem(_Row):
    """``google-research-datasets/mbpp`` (``full``): a task, its asserts and setup code."""

    text: str
    test_list: list[str]
    test_setup_code: str = ""
    code: str = ""

    @property
    def tests(self) -> str:
        """The setup code and the task's asserts, run after the solution by ``code_exec``."""
        return "\n".join([self.test_setup_code, *self.test_list]) + "\n"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def first_test(self) -> str:
        """The first assert, shown in the prompt (as the MBPP paper's prompt shows the tests)."""
        return self.test_list[0] if self.test_list else ""


class MATHItem(_Row):
    """``HuggingFaceH4/MATH-500``: a competition problem and its final answer (LaTeX)."""

    problem: str
    answer: str
    subject: str = ""
    level: int | None = None
