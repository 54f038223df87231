"""The canary: the checker grades known answers before any model call; a wrong verdict is exit 2."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from ape.cli import main
from ape.schemas.check import Failed, Passed
from ape.schemas.config import CheckerConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import CheckStatus
from ape.tasks.checking import grade as grade_mod
from ape.tasks.checking.canary import CanaryFailed, run_canary
from ape.tasks.checking.check import checker_factory
from ape.tasks.checking.code.code_exec import CodeExecResult
from tests.helpers.runner import make_benchmark
from tests.unit.checking.code.test_sandbox_failures import BROKEN_BWRAP, BWRAP_SAYS


class Item(BaseModel):
    id: str
    question: str
    answer: int


def canary(implementation: str, **fields):
    cfg = CheckerConfig(implementation=implementation, **fields)
    return run_canary(cfg, checker_factory(cfg, Path(".")), Item)


@pytest.mark.parametrize("metric", ["exact_match", "accuracy", "f1", "bleu4", "rouge_l"])
def test_each_text_metric_grades_a_known_match_and_a_known_miss(metric):
    graded = canary(metric)
    verdicts = [(result.status, result.score) for _, result in graded]
    assert verdicts == [(CheckStatus.PASSED, 1.0), (CheckStatus.FAILED, 0.0)]


def test_a_metric_that_never_matches_stops_on_the_known_match(monkeypatch):
    monkeypatch.setitem(grade_mod.METRICS, "exact_match", lambda answer, reference: 0.0)
    with pytest.raises(CanaryFailed) as caught:
        canary("exact_match")
    text = str(caught.value)
    assert "checker 'exact_match'" in text and "known match 'Paris'" in text
    assert "expected PASSED with score 1, got FAILED with score 0" in text
    assert "\n" not in text


def test_the_canary_reads_the_configured_reference_field():
    graded = canary("f1", args={"field": "question"})
    assert [example.item for example, _ in graded] == [{"question": "the Eiffel Tower"}] * 2


def test_code_exec_scores_the_known_correct_one_and_the_known_wrong_zero():
    graded = canary("code_exec")
    assert [(example.name, result.score) for example, result in graded] == [
        ("known-correct code", 1.0),
        ("known-wrong code", 0.0),
    ]
    assert graded[0][1].metadata["passed"] == 2 and graded[1][1].metadata["total"] == 2


@pytest.fixture
def broken_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A bwrap first on PATH that cannot create its namespaces, as on a host that forbids them.
    Warm sandboxes started before are closed so the next check starts a new one, and the
    broken ones are closed when the test ends (before PATH is restored)."""
    from ape.tasks.checking.code.code_exec import close_pools

    folder = tmp_path / "broken-bin"
    folder.mkdir()
    (folder / "bwrap").write_text(BROKEN_BWRAP)
    (folder / "bwrap").chmod(0o755)
    close_pools()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    yield
    close_pools()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap for the sandbox kind under test")
@pytest.mark.usefixtures("broken_bwrap")
def test_code_exec_whose_sandbox_cannot_start_stops_with_the_cause():
    with pytest.raises(CanaryFailed) as caught:
        canary("code_exec", args={"sandbox": "bwrap"})
    text = str(caught.value)
    assert "'known-correct code'" in text and BWRAP_SAYS in text and "\n" not in text


def test_a_harness_that_never_started_is_named_with_its_stderr(monkeypatch):
    dead = CodeExecResult(
        score=0.0,
        total=2,
        exit_code=127,
        error="the process ended (exit code 127) after 0 of 2 tests",
        stderr_tail="env: 'python': No such file or directory\n",
    )
    monkeypatch.setattr(grade_mod, "run_code", lambda *args, **kwargs: dead)
    with pytest.raises(CanaryFailed) as caught:
        canary("code_exec")
    text = str(caught.value)
    assert "exit code 127" in text and "stderr: env: 'python': No such file or directory" in text


