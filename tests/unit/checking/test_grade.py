"""One grading path: a config's metric checker and a task spec's checker give the same verdict."""

from __future__ import annotations

import sys

import pytest

from ape.schemas.check import Failed, Passed
from ape.schemas.taskspec import TaskSpec
from ape.tasks.checking.builtin import builtin_checker
from ape.tasks.checking.code.code_exec import NoTestsError
from ape.tasks.checking.grade import CodeLimits, grade
from ape.tasks.checking.taskspec import TaskSpecChecker

ADD = "def add(a, b):\n    return a + b\n"
HALF = "assert add(1, 2) == 3\nassert add(2, 2) == 5\n"


def _task(metric: str, reference: str = "x", **extra) -> TaskSpec:
    return TaskSpec(id="t1", category="c", metric=metric, prompt="p", reference=reference, postprocess="none", **extra)


@pytest.mark.parametrize(
    ("metric", "answer", "reference"),
    [
        ("exact_match", "Paris", "Paris"),
        ("exact_match", "paris", "Paris"),
        ("f1", "the cat sat", "a cat sat down"),
        ("f1", "dog", "a cat sat down"),
        ("rouge_l", "the quick brown fox", "the quick red fox"),
        ("bleu4", "completely different words here", "the quick red fox jumps"),
    ],
)
def test_both_metric_checkers_give_the_same_verdict(metric, answer, reference):
    from_config = builtin_checker(metric, {"field": "reference"})({"reference": reference}, answer)
    from_task = TaskSpecChecker()(_task(metric, reference), answer)
    assert type(from_config) is type(from_task)
    assert from_config.score == pytest.approx(from_task.score)
    assert from_config.metadata["metric"] == from_task.metadata["metric"] == metric
    if isinstance(from_config, Failed):
        assert from_config.reason == from_task.reason
        assert from_config.metadata["expected"] == from_task.metadata["expected"] == reference


def test_a_failed_text_check_records_the_reference_and_the_pass_mark():
    verdict = grade("f1", "dog", "a cat sat down")
    assert isinstance(verdict, Failed)
    assert verdict.metadata["expected"] == "a cat sat down"
    assert "below the pass mark" in verdict.reason


def test_graded_metrics_pass_at_half_and_pass_fail_metrics_only_at_full():
    assert isinstance(grade("f1", "cat sat", "the cat sat down"), Passed)  # F1 0.8
    assert isinstance(grade("exact_match", "a", "a"), Passed)
    assert isinstance(grade("exact_match", "a ", "b"), Failed)


def test_extra_metadata_is_kept_beside_the_metric():
    verdict = grade("exact_match", "a", "a", metadata={"postprocess": "strip"})
    assert verdict.metadata == {"metric": "exact_match", "postprocess": "strip"}


@pytest.mark.skipif(sys.platform == "win32", reason="process limits need POSIX")
def test_code_exec_through_both_checkers_counts_the_same_tests():
    limits = CodeLimits(timeout_s=5.0, memory_mb=256, sandbox="none")
    direct = grade("code_exec", ADD, tests=HALF, limits=limits)
    from_config = builtin_checker("code_exec", {"timeout_s": 5.0, "memory_mb": 256, "sandbox": "none"})(
        {"tests": HALF}, ADD
    )
    from_task = TaskSpecChecker(memory_mb=256, sandbox="none")(_task("code_exec", tests=HALF), ADD)
    for verdict in (direct, from_config, from_task):
        assert isinstance(verdict, Failed)
        assert verdict.score == pytest.approx(0.5)
        assert (verdict.metadata["passed"], verdict.metadata["total"]) == (1, 2)
        assert "expected" not in verdict.metadata  # code has tests, not a reference


def test_code_without_tests_names_the_item():
    with pytest.raises(NoTestsError, match="task 't9' has no tests"):
        grade("code_exec", ADD, tests="", limits=CodeLimits(sandbox="none"), item="task 't9'")
