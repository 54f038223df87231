"""The seed-3 eval-runner demo, on the same pipeline as ``ape run``.

:func:`run_eval` turns ModelAdapter objects and task specs into an ordinary
:class:`ape.schemas.config.ApeConfig` (task specs as the data, the adapters as
``[[model]]`` entries, :class:`ape.tasks.taskspec.TaskSpecChecker` as the checker)
and runs the :func:`ape.flows.benchmark.benchmark` flow, so the demo exercises
exactly what users run. ``examples/demo/config.toml`` is the same config as a
file (``ape run examples/demo/config.toml``).

:func:`run_demo` adds seed 3's clean-run verdict on top. Its criteria are
checked in this order; the first that breaks decides the exit code, and
``report.json`` then carries a structured ``error`` (type, message, and
details with the criterion, the exit code and the problems found):

====  =======================  ==================================================
code  criterion                broken when
====  =======================  ==================================================
0     (clean run)              every criterion below holds
1     ``run_completed``        the flow or the report crashed (a runtime failure)
3     ``tasks_validated``      a task spec fails validation
4     ``tasks_scored``         a (model, task) pair has no metric score
5     ``calibration``          a model's calibration could not be aggregated
6     ``ranking``              the rule-based model is not strictly above random
====  =======================  ==================================================

(2 stays the command line's code for bad input such as a bad ``--out``.)
"""

from __future__ import annotations

import importlib.resources
import logging
import math
import sys
import tempfile
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.schemas.models import ModelAdapter
from ape.schemas.report import Envelope, Summary
from ape.schemas.taskspec import TASK_TEMPLATE, TaskSpec
from ape.tasks.taskspec import check_unique, load_tasks, validate_task, write_tasks

log = logging.getLogger("ape")

DEMO_DIR = Path(str(importlib.resources.files("ape.examples") / "demo"))  # package data
DEMO_TASKS = DEMO_DIR / "tasks.jsonl"
TASKS_FILE = "tasks.jsonl"
CHECKER = "taskspec"
MAX_WORKERS = 8
WALL_BUDGET_S = 10.0
NO_SERVER_ENV = "APE_NO_SERVER"


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


class DemoResult(BaseModel):
    """The demo's verdict and the envelope written to ``report.json``."""

    model_config = ConfigDict(extra="forbid")

    envelope: Envelope
    breach: Breach | None = None
    report: Path

    @property
    def exit_code(self) -> int:
        return 0 if self.breach is None else self.breach.exit_code


# ---------------------------------------------------------------- the run (same pipeline)


def as_tasks(tasks: Path | str | Iterable[TaskSpec | dict[str, Any]]) -> list[TaskSpec]:
    """Task specs from a JSONL path or objects; ApeError naming the task and field if invalid."""
    if isinstance(tasks, (str, Path)):
        return load_tasks(Path(tasks))
    return check_unique((validate_task(row, f"tasks[{index}]") for index, row in enumerate(tasks)), "tasks")


def workers_for(task_count: int, parallel: bool) -> int:
    """min(8, task count) solver workers in parallel; one (a fixed order) otherwise."""
    return max(1, min(MAX_WORKERS, task_count)) if parallel else 1


def demo_config(
    model_entries: list[dict[str, Any]],
    tasks_file: Path,
    out: Path,
    *,
    workers: int,
    name: str = "demo",
) -> ApeConfig:
    """The task-spec benchmark as an ApeConfig: what ``examples/demo/config.toml`` says."""
    return ApeConfig.model_validate({
        "name": name,
        "data": {"file": str(tasks_file), "schema": "taskspec",
                 "category_field": "category"},
        "prompt": {"template": TASK_TEMPLATE},
        "model": model_entries,
        "adapter": {"implementation": "raw"},
        "checker": {"implementation": CHECKER},
        # A demo run starts afresh and caches nothing: it measures the evaluation itself.
        "run": {"solver_workers": workers, "output": str(out), "load_save": False,
                "cache": False, "fail_on_error": True},
        "cli": {"progress": False},
        "base_dir": str(DEMO_DIR),
    })  # fmt: skip


def _stale_report(out: Path) -> None:
    """A report left by an earlier run must not pass for this run's."""
    for name in ("report.json", "sessions.parquet", "leaderboard.md"):
        (out / name).unlink(missing_ok=True)