def test_a_check_error_is_a_canary_failure(monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("sandbox set-up failed")

    monkeypatch.setattr(grade_mod, "run_code", broken)
    with pytest.raises(CanaryFailed, match="the check errored: OSError: sandbox set-up failed"):
        canary("code_exec")


def test_examples_run_at_the_same_time(monkeypatch):
    """Two examples take about one check's time, not two."""
    import threading

    inside = threading.Barrier(2, timeout=5)

    def meets_the_other(answer, reference):
        inside.wait()  # raises BrokenBarrierError if the examples ran one after the other
        return float(answer == reference)

    monkeypatch.setitem(grade_mod.METRICS, "exact_match", meets_the_other)
    assert len(canary("exact_match")) == 2


def test_a_user_checker_without_examples_has_no_canary():
    def check(item, solution):
        return Passed()

    cfg = CheckerConfig(implementation="x:y")
    assert run_canary(cfg, lambda: check, Item) == []


def test_configured_examples_validate_their_items_and_check_both_verdict_and_score():
    def check(item, solution):
        return Passed(score=0.5) if solution == item.answer else Failed(reason="wrong")

    cfg = CheckerConfig(
        implementation="x:y",
        canary=[
            {"item": {"id": "c1", "question": "1 + 1", "answer": 2}, "solution": 2, "passed": True, "score": 0.5},
            {"name": "wrong", "item": {"id": "c2", "question": "1 + 1", "answer": 2}, "solution": 3, "passed": False},
        ],
    )
    graded = run_canary(cfg, lambda: check, Item)
    assert [example.name for example, _ in graded] == ["example 1", "wrong"]
    assert isinstance(graded[0][0].item, Item)

    cfg.canary[0].score = 1.0
    with pytest.raises(CanaryFailed, match="'example 1': expected PASSED with score 1, got PASSED with score 0.5"):
        run_canary(cfg, lambda: check, Item)

    cfg.canary[0].item = {"id": "c1", "question": "1 + 1"}
    with pytest.raises(ApeError, match="entry 1 .* is not a valid Item: 'answer': Field required"):
        run_canary(cfg, lambda: check, Item)


def test_a_canary_entry_must_expect_something():
    with pytest.raises(ValueError, match="set 'passed'"):
        CheckerConfig(implementation="x:y", canary=[{"item": {}, "solution": 1}])


# --- through the command line: exit 2, one line, no model call ------------------------------------

USER_CANARY = """
[[checker.canary]]
name = "two"
item = {{ id = "c1", question = "1 + 1", answer = 2 }}
solution = 2
passed = {passed}
"""


def _counted_model(folder: Path) -> str:
    return f'[model]\nname = "m"\nclass = "benchschema:Flaky"\nargs = {{ call_log = "{folder / "calls.log"}" }}\n'


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_failing_user_canary_stops_before_any_model_call(tmp_path, capsys, command):
    checker = 'implementation = "benchschema:check_strict"' + USER_CANARY.format(passed="false")
    config = make_benchmark(tmp_path, checker=checker, models=_counted_model(tmp_path))
    code = main([command, str(config), "--no-server"] if command == "run" else [command, str(config)])
    captured = capsys.readouterr()
    err = captured.err
    assert code == 2
    assert "ok:" not in captured.out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "checker 'benchschema:check_strict'" in lines[0]
    assert "'two': expected FAILED, got PASSED" in lines[0]
    assert not (tmp_path / "calls.log").exists()  # the model was never called
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_passing_user_canary_lets_the_run_go_on(tmp_path, capsys):
    checker = 'implementation = "benchschema:check_strict"' + USER_CANARY.format(passed="true")
    config = make_benchmark(tmp_path, n=3, checker=checker, models=_counted_model(tmp_path))
    code = main(["validate", str(config)])
    out = capsys.readouterr().out
    assert code == 0 and "canary: 1 known answer graded as expected" in out


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap for the sandbox kind under test")
def test_a_sandbox_that_cannot_start_stops_ape_run_with_exit_2(tmp_path, capsys, request):
    checker = 'implementation = "code_exec"\nargs = { tests_field = "question", sandbox = "bwrap" }'
    config = make_benchmark(tmp_path, checker=checker, models=_counted_model(tmp_path))
    request.getfixturevalue("broken_bwrap")  # after the benchmark folder exists
    code = main(["run", str(config), "--no-server"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "checker 'code_exec'" in err and "'known-correct code'" in err and BWRAP_SAYS in err
    assert not (tmp_path / "calls.log").exists()


def test_the_flow_grades_the_canary_itself_when_no_command_did(tmp_path):
    """A deployment starts the benchmark flow directly: the canary runs there, before any model."""
    from ape.config import load_config
    from ape.flows import benchmark as benchmark_mod

    checker = 'implementation = "benchschema:check_strict"' + USER_CANARY.format(passed="false")
    config = load_config(make_benchmark(tmp_path, checker=checker, models=_counted_model(tmp_path)))
    refused = benchmark_mod.run_benchmark(config)
    assert refused is not None and refused.is_failed()
    assert isinstance(refused.data, CanaryFailed) and "'two'" in str(refused.message)
    assert not (tmp_path / "calls.log").exists()  # no model was called


def test_taskspec_grades_a_code_task_and_a_text_task():
    from ape.schemas.taskspec import TaskSpec

    cfg = CheckerConfig(implementation="taskspec")
    graded = run_canary(cfg, checker_factory(cfg, Path(".")), TaskSpec)
    assert [(example.item.metric, result.status, result.score) for example, result in graded] == [
        ("code_exec", CheckStatus.PASSED, 1.0),
        ("code_exec", CheckStatus.FAILED, 0.0),
        ("exact_match", CheckStatus.PASSED, 1.0),
        ("exact_match", CheckStatus.FAILED, 0.0),
    ]


def test_a_deployment_run_with_a_failing_canary_ends_failed_before_any_model_call(tmp_path, prefect_server):
    """No command ran the canary: the benchmark flow does, and its state carries the one line."""
    from ape.config import load_config
    from ape.flows.benchmark import benchmark

    checker = 'implementation = "benchschema:check_strict"' + USER_CANARY.format(passed="false")
    config = load_config(make_benchmark(tmp_path, checker=checker, models=_counted_model(tmp_path)))
    state = benchmark(config, return_state=True)
    assert state.is_failed()
    assert isinstance(state.result(raise_on_failure=False), CanaryFailed)
    assert "'two': expected FAILED, got PASSED" in str(state.message)
    assert not (tmp_path / "calls.log").exists()
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_the_canary_grades_the_checker_preflight_resolved(tmp_path, monkeypatch):
    # what preflight built (the data model, the checker factory) is what the canary grades:
    # neither is resolved a second time for the same run
    from ape.config import load_config
    from ape.flows import preflight as preflight_module
    from ape.tasks.setup import model as model_setup
    from tests.helpers.runner import make_benchmark

    config = load_config(make_benchmark(tmp_path, n=3))
    checked = preflight_module.preflight(config)

    def not_again(*args, **kwargs):
        raise AssertionError("resolved again")

    monkeypatch.setattr(model_setup, "run_checker_factory", not_again)
    monkeypatch.setattr(model_setup, "load_data_model", not_again)
    graded = preflight_module.canary(config, checked)
    assert graded  # exact_match's known answers, graded by the preflight's checker
    with pytest.raises(AssertionError, match="resolved again"):
        preflight_module.canary(config)  # without it, the canary resolves them itself
