"""One built-in metric applied to one answer: the grade both metric checkers give.

A ``[checker] implementation = "f1"`` (:class:`ape.tasks.checking.builtin.BuiltinChecker`) and a
task-spec benchmark (:class:`ape.tasks.checking.taskspec.TaskSpecChecker`) differ only in where
the metric, the reference and the code limits come from: the config for the first, each
task for the second. Grading itself is here, once, so both report the same score, pass
mark, failure reason and metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ape.schemas.check import Failed, Passed
from ape.tasks.checking.code.code_exec import NoTestsError, run_code
from ape.tasks.checking.code.sandbox import SandboxSetting
from ape.tasks.checking.metrics import METRICS, as_text, correct_from_score


@dataclass(frozen=True)
class CodeLimits:
    """How model-written code runs for ``code_exec``: wall time, memory and isolation."""

    timeout_s: float = 5.0
    memory_mb: int = 512
    sandbox: SandboxSetting = "auto"


def grade(
    metric: str,
    answer: Any,
    reference: Any = None,
    *,
    tests: Any = None,
    limits: CodeLimits | None = None,
    item: str = "the item",
    metadata: Mapping[str, Any] | None = None,
) -> Passed | Failed:
    """Score ``answer`` with ``metric`` and say whether it passes.

    ``reference`` is what text metrics compare with; ``tests`` and ``limits`` are for
    ``code_exec``, whose run details (tests passed, exit code, output tails) go into the
    metadata. ``item`` names the item in the error raised when it has no tests. A failed
    text check records the reference as ``expected``, shown next to the answer in the
    session log and ``sessions.parquet``.
    """
    details: dict[str, Any] = {"metric": metric, **(metadata or {})}
    if metric == "code_exec":
        limits = limits or CodeLimits()
        try:
            result = run_code(
                as_text(answer),
                as_text(tests),
                timeout_s=limits.timeout_s,
                memory_mb=limits.memory_mb,
                sandbox=limits.sandbox,
            )
        except NoTestsError as exc:
            raise NoTestsError(f"{item} has no tests to run: {exc}") from None
        score = result.score
        details.update(result.model_dump(exclude={"score"}))
        reference = None
    else:
        score = float(METRICS[metric](answer, reference))
    if correct_from_score(metric, score):
        return Passed(score=score, metadata=details)
    if reference is not None:
        details["expected"] = as_text(reference)
    reason = details.get("error") or f"{metric} score {score:.3f} is below the pass mark"
    return Failed(score=score, reason=reason, metadata=details)
