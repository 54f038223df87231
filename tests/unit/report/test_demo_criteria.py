"""The demo's clean-run criteria as pure functions, on hand-made sessions and envelopes."""

from __future__ import annotations

import pandas as pd
import pytest

from ape.schemas.report import CalibrationEntry, Envelope, ErrorDetail, LeaderboardRow
from ape.schemas.taskspec import TaskSpec
from ape.tasks.report.demo_criteria import (
    EXIT_CODES,
    Breach,
    Criterion,
    criteria_status,
    first_breach,
    ranking_breach,
    uncalibrated,
    unscored,
    with_criteria,
)

TASKS = [
    TaskSpec(id="t1", category="a", metric="exact_match", prompt="p", reference="1"),
    TaskSpec(id="t2", category="b", metric="f1", prompt="p", reference="two words"),
]
MODELS = ["good", "bad"]


def _session(model: str, task: TaskSpec, **changes) -> dict:
    row = {
        "model_id": model,
        "item_id": task.id,
        "outcome": "SOLVED",
        "error_type": None,
        "error_message": None,
        "check_status": "PASSED",
        "check_error_type": None,
        "check_error_message": None,
        "metric": task.metric,
        "check_score": 1.0,
    }
    return {**row, **changes}


def _sessions(*changed: tuple[str, str, dict]) -> pd.DataFrame:
    """Every (model, task) pair scored, except the given changes (model, task id, fields)."""
    edits = {(model, task_id): fields for model, task_id, fields in changed}
    rows = []
    for model in MODELS:
        for task in TASKS:
            fields = edits.get((model, task.id), {})
            if fields is not None:
                rows.append(_session(model, task, **fields))
    return pd.DataFrame(rows)


def _envelope(scores: dict[str, float] | None = None, calibration: dict | None = None) -> Envelope:
    scores = scores if scores is not None else {"good": 0.9, "bad": 0.2}
    ordered = sorted(scores, key=lambda m: -scores[m])
    board = [
        LeaderboardRow(rank=rank, model_id=m, n_items=2, n_sessions=2, runs_per_data=1, mean_score=scores[m])
        for rank, m in enumerate(ordered, start=1)
    ]
    if calibration is None:
        calibration = {m: CalibrationEntry(ece=0.1, brier=0.2, n=2) for m in MODELS}
    return Envelope(leaderboard=board, calibration=calibration)


def test_every_pair_scored_is_no_problem():
    assert unscored(TASKS, MODELS, _sessions()) == []


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (None, "no session was saved"),
        ({"outcome": "ERROR", "error_type": "Timeout", "error_message": "slow"}, "ended ERROR: Timeout: slow"),
        ({"outcome": "PARSING_FAILED"}, "the session ended PARSING_FAILED"),
        ({"check_status": "ERROR", "check_error_type": "KeyError", "check_error_message": "x"}, "raised KeyError: x"),
        ({"metric": "bleu4"}, "scored with 'bleu4' instead of 'f1'"),
        ({"check_score": float("nan")}, "the metric gave no score"),
    ],
)
def test_unscored_names_model_task_and_reason(fields, reason):
    problems = unscored(TASKS, MODELS, _sessions(("bad", "t2", fields)))
    assert len(problems) == 1
    assert problems[0]["model"] == "bad" and problems[0]["task"] == "t2"
    assert reason in problems[0]["reason"]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (None, "no calibration entry"),
        (CalibrationEntry(ece=0.1, brier=0.2, n=1, missing=1), "1 session(s) reported no confidence"),
        (CalibrationEntry(ece=0.1, brier=0.2, n=1), "calibrated 1 of 2 sessions"),
        (CalibrationEntry(ece=None, brier=0.2, n=2), "could not be computed"),
    ],
)
def test_uncalibrated_names_the_model_and_why(entry, reason):
    calibration = {"good": CalibrationEntry(ece=0.1, brier=0.2, n=2)}
    if entry is not None:
        calibration["bad"] = entry
    problems = uncalibrated(_envelope(calibration=calibration), MODELS, _sessions())
    assert [problem["model"] for problem in problems] == ["bad"]
    assert reason in problems[0]["reason"]


