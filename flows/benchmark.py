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
    from ape.flows.recurring import record_run
    from ape.schemas.report import Envelope
    from ape.tasks.report.envelope import write_envelope
    from ape.tasks.report.markdown import markdown_table

    report = Envelope.model_validate(envelope)
    rows = record_run(config, top, info, report)
    report = report.model_copy(update={"regressions": rows})
    write_envelope(config.run.output / "report.json", report)
    (config.run.output / "leaderboard.md").write_text(markdown_table(report), encoding="utf-8")
    finish_run(top, info)
    publish(config, top, info.run_id, rows)
    return [row.model_dump(mode="json") for row in rows]


@flow(name="benchmark", flow_run_name=_run_name, persist_result=False)
def benchmark(
    config: ApeConfig,
    redo_outcomes: list[str] | None = None,
    only_models: list[str] | None = None,
    new_run: bool | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Evaluate every model of ``config`` and write the report into its output folder.

    ``redo_outcomes`` (used by ``ape retry``) re-runs saved items whose sessions ended with
    one of these outcomes; items that errored are always redone on a rerun.
    ``only_models`` (model ids) evaluates just those; the report still covers every model.
    ``new_run``: write a new run folder ``OUTPUT/runs/<run id>`` (true), or into the output
    folder itself (false); by default, runs of a deployment (scheduled ones included) are
    new runs and runs by hand are not. ``run_id`` continues that run (``ape retry``).
    """
    from ape.tasks.models.llama_server import local_model_servers

    # local GGUF models (provider "llama-cpp") are served for the length of the run
    with run_logs(None), local_model_servers(config) as served:
        return _evaluate_all(served, redo_outcomes, only_models, new_run, run_id)


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
    failures: list[str] = []
    summaries = []
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
    if failures:
        return Failed(message="; ".join(failures), data=ItemsFailed("; ".join(failures)))
    if info is not None:
        result["run_id"] = info.run_id
        result["regressions"] = record_task(config, top, info, envelope)
    return result
