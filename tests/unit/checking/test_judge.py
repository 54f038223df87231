"""The judge checker: strict grades, reformat retries, failures as check errors, its cache and fingerprint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from ape.schemas.check import Failed, Passed
from ape.schemas.config import ApeConfig, ModelConfig, SolverConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import CheckStatus
from ape.tasks.checking.check import run_check
from ape.tasks.checking.judge import (
    JudgeChecker,
    checker_fingerprint,
    judge_factory,
    parse_args,
    parse_grade,
    parse_scale,
)
from tests.helpers import mock_calls


class Item(BaseModel):
    id: str
    question: str
    reference: str


ITEM = Item(id="q1", question="Why is the sky blue?", reference="rayleigh scattering")
RUBRIC = (
    "Q: {{ question }}\nReference: <reference>{{ reference }}</reference>\nAnswer: <solution>{{ solution }}</solution>"
)


def judge(
    tmp_path: Path,
    responses: list[str] | None = None,
    *,
    scale: str = "pass/fail",
    attempts: int = 2,
    cache: bool = True,
    name: str = "j",
    **model: object,
) -> JudgeChecker:
    args = model.pop("args", None) or {"behaviour": "scripted", "responses": responses}
    cfg = ModelConfig(name=name, provider="mock", args=args, max_retries=0, **model)  # type: ignore[arg-type]
    parsed = parse_args({"rubric": RUBRIC, "scale": scale, "reference_field": "reference"})
    solver = SolverConfig(solution_adaption_attempts=attempts)
    return JudgeChecker(cfg, parsed, RUBRIC, solver, tmp_path, tmp_path / ".cache" if cache else None)


def test_parse_grade_is_strict():
    pf, five = parse_scale("pass/fail"), parse_scale("0-5")
    assert parse_grade("The answer names the key fact.\nGRADE: PASS", pf) == "PASS"
    assert parse_grade("**GRADE:** fail", pf) == "FAIL"
    assert parse_grade("reasoning\nGRADE: 4", five) == "4"
    assert five.score("4") == pytest.approx(0.8)
    for bad, scale, words in [
        ("PASS", pf, "no 'GRADE: ...' line"),
        ("GRADE: PASS\nGRADE: FAIL", pf, "several grades"),
        ("GRADE: 6", five, "not a grade on the 0-5 scale"),
        ("GRADE: 2.5", five, "not a grade on the 0-5 scale"),
        ("GRADE: maybe", pf, "not a grade on the pass/fail scale"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_grade(bad, scale)
    with pytest.raises(ValueError, match="not a scale"):
        parse_scale("1-5")


def test_a_scripted_judge_gives_the_expected_grades_and_records_them(tmp_path):
    checker = judge(tmp_path, ["Looks right.\nGRADE: PASS", "GRADE: FAIL"])
    first = checker(ITEM, "Rayleigh scattering of sunlight")
    second = checker(ITEM, "It reflects the sea")
    assert isinstance(first, Passed) and first.score == 1.0
    assert isinstance(second, Failed) and second.score == 0.0 and "FAIL" in (second.reason or "")
    verdict = first.metadata["judge"]
    assert verdict["grade"] == "PASS" and verdict["attempts"] == 1 and verdict["cached"] is False
    # the solution reaches the judge verbatim, inside the boundary (ape.tasks.checking.injection)
    assert re.search(
        r"<solution><<<SOLUTION-([A-Z]{16})>>>\nRayleigh scattering of sunlight\n<<<END-SOLUTION-\1>>></solution>",
        verdict["prompt"],
    )
    assert "rayleigh scattering" in verdict["prompt"] and "GRADE: PASS or GRADE: FAIL" in verdict["prompt"]
    assert verdict["answer"] == "Looks right.\nGRADE: PASS"
    assert verdict["input_tokens"] > 0 and verdict["output_tokens"] == 4
    assert second.metadata["expected"] == "rayleigh scattering"
    assert first.metadata["metric"] == "judge"


def test_an_unparsable_grade_gets_the_reformat_retries_then_is_a_check_error(tmp_path):
    checker = judge(tmp_path, ["It is fine, I guess.", "GRADE: 3"], scale="0-4", attempts=2)
    verdict = checker(ITEM, "scattering")
    assert verdict.score == pytest.approx(0.75) and isinstance(verdict, Passed)
    assert verdict.metadata["judge"]["attempts"] == 2
    assert verdict.metadata["judge"]["answer"] == "GRADE: 3"

    stubborn = judge(tmp_path, ["no idea", "still no idea"], attempts=2, name="stubborn")
    result = run_check(stubborn, ITEM, "scattering")
    assert result.status is CheckStatus.ERROR and result.score is None
    assert result.error is not None and result.error.type == "JudgeError"
    assert "no parsable grade in 2 attempt(s)" in result.error.message


def test_a_failing_judge_is_a_check_error_never_a_score(tmp_path):
    # the mock fails every call like a dropped connection; with no retries left it is an error
    broken = judge(tmp_path, args={"behaviour": "grader", "transient_failures": 5}, name="down")
    result = run_check(broken, ITEM, "rayleigh scattering")
    assert result.status is CheckStatus.ERROR and result.score is None
    assert result.error is not None and "judge 'down' failed" in result.error.message
    assert "simulated dropped connection" in result.error.message
    assert not list((tmp_path / ".cache").rglob("*.json")), "a failed judgement must not be cached"


def test_judgements_are_cached_under_the_judge_fingerprint(tmp_path):
    mock_calls.reset()
    first = judge(tmp_path, args={"behaviour": "grader"}, name="grader-a")
    assert first(ITEM, "Rayleigh scattering").metadata["judge"]["cached"] is False
    again = judge(tmp_path, args={"behaviour": "grader"}, name="grader-a")
    verdict = again(ITEM, "Rayleigh scattering").metadata["judge"]
    assert verdict["cached"] is True and verdict["grade"] == "PASS"
    assert mock_calls.chat_calls("grader-a") == 1
    # another judge fingerprint is another key
    other = JudgeChecker(
        again.model_cfg,
        again.args,
        again.rubric,
        again.settings,
        tmp_path,
        tmp_path / ".cache",
        fingerprint={"model": "something else"},
    )
    assert other(ITEM, "Rayleigh scattering").metadata["judge"]["cached"] is False
    assert mock_calls.chat_calls("grader-a") == 2
    uncached = judge(tmp_path, args={"behaviour": "grader"}, name="grader-a", cache=False)
    assert uncached(ITEM, "Rayleigh scattering").metadata["judge"]["cached"] is False


def test_mock_grader_passes_answers_with_every_reference_word(tmp_path):
    checker = judge(tmp_path, args={"behaviour": "grader"}, cache=False)
    assert isinstance(checker(ITEM, "It is Rayleigh scattering."), Passed)
    assert isinstance(checker(ITEM, "Scattering of light."), Failed)
    graded = judge(tmp_path, args={"behaviour": "grader", "scale": 4}, scale="0-4", cache=False)
    assert graded(ITEM, "Scattering of light.").score == pytest.approx(0.5)


def _config(tmp_path: Path, rubric: str = RUBRIC, judge: object = "j", **args: object) -> ApeConfig:
    (tmp_path / "rubric.mustache").write_text(rubric)
    return ApeConfig.model_validate(
        {
            "data": {"file": str(tmp_path / "d.jsonl"), "schema": "x:Item"},
            "prompt": {"template": "{{ question }}"},
            "model": [{"name": "solver", "provider": "mock"}, {"name": "j", "provider": "mock", "model": "grader"}],
            "checker": {
                "implementation": "judge",
                "judge": judge,
                "args": {"rubric_file": "rubric.mustache", "reference_field": "reference", **args},
            },
            "base_dir": str(tmp_path),
        }
    )


def test_the_judge_is_part_of_the_checker_fingerprint(tmp_path):
    base = checker_fingerprint(_config(tmp_path))
    assert base == checker_fingerprint(_config(tmp_path))
    changed_rubric = checker_fingerprint(_config(tmp_path, rubric=RUBRIC + "\nBe strict."))
    own_block = checker_fingerprint(_config(tmp_path, judge={"provider": "mock", "model": "echo"}))
    scale = checker_fingerprint(_config(tmp_path, scale="0-3"))
    assert len({str(x) for x in (base, changed_rubric, own_block, scale)}) == 4
    # the rubric file's content, not only its name, is in it
    assert base["judge_fingerprint"]["rubric_sha256"] != changed_rubric["judge_fingerprint"]["rubric_sha256"]


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ApeError, match="no \\[\\[model\\]\\] is named 'jj'") as info:
        judge_factory(_config(tmp_path, judge="jj"), Item, None)
    assert "did you mean 'j'" in str(info.value.hint)
    with pytest.raises(ApeError, match="'rubirc'") as info:
        parse_args({"rubirc": "x"})
    assert info.value.where == "[checker] args"
    with pytest.raises(ApeError, match="rubric variable '\\{\\{ answer \\}\\}'"):
        judge_factory(_config(tmp_path, rubric="{{ answer }}"), Item, None)
    with pytest.raises(ApeError, match="needs a judge model"):
        judge_factory(_config(tmp_path, judge=None), Item, None)
    with pytest.raises(ApeError, match="cannot use provider 'llama-cpp'"):
        judge_factory(_config(tmp_path, judge={"provider": "llama-cpp"}), Item, None)


def test_a_cut_judge_answer_is_no_verdict_and_is_asked_again_grade_first(tmp_path):
    # the mock cuts answers longer than 6 words (finish_reason "length"): the first answer's
    # reasoning runs past it, with the grade still to come; asked again, it grades first
    long = "The answer names Rayleigh scattering, which is what the reference says, so GRADE: PASS"
    checker = judge(tmp_path, args={"behaviour": "scripted", "responses": [long, "GRADE: FAIL"], "max_tokens": 6})
    verdict = checker(ITEM, "rayleigh scattering")
    assert isinstance(verdict, Failed) and verdict.score == 0.0  # the finished verdict, not the cut one
    graded = verdict.metadata["judge"]
    assert graded["cut_retries"] == 1 and graded["answer"] == "GRADE: FAIL"
    assert graded["output_tokens"] == 6 + 2  # the cut answer was paid for too
    assert graded["prompt"] == checker.prompt(ITEM, "rayleigh scattering")  # cached under the original prompt


def test_a_judge_cut_every_time_is_a_counted_check_error_never_a_grade(tmp_path):
    # truncate = 1.0: every answer is cut to half its words, its GRADE line included or not
    cut = judge(tmp_path, args={"behaviour": "grader", "truncate": 1.0}, name="terse")
    result = run_check(cut, ITEM, "rayleigh scattering")
    assert result.status is CheckStatus.ERROR and result.score is None
    assert result.error is not None and result.error.type == "JudgeTruncated"
    assert "cut at its token limit (stop reason length) before a verdict, 2 time(s)" in result.error.message
    assert "raise the judge's [model] max_tokens" in result.error.message
    assert not list((tmp_path / ".cache").rglob("*.json")), "a cut judgement must not be cached"
    # fixed budget: the same check is asked again (ape retry re-grades check errors) and grades
    fixed = judge(tmp_path, args={"behaviour": "grader"}, name="terse")
    assert run_check(fixed, ITEM, "rayleigh scattering").status is CheckStatus.PASSED
