"""A task spec: one evaluation task that carries its own metric and post-processing.

A :class:`TaskSpec` is an ordinary DataModel (``[data] schema =
"ape.schemas.taskspec:TaskSpec"``), so task-spec fixtures run through the same
pipeline as any benchmark. What makes it different from a plain data item is
that each task names how to grade it: the ``metric`` (one of the five built-in
ones) and the ``postprocess`` rule applied to the model's answer before the
metric sees it. :class:`ape.tasks.checking.taskspec.TaskSpecChecker` reads both.

The prompt a model sees is the few-shot prefix followed by the prompt body
(``template = "{{ few_shot }}{{ prompt }}"``).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

Metric = Literal["exact_match", "f1", "bleu4", "rouge_l", "code_exec"]
PostProcess = Literal["none", "strip", "first_line", "lower", "extract_code", "last_number"]

METRIC_NAMES: tuple[str, ...] = get_args(Metric)
POSTPROCESS_NAMES: tuple[str, ...] = get_args(PostProcess)

# The prompt template that turns a TaskSpec into the text a model sees.
TASK_TEMPLATE = "{{ few_shot }}{{ prompt }}"


class TaskSpec(BaseModel):
    """One evaluation task: prompt, reference, and how an answer to it is graded."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$", description="Unique task id.")
    category: str = Field(min_length=1, description="Group for the per-category leaderboard.")
    metric: Metric = Field(description="How the post-processed answer is scored.")
    few_shot: str = Field(default="", description="Worked examples put before the prompt.")
    prompt: str = Field(min_length=1, description="The question or instruction itself.")
    reference: str | list[str] = Field(
        description="The expected answer (a list: any of them counts); for code_exec a "
        "reference solution, which the tests must accept."
    )
    postprocess: PostProcess = Field(default="strip", description="Rule applied to the answer text before scoring.")
    tests: str | None = Field(default=None, description="code_exec only: Python asserts run against the answer's code.")
    timeout_s: float = Field(default=5.0, gt=0, description="code_exec only: wall-time limit.")

    @model_validator(mode="after")
    def _consistent(self) -> TaskSpec:
        if isinstance(self.reference, list) and (not self.reference or any(not ref.strip() for ref in self.reference)):
            raise ValueError("'reference' must hold at least one non-empty reference")
        if isinstance(self.reference, str) and not self.reference.strip():
            raise ValueError("'reference' must not be empty")
        if self.metric == "code_exec":
            if not (self.tests and self.tests.strip()):
                raise ValueError("'tests' is required for metric 'code_exec' (Python asserts)")
            if isinstance(self.reference, list):
                raise ValueError("'reference' of a code_exec task is one solution, not a list")
        elif self.tests is not None:
            raise ValueError(f"'tests' only applies to metric 'code_exec', not '{self.metric}'")
        if self.postprocess == "lower" and self.metric == "exact_match":
            upper = [ref for ref in self.references if ref != ref.lower()]
            if upper:
                raise ValueError(
                    f"'reference' {upper[0]!r} has capitals, but postprocess 'lower' lower-cases "
                    "the answer, so exact_match could never pass; write the reference in lower case"
                )
        return self

    @property
    def references(self) -> list[str]:
        return list(self.reference) if isinstance(self.reference, list) else [self.reference]
