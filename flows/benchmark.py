"""The benchmark flow: every configured model (one evaluate subflow each), then the report.

This is the flow users run (``ape run``), deploy (``ape serve``) and retry in
the Prefect UI. It takes the whole config as one pydantic parameter, so a
deployment's run form shows every setting. The report is built even when some
items errored; the flow run then ends Failed so that a retry redoes only those.
Runs of a deployment (and ``new_run=True``) are new runs in ``OUTPUT/runs/<run id>``
that, once finished, join the run history and are compared with earlier runs
(``ape.tasks.storage.runs``, ``ape.flows.recurring``, ``ape.flows.alerts``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.states import Failed

from ape.flows.evaluate import ItemsFailed, dask_task_runner, evaluate
from ape.flows.logs import run_logs
from ape.flows.progress import RUN_ERROR_LINES
from ape.flows.run_plan import run_label
from ape.flows.states import items_failed
from ape.schemas.config import ApeConfig
from ape.schemas.report import Envelope
from ape.tasks.storage.runs import IN_PLACE, RunInfo, config_for_run, finish_run, start_run

log = logging.getLogger("ape")


class ResultsSuspect(ItemsFailed):
    """Every item ran, but a model's results share one non-answer signature (``ape.tasks.report.health``)
    and ``[run] accept_unhealthy`` is off: the report exists, its numbers measured nothing."""


def _run_name() -> str:
    from prefect.runtime import flow_run

    return run_label(flow_run.parameters.get("config")) or "benchmark"


@task(name="report", task_run_name="report[{config.name}]", cache_policy=NO_CACHE, persist_result=False)
def report_task(config: ApeConfig, wall_seconds: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Leaderboard, pairwise comparison and calibration from the saved results (no model calls)."""
    from ape.tasks.report.build import build_report
    from ape.tasks.report.markdown import markdown_table

    files = [config.output_dir_for(m) / config.run.save_file for m in config.model]
    envelope = build_report(
        [f for f in files if f.exists()],
        config.run.output,
        wall_seconds=wall_seconds,
        extra_summary={"benchmark": config.name, **(extra or {})},
        health_share=config.run.health_share,
        health_min_sessions=config.run.health_min_sessions,
    )
    table = markdown_table(envelope)
    try:
        from prefect.artifacts import create_markdown_artifact

        key = "".join(c if c.isalnum() else "-" for c in config.name.lower()).strip("-") or "benchmark"
        create_markdown_artifact(
            markdown=f"# {config.name}: leaderboard\n\n{table}", key=f"{key}-leaderboard", description="APE leaderboard"
        )
        create_markdown_artifact(
            markdown=_calibration_markdown(envelope), key=f"{key}-calibration", description="APE calibration"
        )
    except Exception as exc:  # no API available: the files are the report
        log.debug("artifacts unavailable: %s", exc)
    return envelope.model_dump(mode="json")


def _calibration_markdown(envelope: Envelope) -> str:
    from ape.tasks.report.markdown import calibration_table

    return "\n".join(["# Calibration", "", *calibration_table(envelope)])