def run_eval(
    adapters: Sequence[ModelAdapter],
    tasks: Path | str | Iterable[TaskSpec | dict[str, Any]],
    parallel: bool = True,
    *,
    out: Path | None = None,
    name: str = "demo",
) -> Envelope:
    """Evaluate every adapter on every task through the benchmark flow; return the envelope.

    ``parallel=False`` runs one solver worker, so tasks go in file order (for
    deterministic tests); otherwise min(8, task count) workers run per model. Tasks are
    written to ``out/tasks.jsonl`` (``out`` defaults to a new temporary folder) and every
    output of an ``ape run`` lands in ``out``. Items whose session errored do not stop
    the run: the envelope is returned and the flow run ends Failed, as for ``ape run``.
    Raises ApeError for bad tasks or adapters, and whatever crashed the flow otherwise.
    """
    from ape.flows.benchmark import benchmark
    from ape.flows.states import items_failed
    from ape.tasks.model_adapters import model_entry, unregister_adapter

    specs = as_tasks(tasks)
    if not adapters:
        raise ApeError("no adapters to evaluate", where="adapters", hint="pass at least one")
    ids = [adapter.model_id for adapter in adapters]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ApeError(f"model ids must be unique, repeated: {repeated}", where="adapters")
    out = Path(out if out is not None else tempfile.mkdtemp(prefix="ape-eval-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    _stale_report(out)
    tasks_file = write_tasks(specs, out / TASKS_FILE)
    keys: list[str] = []
    try:
        entries = []
        for adapter in adapters:
            entry, key = model_entry(adapter)
            entries.append(entry)
            if key is not None:
                keys.append(key)
        config = demo_config(entries, tasks_file, out, workers=workers_for(len(specs), parallel), name=name)
        state = benchmark(config, return_state=True)
    finally:
        for key in keys:
            unregister_adapter(key)
    failed = items_failed(state)
    if failed is not None:
        log.warning("%s", failed)
    report = out / "report.json"
    if not report.is_file():
        raise RuntimeError(f"the benchmark flow wrote no report ({report})")
    return Envelope.model_validate_json(report.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the clean-run criteria


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


def judge(
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


# ---------------------------------------------------------------- the demo


def _criteria_status(breach: Breach | None) -> dict[str, str]:
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


def finish(envelope: Envelope, breach: Breach | None, out: Path) -> DemoResult:
    """Write the verdict into the envelope (summary.criteria, and error when broken)."""
    from ape.tasks.envelope import error_envelope, write_envelope
    from ape.tasks.markdown import markdown_table

    summary = Summary(**{**envelope.summary.model_dump(), "criteria": _criteria_status(breach)})
    if breach is not None:
        details: dict[str, Any] = {
            "criterion": breach.criterion.value,
            "exit_code": breach.exit_code,
            "problems": breach.problems,
        }
        if envelope.error is not None:
            details["report_error"] = envelope.error.model_dump(mode="json")
        envelope = error_envelope(
            ERROR_TYPES[breach.criterion],
            breach.message,
            details,
            leaderboard=envelope.leaderboard,
            pairwise=envelope.pairwise,
            calibration=envelope.calibration,
            summary=summary,
        )
    else:
        envelope = envelope.model_copy(update={"summary": summary})
    report = write_envelope(out / "report.json", envelope)
    (out / "leaderboard.md").write_text(markdown_table(envelope), encoding="utf-8")
    return DemoResult(envelope=envelope, breach=breach, report=report)


def _read_sessions(out: Path) -> pd.DataFrame | None:
    path = out / "sessions.parquet"
    if not path.is_file():
        return None
    return pd.read_parquet(path)


def run_demo(
    out: Path,
    parallel: bool = True,
    *,
    tasks_file: Path | None = None,
    adapters: Sequence[ModelAdapter] | None = None,
    outrank: tuple[str, str] = ("rule-based", "random"),
) -> DemoResult:
    """Run the adapters (default: the four mocks) over the fixture and judge the run.

    ``outrank`` names the model that must rank strictly above the other. Never raises
    for a broken criterion: the verdict is in the result and in ``out/report.json``.
    """
    from ape.tasks.model_adapters import demo_adapters

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    line_up: list[ModelAdapter] = list(adapters if adapters is not None else demo_adapters())
    try:
        tasks = load_tasks(tasks_file or DEMO_TASKS)
    except ApeError as exc:
        _stale_report(out)
        breach = Breach(
            criterion=Criterion.TASKS_VALIDATED,
            message=str(exc),
            problems=[{"where": exc.where, "error": exc.message, "hint": exc.hint}],
        )
        return finish(Envelope(), breach, out)
    try:
        envelope = run_eval(line_up, tasks, parallel, out=out)
    except Exception as exc:
        log.debug("demo run failed", exc_info=True)
        breach = Breach(
            criterion=Criterion.RUN_COMPLETED,
            message=f"{type(exc).__name__}: {exc}",
            problems=[{"type": type(exc).__name__, "error": str(exc)}],
        )
        return finish(Envelope(), breach, out)
    model_ids = [adapter.model_id for adapter in line_up]
    verdict = judge(tasks, model_ids, envelope, _read_sessions(out), outrank)
    return finish(envelope, verdict, out)


def demo_exit(
    out: Path,
    parallel: bool = True,
    *,
    tasks_file: Path | None = None,
    adapters: Sequence[ModelAdapter] | None = None,
    outrank: tuple[str, str] = ("rule-based", "random"),
) -> int:
    """Run the demo, print the markdown table and the verdict, return the exit code
    (module docstring) against whatever Prefect API is configured."""
    from ape.tasks.markdown import markdown_table

    result = run_demo(out, parallel, tasks_file=tasks_file, adapters=adapters, outrank=outrank)
    print(markdown_table(result.envelope))
    wall = result.envelope.summary.wall_seconds
    if wall is not None and wall > WALL_BUDGET_S:
        log.warning("the evaluation took %.1f s, over the %.0f s budget", wall, WALL_BUDGET_S)
    if result.breach is not None:
        print(
            f"error: demo criterion '{result.breach.criterion.value}' failed: "
            f"{result.breach.message} (exit code {result.exit_code}; details in {result.report})",
            file=sys.stderr,
        )
    else:
        log.info("clean run; report in %s", result.report)
    return result.exit_code
