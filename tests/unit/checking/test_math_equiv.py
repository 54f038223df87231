"""math_equiv: a boxed answer equal to the reference mathematically passes, by math-verify."""

from __future__ import annotations

import threading

import pytest

from ape.schemas.benchmark_items import MATHItem
from ape.schemas.check import Failed, Passed
from ape.tasks.checking.math_equiv import MathEquivChecker

pytest.importorskip("math_verify", reason="the math extra (math-verify) is not installed")


def item(answer: str) -> MATHItem:
    return MATHItem.model_validate({"problem": "p", "answer": answer}, context={"line": 1})


@pytest.mark.parametrize(
    ("reference", "reply", "passes"),
    [
        ("\\frac{1}{2}", "So the answer is \\boxed{0.5}.", True),
        ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}", True),
        ("2\\sqrt{2}", "\\boxed{\\sqrt{8}}", True),
        ("(1, 3]", "The interval is \\boxed{(1,3]}", True),
        ("4", "\\boxed{5}", False),
        ("4", "no answer at all", False),
    ],
)
def test_equivalent_answers_pass_others_fail(reference: str, reply: str, passes: bool) -> None:
    graded = MathEquivChecker()(item(reference), reply)
    assert isinstance(graded, Passed if passes else Failed)


def test_it_grades_on_a_worker_thread() -> None:
    # checkers run on worker threads, where math-verify's signal timeouts cannot: they are off
    found: list[object] = []
    thread = threading.Thread(target=lambda: found.append(MathEquivChecker()(item("3"), "\\boxed{3}")))
    thread.start()
    thread.join(60)
    assert isinstance(found[0], Passed)
