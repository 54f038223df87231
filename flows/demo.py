"""The eval demo, on the same pipeline as ``ape run``.

:func:`run_eval` turns ModelAdapter objects and task specs into an ordinary
:class:`ape.schemas.config.ApeConfig` (task specs as the data, the adapters as
``[[model]]`` entries, :class:`ape.tasks.checking.taskspec.TaskSpecChecker` as the checker)
and runs the :func:`ape.flows.benchmark.benchmark` flow, so the demo exercises
exactly what users run. ``examples/demo/config.toml`` is the same config as a
file (``ape run examples/demo/config.toml``).

:func:`run_demo` adds the demo's clean-run check (:mod:`ape.tasks.report.demo_criteria`). Its criteria are
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
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from ape.flows.benchmark import benchmark
from ape.flows.states import items_failed
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.schemas.models import ModelAdapter
from ape.schemas.report import Envelope
from ape.schemas.taskspec import TASK_TEMPLATE, TaskSpec
from ape.tasks.checking.taskspec import check_unique, load_tasks, validate_task, write_tasks
from ape.tasks.models.mocks.demo_adapters import demo_adapters, model_entry, unregister_adapter
from ape.tasks.report.demo_criteria import Breach, Criterion, first_breach, with_criteria
from ape.tasks.report.envelope import write_envelope
from ape.tasks.report.markdown import markdown_table

log = logging.getLogger("ape")

DEMO_DIR = Path(str(importlib.resources.files("ape.examples") / "demo"))  # package data
DEMO_TASKS = DEMO_DIR / "tasks.jsonl"
TASKS_FILE = "tasks.jsonl"
CHECKER = "taskspec"
MAX_WORKERS = 8
WALL_BUDGET_S = 10.0
NO_SERVER_ENV = "APE_NO_SERVER"


class DemoResult(BaseModel):
    """The demo's criteria check and the envelope written to ``report.json``."""

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
    return ApeConfig.model_validate(
        {
            "name": name,
            "data": {"file": str(tasks_file), "schema": "taskspec", "category_field": "category"},
            "prompt": {"template": TASK_TEMPLATE},
            "model": model_entries,
            "adapter": {"implementation": "raw"},
            "checker": {"implementation": CHECKER},
            # A demo run starts afresh and caches nothing: it measures the evaluation itself.
            "run": {
                "solver_workers": workers,
                "output": str(out),
                "load_save": False,
                "cache": False,
                "fail_on_error": True,
            },
            "cli": {"progress": False},
            "base_dir": str(DEMO_DIR),
        }
    )


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
    written to ``out/tasks.jsonl`` and every output of an ``ape run`` lands in ``out``;
    without ``out`` they go to a temporary folder that is removed before this returns
    (the envelope is all that is kept; pass ``out`` to keep the files). Items whose session errored do not stop
    the run: the envelope is returned and the flow run ends Failed, as for ``ape run``.
    Raises ApeError for bad tasks or adapters, and whatever crashed the flow otherwise.
    """

    specs = as_tasks(tasks)
    if not adapters:
        raise ApeError("no adapters to evaluate", where="adapters", hint="pass at least one")
    ids = [adapter.model_id for adapter in adapters]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ApeError(f"model ids must be unique, repeated: {repeated}", where="adapters")
    if out is None:  # the caller keeps only the envelope: leave no folder behind
        with tempfile.TemporaryDirectory(prefix="ape-eval-") as scratch:
            return run_eval(adapters, specs, parallel, out=Path(scratch), name=name)
    out = Path(out).resolve()
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


# ---------------------------------------------------------------- the demo


def finish(envelope: Envelope, breach: Breach | None, out: Path) -> DemoResult:
    """Write the criteria check into the envelope (summary.criteria, and error when broken)."""

    envelope = with_criteria(envelope, breach)
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
    """Run the adapters (default: the four mocks) over the fixture and check the run's criteria.

    ``outrank`` names the model that must rank strictly above the other. Never raises
    for a broken criterion: the broken criterion is in the result and in ``out/report.json``.
    """

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
    return finish(envelope, first_breach(tasks, model_ids, envelope, _read_sessions(out), outrank), out)
