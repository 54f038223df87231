"""The check stage: running checkers safely, loading them, the carousel, the checker tool."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ape.schemas.check import Failed, Passed
from ape.schemas.config import CheckerConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import CheckResult, CheckStatus
from ape.tasks.checking import check as check_mod
from ape.tasks.checking.check import (
    CheckerCarousel,
    checker_factory,
    checker_tool,
    grade_text,
    load_checker,
    run_check,
)
from ape.tasks.solving.adapt import LastNumberAdapter
from tests.helpers.concurrency import TIMEOUT_S, Gate


def plugin(tmp_path: Path, source: str) -> str:
    name = f"plug_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(source)
    return name


class NumpyLikeBool:
    """Stands in for numpy.bool_, which is not a subclass of bool."""

    dtype = "bool"

    def __init__(self, value: bool):
        self.value = value

    def __bool__(self) -> bool:
        return self.value


@pytest.mark.parametrize(
    "verdict, status, score",
    [
        (True, CheckStatus.PASSED, 1.0),
        (False, CheckStatus.FAILED, 0.0),
        (NumpyLikeBool(True), CheckStatus.PASSED, 1.0),
        (Passed(score=0.75, metadata={"k": 1}), CheckStatus.PASSED, 0.75),
        (Failed(reason="off by one"), CheckStatus.FAILED, 0.0),
        (CheckResult(status=CheckStatus.FAILED, score=0.2), CheckStatus.FAILED, 0.2),
    ],
)
def test_run_check_normalises_verdicts(verdict, status, score):
    result = run_check(lambda item, solution: verdict, {"id": 1}, 5)
    assert result.status is status and result.score == score
    assert result.runtime_s >= 0.0 and result.error is None


def test_failed_reason_and_metadata_are_kept_json_safe():
    result = run_check(lambda i, s: Failed(reason="wrong", metadata={"when": object}), None, 1)
    assert result.metadata["reason"] == "wrong"
    assert isinstance(result.metadata["when"], str)
    result.model_dump_json()  # must not raise


def test_checker_that_raises_is_a_check_error_with_the_exception():
    def broken(item: Any, solution: Any) -> bool:
        time.sleep(0.01)
        raise KeyError("expected")

    result = run_check(broken, {}, 1)
    assert result.status is CheckStatus.ERROR and result.score is None
    assert result.error is not None and result.error.type == "KeyError"
    assert "expected" in result.error.message
    assert result.runtime_s >= 0.01


def test_checker_returning_something_else_is_a_check_error():
    result = run_check(lambda i, s: "yes", {}, 1)
    assert result.status is CheckStatus.ERROR
    assert result.error is not None and "expected Passed, Failed or a bool" in result.error.message


def test_load_function_and_class_checkers(tmp_path):
    source = (
        "def equal(item, solution, tolerance=0):\n"
        "    return abs(item['answer'] - solution) <= tolerance\n"
        "class Near:\n"
        "    def __init__(self, tolerance):\n        self.tolerance = tolerance\n"
        "    def __call__(self, item, solution):\n"
        "        return abs(item['answer'] - solution) <= self.tolerance\n"
    )
    name = plugin(tmp_path, source)
    strict = load_checker(CheckerConfig(implementation=f"{name}:equal"), tmp_path)
    assert strict({"answer": 3}, 3) and not strict({"answer": 3}, 4)
    loose = load_checker(CheckerConfig(implementation=f"{name}:equal", args={"tolerance": 1}), tmp_path)
    assert loose({"answer": 3}, 4)
    factory = checker_factory(CheckerConfig(implementation=f"{name}:Near", args={"tolerance": 2}), tmp_path)
    first, second = factory(), factory()
    assert first is not second and first({"answer": 1}, 3)


def test_load_checker_errors_name_the_section(tmp_path):
    name = plugin(tmp_path, "LIMIT = 3\nclass Needs:\n    def __init__(self, x):\n        pass\n")
    with pytest.raises(ApeError, match="not a checker") as info:
        load_checker(CheckerConfig(implementation=f"{name}:LIMIT"), tmp_path)
    assert info.value.where == "[checker] implementation"
    with pytest.raises(ApeError, match="calling checker") as info:
        load_checker(CheckerConfig(implementation=f"{name}:Needs"), tmp_path)
    assert info.value.where == "[checker] args"
    with pytest.raises(ApeError, match="no attribute"):
        load_checker(CheckerConfig(implementation=f"{name}:nothing"), tmp_path)


def test_short_name_resolves_through_the_builtin_metrics(monkeypatch):
    calls: list[tuple[str, dict[str, Any]]] = []

    def builtin_checker(name: str, args: dict[str, Any]):
        calls.append((name, args))
        return lambda item, solution: solution == item

    monkeypatch.setattr(check_mod, "builtin_checker", builtin_checker)
    checker = load_checker(CheckerConfig(implementation="exact_match", args={"a": 1}), Path("."))
    assert checker("x", "x") and calls == [("exact_match", {"a": 1})]


def test_carousel_never_lends_one_checker_twice_at_once():
    made: list[object] = []
    lock = threading.Lock()
    in_use: set[int] = set()
    clashes: list[int] = []
    gate = Gate()

    class Held:
        def __init__(self) -> None:
            made.append(self)

        def __call__(self, item: Any, solution: Any) -> bool:
            with lock:
                if id(self) in in_use:
                    clashes.append(id(self))
                in_use.add(id(self))
            try:
                with gate.inside():
                    return True
            finally:
                with lock:
                    in_use.discard(id(self))

    carousel = CheckerCarousel(Held, size=2)
    results: list[CheckResult] = []

    def work() -> None:
        for _ in range(5):
            results.append(carousel.check({}, 1))

    with ThreadPoolExecutor(6) as pool, gate:
        futures = [pool.submit(work) for _ in range(6)]
        # both checkers are lent at once, and while they are busy no third check starts
        # (it would need a third checker, or one of the two a second time)
        assert gate.held(2) == 2
        gate.open()
        for future in futures:
            future.result(timeout=TIMEOUT_S)
    assert len(made) == 2 and not clashes
    assert gate.peak <= 2 and gate.entered == 30
    assert len(results) == 30 and all(r.status is CheckStatus.PASSED for r in results)


def test_carousel_returns_a_checker_after_an_exception():
    def checker(item: object, solution: int) -> bool:
        if solution == 0:
            raise RuntimeError("checker failed")
        return True

    carousel = CheckerCarousel(lambda: checker, size=1)
    assert carousel.check({}, 0).status is CheckStatus.ERROR
    assert carousel.check({}, 1).status is CheckStatus.PASSED  # would block if not returned
    with pytest.raises(ValueError, match="at least one"):
        CheckerCarousel(lambda: lambda i, s: True, size=0)


def test_checker_tool_verdicts():
    def checker(item: dict[str, int], solution: int) -> Any:
        if solution < 0:
            raise ArithmeticError("negative")
        if solution == item["answer"]:
            return True
        return Failed(reason=f"{solution} is not {item['answer']}")

    tool = checker_tool(checker, {"answer": 4}, LastNumberAdapter(), "verify")
    assert tool.name == "verify"
    assert tool.invoke({"answer": "it is 4"}) == "PASSED"
    assert tool.invoke({"answer": "5"}) == "FAILED: 5 is not 4"
    assert tool.invoke({"answer": "five"}).startswith("UNPARSABLE: the answer contains no number")
    assert tool.invoke({"answer": "-1"}).startswith("ERROR: the checker could not check")
    pooled = checker_tool(CheckerCarousel(lambda: checker, 1), {"answer": 4}, LastNumberAdapter(), "v")
    assert pooled.invoke({"answer": "4"}) == "PASSED"


def test_grade_text_shows_graded_scores():
    assert grade_text(CheckResult(status=CheckStatus.PASSED, score=0.5)) == "PASSED (score 0.5)"
