"""The canary: before any model is called, the checker grades answers whose grade is known.

A checker that cannot grade (a sandbox whose interpreter is hidden, a ``memory_mb`` too
low for Python to start, a user checker that crashes on every item) would otherwise turn
every session of the run into a confident wrong number. So ``ape run``, ``ape validate``
and the benchmark flow (also when a deployment starts it) first grade:

- for ``code_exec``: a known-correct and a known-wrong candidate of a tiny built-in
  problem, in the configured sandbox with the configured limits; they must score 1 and 0;
- for the text metrics (``exact_match``, ``accuracy``, ``f1``, ``bleu4``, ``rouge_l``): a
  known match and a known miss, read through the configured ``args.field``; 1 and 0;
- for ``taskspec``: both of these, as task specs (a code task and an exact-match task);
- for ``choice`` (a ``[choices]`` run): an item with two or more choices, its gold choice
  written as ``[choices] gold_is`` reads it, and the log-likelihoods of a session that
  chose the gold and of one that chose another; 1 and 0 (the endpoints' own prompt
  log-probabilities are probed apart, :mod:`ape.tasks.checking.logprob_canary`);
- for any checker, the examples of ``[[checker.canary]]`` in the config: an ``item`` (a
  table of the DataModel's fields), a ``solution`` (handed to the checker as the adapter
  would return it) and the expected ``passed`` and/or ``score``.

Examples run at the same time, each with its own checker instance, so the canary costs
about one check's time per checker. An example whose grade differs, or whose check
errs, raises :class:`CanaryFailed`: one line naming the checker, the example and the
cause (``ape`` exits 2).
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ape.schemas.choices import CHOICE_LETTERS
from ape.schemas.config import CheckerConfig
from ape.schemas.errors import ApeError, validation_lines
from ape.schemas.results import CheckResult, CheckStatus
from ape.schemas.taskspec import TaskSpec
from ape.tasks.checking.builtin import BuiltinChecker, CodeExecArgs
from ape.tasks.checking.check import Checker, run_check
from ape.tasks.checking.choice import ChoiceChecker
from ape.tasks.checking.taskspec import TaskSpecChecker
from ape.tasks.plugins.registry import is_short_name

SCORE_TOLERANCE = 1e-6
CAUSE_CHARS = 300  # the cause is cut here so the error stays one readable line

CODE_TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
CODE_CORRECT = "def add(a, b):\n    return a + b\n"
CODE_WRONG = "def add(a, b):\n    return a - b\n"

# (reference, matching answer, missing answer) of each text metric: every metric scores
# the first pair 1.0 and the second 0.0
TEXT_EXAMPLES: dict[str, tuple[str, str, str]] = {
    "exact_match": ("Paris", "Paris", "Berlin"),
    "accuracy": ("Paris", "paris", "Berlin"),
    "f1": ("the Eiffel Tower", "Eiffel Tower", "Big Ben"),
    "bleu4": ("the cat sat on the mat", "the cat sat on the mat", "dogs bark loudly"),
    "rouge_l": ("the cat sat on the mat", "the cat sat on the mat", "dogs bark loudly"),
}


@dataclass(frozen=True)
class Example:
    """One known answer: the item and solution the checker gets, and the grade it must give."""

    name: str
    item: Any
    solution: Any
    passed: bool | None = None
    score: float | None = None


class CanaryFailed(ApeError):
    """A known answer was graded wrongly: the checker cannot be trusted for this run."""


def builtin_examples(checker: Checker) -> list[Example]:
    """The known answers of a built-in metric checker; none for other checkers.

    Items are plain mappings holding only the field the checker reads (``args.field``, or
    ``args.tests_field`` for ``code_exec``), so they fit whatever DataModel the run uses.
    """
    if isinstance(checker, TaskSpecChecker):
        return taskspec_examples()
    if isinstance(checker, ChoiceChecker):
        return choice_examples(checker)
    if not isinstance(checker, BuiltinChecker):
        return []
    if isinstance(checker.args, CodeExecArgs):
        item = {checker.args.tests_field: CODE_TESTS}
        return [
            Example("known-correct code", item, CODE_CORRECT, passed=True, score=1.0),
            Example("known-wrong code", item, CODE_WRONG, passed=False, score=0.0),
        ]
    if checker.metric not in TEXT_EXAMPLES:
        return []
    reference, match, miss = TEXT_EXAMPLES[checker.metric]
    item = {checker.args.field: reference}
    return [
        Example(f"known match {match!r}", item, match, passed=True, score=1.0),
        Example(f"known miss {miss!r}", item, miss, passed=False, score=0.0),
    ]


def taskspec_examples() -> list[Example]:
    """Known answers for ``taskspec``: a code task run with the checker's memory limit and
    sandbox, and an exact-match task (each task spec carries its own metric)."""
    code = TaskSpec(
        id="canary-code", category="canary", metric="code_exec", prompt="add", reference=CODE_CORRECT, tests=CODE_TESTS
    )
    reference, match, miss = TEXT_EXAMPLES["exact_match"]
    text = TaskSpec(id="canary-text", category="canary", metric="exact_match", prompt="capital", reference=reference)
    return [
        Example("known-correct code", code, CODE_CORRECT, passed=True, score=1.0),
        Example("known-wrong code", code, CODE_WRONG, passed=False, score=0.0),
        Example(f"known match {match!r}", text, match, passed=True, score=1.0),
        Example(f"known miss {miss!r}", text, miss, passed=False, score=0.0),
    ]


def choice_examples(checker: ChoiceChecker) -> list[Example]:
    """Known answers for ``choice``: a session whose likeliest choice is the gold one, and one
    whose likeliest is another, on an item shaped as ``[choices]`` reads it (``field`` or
    ``fields``, ``gold`` as ``gold_is`` says). Choices of equal length, so ``acc`` and
    ``acc_norm`` pick the same one."""
    cfg = checker.cfg
    count = len(cfg.fields) if cfg.fields is not None else 2
    texts = [f"choice {CHOICE_LETTERS[i]}" for i in range(count)]
    item: dict[str, Any] = dict(zip(cfg.fields, texts)) if cfg.fields is not None else {str(cfg.field): texts}
    item[cfg.gold] = {"letter": "A", "text": texts[0]}.get(cfg.gold_is, 0)
    chars = [len(text) for text in texts]

    def session(likeliest: int) -> dict[str, Any]:
        return {"loglikelihoods": [-0.5 if i == likeliest else -3.0 for i in range(count)], "chars": chars}

    return [
        Example("known pick of the gold choice", item, session(0), passed=True, score=1.0),
        Example("known pick of another choice", item, session(1), passed=False, score=0.0),
    ]


def configured_examples(cfg: CheckerConfig, data_model: type[BaseModel]) -> list[Example]:
    """The ``[[checker.canary]]`` examples, their items validated against ``data_model``.

    An item that does not fit the DataModel is an :class:`ApeError` naming the entry.
    """
    examples = []
    for number, entry in enumerate(cfg.canary, start=1):
        name = entry.name or f"example {number}"
        try:
            item = data_model.model_validate(entry.item)
        except ValidationError as exc:
            raise ApeError(
                f"the item of [[checker.canary]] entry {number} ({name!r}) is not a valid "
                f"{data_model.__name__}: {validation_lines(exc, default='(item)')[0]}",
                where="[checker] canary",
                hint=f"give the DataModel's fields: {', '.join(data_model.model_fields)}",
            ) from None
        examples.append(Example(name, item, entry.solution, passed=entry.passed, score=entry.score))
    return examples


def problem(example: Example, result: CheckResult) -> str | None:
    """Why ``result`` is not the grade ``example`` expects, as one clause; None when it is."""
    if result.status is CheckStatus.ERROR:
        error = result.error
        return "the check errored: " + (f"{error.type}: {error.message}" if error else "no details")
    got_passed = result.status is CheckStatus.PASSED
    got_score = float(result.score) if result.score is not None else float(got_passed)
    wrong_grade = example.passed is not None and got_passed != example.passed
    wrong_score = example.score is not None and not math.isclose(got_score, example.score, abs_tol=SCORE_TOLERANCE)
    if not (wrong_grade or wrong_score):
        return None
    return f"expected {_grade(example.passed, example.score)}, got {_grade(got_passed, got_score)}" + _why(result)


def _grade(passed: bool | None, score: float | None) -> str:
    parts = [] if passed is None else ["PASSED" if passed else "FAILED"]
    if score is not None:
        parts.append(f"score {score:g}")
    return " with ".join(parts)


def _why(result: CheckResult) -> str:
    """What the checker said about the grade: the failure reason and the stderr tail."""
    details = [str(result.metadata.get(key)) for key in ("reason", "error") if result.metadata.get(key)]
    stderr = str(result.metadata.get("stderr_tail") or "").strip()
    if stderr:
        details.append("stderr: " + stderr.splitlines()[-1])
    unique = list(dict.fromkeys(details))
    return f" ({'; '.join(unique)})" if unique else ""


def one_line(text: str, limit: int = CAUSE_CHARS) -> str:
    """``text`` with its whitespace collapsed, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def grade_examples(
    factory: Callable[[], Checker], examples: Sequence[Example], timeout_s: float | None
) -> list[tuple[Example, CheckResult]]:
    """Every example checked at the same time, each by its own checker instance (a stateful
    checker is never shared), under the configured time limit."""
    if not examples:
        return []

    def one(example: Example) -> tuple[Example, CheckResult]:
        try:
            checker = factory()
        except Exception as exc:
            raise CanaryFailed(f"the checker could not be created: {type(exc).__name__}: {exc}") from exc
        return example, run_check(checker, example.item, example.solution, timeout_s)

    with ThreadPoolExecutor(max_workers=len(examples), thread_name_prefix="ape-canary") as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, example) for example in examples]
        return [future.result() for future in futures]


def run_canary(
    cfg: CheckerConfig,
    factory: Callable[[], Checker],
    data_model: type[BaseModel],
) -> list[tuple[Example, CheckResult]]:
    """Grade the built-in and configured examples of ``[checker]``; raise :class:`CanaryFailed`
    (one line: checker, example, cause) at the first that does not come out as expected.

    Returns the graded examples (empty for a user checker that declares none).
    """
    # only a built-in (a short name) has built-in examples: a user's checker is not
    # instantiated just to find that out
    builtin = builtin_examples(factory()) if is_short_name(cfg.implementation) else []
    examples = builtin + configured_examples(cfg, data_model)
    graded = grade_examples(factory, examples, cfg.timeout_s)
    for example, result in graded:
        cause = problem(example, result)
        if cause is not None:
            raise CanaryFailed(
                f"canary of checker '{cfg.implementation}' failed on {example.name!r}: {one_line(cause)}",
                where="[checker] implementation",
                hint="no model was called; fix the checker or its limits, or the [[checker.canary]] entry",
            )
    return graded