def test_ranking_holds_only_when_strictly_above():
    assert ranking_breach(_envelope(), "good", "bad") is None
    assert "is not strictly above" in ranking_breach(_envelope(), "bad", "good")
    tied = _envelope({"good": 0.5, "bad": 0.5})
    assert "is not strictly above" in ranking_breach(tied, "good", "bad")
    assert "not on the leaderboard" in ranking_breach(_envelope({"good": 0.9}), "good", "bad")


def test_first_breach_reports_the_first_broken_criterion_in_order():
    # scoring is checked before calibration and ranking, so it wins when all three break
    broken = _sessions(("bad", "t1", None))
    envelope = _envelope({"good": 0.1, "bad": 0.9}, calibration={})
    breach = first_breach(TASKS, MODELS, envelope, broken, ("good", "bad"))
    assert breach is not None and breach.criterion is Criterion.TASKS_SCORED
    breach = first_breach(TASKS, MODELS, envelope, _sessions(), ("good", "bad"))
    assert breach is not None and breach.criterion is Criterion.CALIBRATION
    breach = first_breach(TASKS, MODELS, _envelope({"good": 0.1, "bad": 0.9}), _sessions(), ("good", "bad"))
    assert breach is not None and breach.criterion is Criterion.RANKING
    assert first_breach(TASKS, MODELS, _envelope(), _sessions(), ("good", "bad")) is None


def test_first_breach_without_sessions_is_an_incomplete_run():
    breach = first_breach(TASKS, MODELS, _envelope(), None, ("good", "bad"))
    assert breach is not None and breach.criterion is Criterion.RUN_COMPLETED


def test_a_report_error_outside_calibration_is_an_incomplete_run():
    envelope = _envelope().model_copy(
        update={"error": ErrorDetail(type="OSError", message="disk full", details={"stage": "writing the report"})}
    )
    breach = first_breach(TASKS, MODELS, envelope, _sessions(), ("good", "bad"))
    assert breach is not None and breach.criterion is Criterion.RUN_COMPLETED
    assert "while writing the report: disk full" in breach.message


def test_criteria_status_marks_passed_failed_and_not_checked():
    assert set(criteria_status(None).values()) == {"passed"}
    status = criteria_status(Breach(criterion=Criterion.TASKS_SCORED, message="m"))
    assert status == {
        "tasks_validated": "passed",
        "run_completed": "passed",
        "tasks_scored": "failed",
        "calibration": "not checked",
        "ranking": "not checked",
    }


def test_with_criteria_writes_the_error_and_keeps_the_report_error():
    report_error = ErrorDetail(type="ValueError", message="bad bins", details={"stage": "calibration"})
    envelope = _envelope().model_copy(update={"error": report_error})
    breach = Breach(criterion=Criterion.CALIBRATION, message="calibration failed", problems=[{"model": "bad"}])
    marked = with_criteria(envelope, breach)
    assert marked.error is not None and marked.error.type == "CalibrationFailed"
    assert marked.error.details["exit_code"] == EXIT_CODES[Criterion.CALIBRATION] == 5
    assert marked.error.details["report_error"]["message"] == "bad bins"
    assert marked.summary.criteria["calibration"] == "failed"
    assert marked.leaderboard == envelope.leaderboard  # the computed parts stay


def test_with_criteria_of_a_clean_run_has_no_error():
    marked = with_criteria(_envelope(), None)
    assert marked.error is None and set(marked.summary.criteria.values()) == {"passed"}


def test_a_calibration_stage_failure_of_the_report_is_a_calibration_breach():
    envelope = Envelope.model_validate(
        {"error": {"type": "ValueError", "message": "confidence 2.0", "details": {"stage": "calibration"}}}
    )
    breach = first_breach(TASKS, MODELS, envelope, _sessions(), ("good", "bad"))
    assert breach is not None and breach.criterion is Criterion.CALIBRATION
    assert "confidence 2.0" in breach.message
