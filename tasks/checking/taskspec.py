"""Task specs at run time: loading a fixture, post-processing answers, grading per task.

A task-spec benchmark grades every task by its own rule, so the
checker is one class for all of them: :class:`TaskSpecChecker` applies the
task's ``postprocess`` rule to the answer text and scores the result with the
task's ``metric`` through :func:`ape.tasks.checking.grade.grade`, the grading the built-in
metric checkers use too (``code_exec`` runs the task's tests in a sandbox). It
puts the metric into the check's metadata, which is how the runner learns each
session's metric and how ``score_session`` applies the right pass mark.
Configure it with ``[checker] implementation =
"ape.tasks.checking.taskspec:TaskSpecChecker"`` and ``[adapter] implementation = "raw"``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ape.schemas.check import Failed, Passed
from ape.schemas.errors import ApeError, more_problems, problem_key, problem_message
from ape.schemas.taskspec import TaskSpec
from ape.tasks.checking.code.sandbox import SandboxSetting
from ape.tasks.checking.grade import CodeLimits, grade
from ape.tasks.checking.metrics import as_text
from ape.tasks.plugins.registry import BUILTINS
from ape.tasks.solving.adapt import LastNumberAdapter

# ---------------------------------------------------------------- post-processing

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_last_number = LastNumberAdapter()


def extract_code(text: str) -> str:
    """The first fenced code block's body; the whole text when there is no fence."""
    match = _FENCE.search(text)
    return (match.group(1) if match else text).strip("\n")


def first_line(text: str) -> str:
    """The first non-blank line, stripped (models often explain after the answer)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def last_number(text: str) -> str:
    """The last number in the text as a plain numeral ("1,200.0" -> "1200"); "" when none."""
    try:
        return str(_last_number(text))
    except ValueError:
        return ""  # no number is a wrong answer, not a broken session


def unchanged(text: str) -> str:
    return text


def stripped(text: str) -> str:
    return text.strip()


def lowered(text: str) -> str:
    return text.strip().lower()


# the rules by name, as the registry lists them
POSTPROCESSORS: dict[str, Callable[[str], str]] = {
    name: globals()[path.partition(":")[2]] for name, path in BUILTINS["postprocess"].items()
}


def postprocess(rule: str, text: str) -> str:
    """Apply the named rule; an unknown name is a bug in the caller (the schema forbids it)."""
    try:
        return POSTPROCESSORS[rule](text)
    except KeyError:
        raise ValueError(f"unknown post-processing rule '{rule}'; known: {', '.join(POSTPROCESSORS)}") from None


# ---------------------------------------------------------------- the checker


class TaskSpecChecker:
    """``(task, solution) -> Passed | Failed``: the task's post-processing, then its metric.

    ``memory_mb`` bounds the code of ``code_exec`` tasks (their time limit is the
    task's ``timeout_s``) and ``sandbox`` isolates it (see :mod:`ape.tasks.checking.code.sandbox`).
    A plain class with plain attributes, so it pickles.
    """

    def __init__(self, memory_mb: int = 512, sandbox: SandboxSetting = "auto"):
        if memory_mb <= 0:
            raise ValueError(f"memory_mb must be positive, got {memory_mb}")
        if sandbox not in ("auto", "bwrap", "unshare", "none"):
            raise ValueError(f"sandbox must be auto, bwrap, unshare or none, got {sandbox!r}")
        self.memory_mb = memory_mb
        self.sandbox = sandbox

    def __repr__(self) -> str:
        return f"TaskSpecChecker(memory_mb={self.memory_mb}, sandbox={self.sandbox!r})"

    def __call__(self, task: Any, solution: Any) -> Passed | Failed:
        if not isinstance(task, TaskSpec):
            raise TypeError(
                f"TaskSpecChecker grades TaskSpec items, got {type(task).__name__}; set "
                '[data] schema = "ape.schemas.taskspec:TaskSpec" or use another checker'
            )
        text = postprocess(task.postprocess, as_text(solution))
        metadata: dict[str, Any] = {"postprocess": task.postprocess}
        if task.metric == "code_exec":
            limits = CodeLimits(task.timeout_s, self.memory_mb, self.sandbox)
            return grade(
                task.metric, text, tests=task.tests, limits=limits, item=f"task '{task.id}'", metadata=metadata
            )
        metadata["processed"] = text[:500]
        return grade(task.metric, text, task.reference, metadata=metadata)


# ---------------------------------------------------------------- fixtures


def task_error(exc: ValidationError, task_id: str | None, where: str) -> ApeError:
    """An error naming the task and the field that failed validation."""
    first = exc.errors()[0]
    field = problem_key(first)
    message = problem_message(first)
    more = len(exc.errors()) - 1
    suffix = f" (and {more_problems(more)})" if more else ""
    who = f"task '{task_id}'" if task_id else "a task without an id"
    what = f"field '{field}': {message}" if field else message
    return ApeError(
        f"{who}: {what}{suffix}",
        where=where,
        hint="see ape.schemas.taskspec.TaskSpec for the fields of a task spec",
    )


def validate_task(row: Any, where: str) -> TaskSpec:
    """One task from a mapping (or a TaskSpec); ApeError naming task and field when invalid."""
    if isinstance(row, TaskSpec):
        return row
    if not isinstance(row, dict):
        raise ApeError(f"a task must be a JSON object, got {type(row).__name__}", where=where)
    try:
        return TaskSpec.model_validate(row)
    except ValidationError as exc:
        task_id = row.get("id")
        raise task_error(exc, str(task_id) if task_id not in (None, "") else None, where) from None


def check_unique(tasks: Iterable[TaskSpec], where: str) -> list[TaskSpec]:
    tasks = list(tasks)
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ApeError(f"task '{task.id}': duplicate id", where=where, hint="every task needs its own id")
        seen.add(task.id)
    if not tasks:
        raise ApeError("there are no tasks", where=where, hint="give at least one task spec")
    return tasks


def load_tasks(path: Path) -> list[TaskSpec]:
    """Every task of a JSONL fixture, validated; the first problem is an ApeError naming it."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ApeError("task file not found", where=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ApeError(f"cannot read the task file: {exc}", where=str(path)) from None
    tasks = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ApeError(f"invalid JSON: {exc.msg} (column {exc.colno})", where=where) from None
        tasks.append(validate_task(row, where))
    return check_unique(tasks, str(path))


def write_tasks(tasks: Iterable[TaskSpec], path: Path) -> Path:
    """Write tasks as JSONL (the data file of a task-spec run)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(task.model_dump_json(exclude_none=True) + "\n" for task in tasks)
    path.write_text(text, encoding="utf-8")
    return path