@task(name="record-run", task_run_name="record-run[{info.run_id}]", cache_policy=NO_CACHE, persist_result=False)
def record_task(config: ApeConfig, top: Path, info: RunInfo, envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """History entry, comparisons with the previous run and the baseline, ``latest``, alerts."""
    from ape.flows.alerts import publish
    from ape.flows.recurring import explain_moves, flagged_items, record_run
    from ape.schemas.report import Envelope
    from ape.tasks.report.envelope import write_envelope
    from ape.tasks.report.markdown import markdown_table

    report = Envelope.model_validate(envelope)
    rows = explain_moves(config, top, info, record_run(config, top, info, report))
    summary = report.summary.model_copy(update={"flagged_items": flagged_items(top)})
    report = report.model_copy(update={"regressions": rows, "summary": summary})
    write_envelope(config.run.output / "report.json", report)
    (config.run.output / "leaderboard.md").write_text(markdown_table(report), encoding="utf-8")
    finish_run(top, info)
    publish(config, top, info.run_id, rows)
    return [row.model_dump(mode="json") for row in rows]


@task(name="judge-calibration", cache_policy=NO_CACHE, persist_result=False)
def calibrate_judge(config: ApeConfig) -> None:
    """A judge checker with a calibration file grades it before any model runs
    (``ape.tasks.checking.judge_labels``); the report compares it with the people's grades."""
    from ape.flows.run_plan import load_data_model
    from ape.tasks.checking.judge_labels import calibrate

    calibrate(config, load_data_model(config))


@flow(name="benchmark", flow_run_name=_run_name, persist_result=False)
def benchmark(
    config: ApeConfig,
    redo_outcomes: list[str] | None = None,
    only_models: list[str] | None = None,
    new_run: bool | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Evaluate every model of ``config`` and write the report into its output folder.

    Returns the run's summary (a dict), or a Failed state: items errored, the canary
    failed (``ape.tasks.checking.canary``), or a model's results are suspect (``ape.tasks.report.health``).

    ``redo_outcomes`` (used by ``ape retry``) re-runs saved items whose sessions ended with
    one of these outcomes; items that errored are always redone on a rerun.
    ``only_models`` (model ids) evaluates just those; the report still covers every model.
    ``new_run``: write a new run folder ``OUTPUT/runs/<run id>`` (true), or into the output
    folder itself (false); by default, runs of a deployment (scheduled ones included) are
    new runs and runs by hand are not. ``run_id`` continues that run (``ape retry``).
    """
    return run_benchmark(config, redo_outcomes, only_models, new_run, run_id)


def run_benchmark(
    config: ApeConfig,
    redo_outcomes: list[str] | None = None,
    only_models: list[str] | None = None,
    new_run: bool | None = None,
    run_id: str | None = None,
) -> Any:
    """The body of the benchmark flow, shared by :func:`benchmark` (the config is its
    parameter) and :func:`ape.flows.served.served_benchmark` (the config is read from the
    served file): the canary, the local model servers, every model, the report."""
    from ape.tasks.models.llama_server import local_model_servers

    refused = _canary_refusal(config)  # before any model is served or called
    if refused is not None:
        return refused
    # local GGUF models (provider "llama-cpp") are served for the length of the run
    with run_logs(None), local_model_servers(config) as served:
        return _evaluate_all(served, redo_outcomes, only_models, new_run, run_id)


def _suspect(config: ApeConfig, envelope: dict[str, Any]) -> str | None:
    """The run-health line(s) that fail this run, or None (healthy, or accepted by config)."""
    from ape.schemas.report import HealthEntry
    from ape.tasks.report.health import suspect_lines

    health = {model: HealthEntry.model_validate(entry) for model, entry in (envelope.get("health") or {}).items()}
    lines = suspect_lines(health)
    if not lines:
        return None
    if config.run.accept_unhealthy:
        for line in lines:
            log.warning("%s (accepted: [run] accept_unhealthy = true)", line)
        return None
    return "; ".join(lines) + " (if this is expected, set [run] accept_unhealthy = true)"


def _canary_refusal(config: ApeConfig) -> Any:
    """None when the canary passed; else the Failed state that ends the flow run with its
    one line (a log line and the state's message, not a traceback)."""
    from ape.tasks.checking.canary import CanaryFailed

    try:
        _canary(config)
    except CanaryFailed as exc:
        log.error("%s", exc)
        return Failed(message=str(exc), data=exc)
    return None


def _canary(config: ApeConfig) -> None:
    """Grade the checker's known answers (``ape.tasks.checking.canary``) unless the command that
    started this flow already did; a wrong verdict raises :class:`CanaryFailed`, which
    ends the flow run Failed with that one line (``items_failed`` raises it again)."""
    from ape.flows.run_plan import grade_canary
    from ape.tasks.checking.canary import already_passed

    if already_passed(config.checker):
        return
    graded = grade_canary(config)
    if graded:
        log.info("canary: the checker graded %d known answers as expected", len(graded))


def flow_run_link(flow_run_id: str | None) -> str | None:
    """The flow run's page in the Prefect UI, or None where there is no UI (Prefect's
    temporary server), never a link that starts with "None"."""
    from prefect.utilities.urls import url_for

    if not flow_run_id:
        return None
    link = url_for("flow-run", obj_id=str(flow_run_id))  # the UI's own route, as Prefect links it
    return link if link and link.startswith(("http://", "https://")) else None


def _evaluate_all(
    config: ApeConfig,
    redo_outcomes: list[str] | None,
    only_models: list[str] | None = None,
    new_run: bool | None = None,
    run_id: str | None = None,
) -> Any:
    from prefect.runtime import deployment, flow_run

    started = time.perf_counter()
    RUN_ERROR_LINES.reset()  # the terminal's cap on error lines counts this run's models together
    link = flow_run_link(flow_run.id)
    if link:
        log.info("Flow run: %s", link)
    elif flow_run.id:
        log.info("Flow run %s on Prefect's temporary server (no UI to link to)", flow_run.id)
    top, info = Path(config.run.output), None
    if run_id or (new_run if new_run is not None else bool(deployment.id)):
        info = start_run(config, flow_run_id=flow_run.id, run_id=run_id)
        config = config_for_run(config, info)
        log.info("run %s (cache scope: %s) in %s", info.run_id, info.cache_scope, config.run.output)
    if config.checker.implementation == "judge" and config.checker.args.get("calibration_file"):
        calibrate_judge(config)
    failures: list[str] = []
    summaries = []
    subflow_runs: list[str] = []
    runner = evaluate
    if config.run.task_runner == "dask":
        runner = evaluate.with_options(task_runner=dask_task_runner(config))
    for index, model in enumerate(config.model):
        if only_models and model.model_id not in only_models:
            continue
        # this flow's heartbeat covers its subflows; each subflow's own heartbeat thread
        # would cost up to a second at its exit
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            state = runner(config, index, redo_outcomes, return_state=True)
        if state.state_details.flow_run_id is not None:
            subflow_runs.append(str(state.state_details.flow_run_id))
        failed = items_failed(state)
        if failed is None:
            summaries.append(state.result())
        else:
            failures.append(str(failed))
    # by hand, in place, the cache lives as long as the output folder does (as runs by hand always did)
    extra = {
        "cache_scope": config.run.cache_scope if info is not None or config.run.cache_scope == "shared" else IN_PLACE
    }
    if info is not None:
        extra["run_id"] = info.run_id
    envelope = report_task(config, round(time.perf_counter() - started, 3), extra)
    result = {
        "models": summaries,
        "report": str(Path(config.run.output) / "report.json"),
        "summary": envelope.get("summary"),
        "output": str(config.run.output),
    }
    # before the regression events go out, so they don't queue behind the run's own
    _wait_recorded(subflow_runs)
    if failures:
        return Failed(message="; ".join(failures), data=ItemsFailed("; ".join(failures)))
    suspect = _suspect(config, envelope)
    if suspect:
        return Failed(message=suspect, data=ResultsSuspect(suspect))
    if info is not None:
        result["run_id"] = info.run_id
        result["regressions"] = record_task(config, top, info, envelope)
    return result


def _wait_recorded(flow_run_ids: list[str]) -> None:
    """Before the run reports done, the Prefect server holds every task run of its model
    flows (see ape.tasks.recording), or the log says how many it lacks."""
    from ape.tasks.recording import TASK_RUN_COUNTS, wait_until_recorded

    try:
        wait_until_recorded(flow_run_ids, on_progress=log.info)
    finally:
        TASK_RUN_COUNTS.forget(flow_run_ids)
