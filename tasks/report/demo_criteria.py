"""The eval demo's clean-run check: pure functions of the run's outputs.

After a demo run, :func:`first_breach` checks the criteria in :class:`Criterion` order against
the task specs, the saved sessions (``sessions.parquet`` as a DataFrame) and the report
envelope, and returns the first :class:`Breach`, or None for a clean run.
:func:`with_criteria` folds the check into the envelope that ``report.json`` holds.
Nothing here runs a model or touches a file, so every criterion is unit-tested on
hand-made frames (``tests/unit/report/test_demo_criteria.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import Enum
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ape.schemas.report import Envelope, ErrorDetail, Summary
from ape.schemas.taskspec import TaskSpec


class Criterion(str, Enum):
    """What a clean demo run needs, in the order it is checked."""

    TASKS_VALIDATED = "tasks_validated"
    RUN_COMPLETED = "run_completed"
    TASKS_SCORED = "tasks_scored"
    CALIBRATION = "calibration"
    RANKING = "ranking"


EXIT_CODES: dict[Criterion, int] = {
    Criterion.RUN_COMPLETED: 1,
    Criterion.TASKS_VALIDATED: 3,
    Criterion.TASKS_SCORED: 4,
    Criterion.CALIBRATION: 5,
    Criterion.RANKING: 6,
}
ERROR_TYPES: dict[Criterion, str] = {
    Criterion.RUN_COMPLETED: "RunFailed",
    Criterion.TASKS_VALIDATED: "TaskValidationFailed",
    Criterion.TASKS_SCORED: "TasksNotScored",
    Criterion.CALIBRATION: "CalibrationFailed",
    Criterion.RANKING: "RankingFailed",
}


class Breach(BaseModel):
    """One broken criterion: what broke and the (model, task) problems behind it."""

    model_config = ConfigDict(extra="forbid")

    criterion: Criterion
    message: str
    problems: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.criterion]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def unscored(tasks: Sequence[TaskSpec], model_ids: Sequence[str], sessions: pd.DataFrame) -> list[dict[str, Any]]:
    """Every (model, task) pair without a metric score, with the reason."""
    problems = []
    groups = {key: frame for key, frame in sessions.groupby(["model_id", "item_id"])}
    for model_id in model_ids:
        for task in tasks:
            rows = groups.get((model_id, task.id))
            reason = None
            if rows is None or rows.empty:
                reason = "no session was saved"
            else:
                for row in rows.to_dict("records"):
                    if row["outcome"] != "SOLVED":
                        error = "" if _missing(row["error_type"]) else f": {row['error_type']}: {row['error_message']}"
                        reason = f"the session ended {row['outcome']}{error}"
                    elif row["check_status"] not in ("PASSED", "FAILED"):
                        reason = f"the checker raised {row['check_error_type']}: {row['check_error_message']}"
                    elif row["metric"] != task.metric:
                        reason = f"scored with '{row['metric']}' instead of '{task.metric}'"
                    elif _missing(row["check_score"]):
                        reason = "the metric gave no score"
                    if reason:
                        break
            if reason:
                problems.append({"model": model_id, "task": task.id, "reason": reason})
    return problems


def uncalibrated(envelope: Envelope, model_ids: Sequence[str], sessions: pd.DataFrame) -> list[dict[str, Any]]:
    """Models whose calibration is missing, partial (sessions without confidence) or empty."""
    problems = []
    counts = sessions.groupby("model_id").size().to_dict() if len(sessions) else {}
    for model_id in model_ids:
        entry = envelope.calibration.get(model_id)
        if entry is None:
            reason = "no calibration entry"
        elif entry.missing:
            reason = f"{entry.missing} session(s) reported no confidence"
        elif entry.n != counts.get(model_id, 0):
            reason = f"calibrated {entry.n} of {counts.get(model_id, 0)} sessions"
        elif entry.ece is None or entry.brier is None:
            reason = "ECE or Brier score could not be computed"
        else:
            continue
        problems.append({"model": model_id, "reason": reason})
    return problems


def ranking_breach(envelope: Envelope, better: str, worse: str) -> str | None:
    """Why ``better`` is not ranked strictly above ``worse`` (rank and mean score), or None."""
    rows = {row.model_id: row for row in envelope.leaderboard}
    absent = [m for m in (better, worse) if m not in rows]
    if absent:
        return f"model(s) {absent} are not on the leaderboard ({', '.join(rows) or 'empty'})"
    top, bottom = rows[better], rows[worse]
    if top.mean_score is None or bottom.mean_score is None:
        return f"'{better}' or '{worse}' has no mean score"
    if top.rank < bottom.rank and top.mean_score > bottom.mean_score:
        return None
    return (
        f"'{better}' (rank {top.rank}, mean score {top.mean_score:.3f}) is not strictly above "
        f"'{worse}' (rank {bottom.rank}, mean score {bottom.mean_score:.3f})"
    )


def first_breach(
    tasks: Sequence[TaskSpec],
    model_ids: Sequence[str],
    envelope: Envelope,
    sessions: pd.DataFrame | None,
    outrank: tuple[str, str],
) -> Breach | None:
    """The first broken criterion after the run, or None for a clean run."""
    report_error = envelope.error
    details = report_error.details if report_error is not None else None
    stage = details.get("stage") if isinstance(details, dict) else None
    if sessions is None:
        message = report_error.message if report_error else "no sessions were saved"
        return Breach(criterion=Criterion.RUN_COMPLETED, message=f"the report could not read the results: {message}")
    problems = unscored(tasks, model_ids, sessions)
    if problems:
        return Breach(
            criterion=Criterion.TASKS_SCORED,
            problems=problems,
            message=f"{len(problems)} (model, task) pair(s) have no metric score",
        )
    if report_error is not None and stage == "calibration":
        return Breach(
            criterion=Criterion.CALIBRATION, message=f"calibration failed: {report_error.type}: {report_error.message}"
        )
    problems = uncalibrated(envelope, model_ids, sessions)
    if problems:
        return Breach(
            criterion=Criterion.CALIBRATION,
            problems=problems,
            message=f"calibration is incomplete for {len(problems)} model(s)",
        )
    if report_error is not None:
        return Breach(
            criterion=Criterion.RUN_COMPLETED, message=f"the report failed while {stage}: {report_error.message}"
        )
    reason = ranking_breach(envelope, *outrank)
    if reason:
        return Breach(criterion=Criterion.RANKING, message=reason)
    return None


def criteria_status(breach: Breach | None) -> dict[str, str]:
    """Each criterion's state after a run: passed, failed (the breach) or not checked."""
    order = list(Criterion)
    status = {}
    for criterion in order:
        if breach is None or order.index(criterion) < order.index(breach.criterion):
            status[criterion.value] = "passed"
        elif criterion is breach.criterion:
            status[criterion.value] = "failed"
        else:
            status[criterion.value] = "not checked"
    return status


def with_criteria(envelope: Envelope, breach: Breach | None) -> Envelope:
    """The envelope with the criteria check: ``summary.criteria`` always, and for a broken
    criterion an ``error`` naming it, its exit code and problems (any report error the
    run had is kept in the details)."""
    summary = Summary(**{**envelope.summary.model_dump(), "criteria": criteria_status(breach)})
    if breach is None:
        return envelope.model_copy(update={"summary": summary})
    details: dict[str, Any] = {
        "criterion": breach.criterion.value,
        "exit_code": breach.exit_code,
        "problems": breach.problems,
    }
    if envelope.error is not None:
        details["report_error"] = envelope.error.model_dump(mode="json")
    return envelope.model_copy(
        update={
            "summary": summary,
            "error": ErrorDetail(type=ERROR_TYPES[breach.criterion], message=breach.message, details=details),
        }
    )
