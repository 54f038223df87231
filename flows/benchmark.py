"""The benchmark flow: every configured model (one evaluate subflow each), then the report.

This is the flow users run (``ape run``), deploy (``ape serve``) and retry in
the Prefect UI. It takes the whole config as one pydantic parameter, so a
deployment's run form shows every setting. The report is built even when some
items errored; the flow run then ends Failed so that a retry redoes only those.
Runs of a deployment (and ``new_run=True``) are new runs in ``OUTPUT/runs/<run id>``
that, once finished, join the run history and are compared with earlier runs
(``ape.tasks.storage.runs``, ``ape.tasks.after_run.join_history``, ``ape.tasks.after_run.alerts``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from prefect import flow
from prefect.runtime import deployment, flow_run
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.states import Failed

from ape.flows.evaluate import Drained, ItemsFailed, dask_task_runner, evaluate
from ape.flows.live.control import control_log
from ape.flows.logs import run_logs
from ape.flows.preflight import Checked, graded_canary, hand_over, handed
from ape.flows.progress import RUN_ERROR_LINES
from ape.flows.states import items_failed
from ape.flows.ui_links import flow_run_link
from ape.schemas.config import ApeConfig
from ape.schemas.report import HealthEntry
from ape.tasks.checking.canary import CanaryFailed
from ape.tasks.common.home import password_hint, ui_password_file
from ape.tasks.models.limits.policy import RETRY_LINES
from ape.tasks.models.local.llama_server import local_model_servers, with_base_urls
from ape.tasks.recording import finish_recording
from ape.tasks.setup.judge_agreement import judge_agreement_task
from ape.tasks.setup.model import run_label
from ape.tasks.storage.config_ref import ConfigParameter, as_parameter, resolve_config
from ape.tasks.storage.file_modes import modes_for, private_outputs
from ape.tasks.storage.runs import IN_PLACE, config_for_run, start_run

log = logging.getLogger("ape")


class ResultsSuspect(ItemsFailed):
    """Every item ran, but a model's results share one non-answer signature (``ape.tasks.report.health``)
    and ``[run] accept_unhealthy`` is off: the report exists, its numbers measured nothing."""


def _run_name() -> str:

    return run_label(flow_run.parameters.get("config")) or "benchmark"


@flow(name="benchmark", flow_run_name=_run_name, persist_result=False)
def benchmark(
    config: ConfigParameter,
    redo_outcomes: list[str] | None = None,
    only_models: list[str] | None = None,
    new_run: bool | None = None,
    run_id: str | None = None,
    preflight: str | None = None,
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
    ``preflight``: the run token under which the command that started this flow handed over
    its preflight (:func:`ape.flows.preflight.hand_over`: the setups and the graded canary,
    :func:`ape.launch.launch`); without one this process knows, the flow grades the canary
    before any model is called and each model flow resolves its own setup.
    """
    return run_benchmark(resolve_config(config), redo_outcomes, only_models, new_run, run_id, checked=handed(preflight))


def run_benchmark(
    config: ApeConfig,
    redo_outcomes: list[str] | None = None,
    only_models: list[str] | None = None,
    new_run: bool | None = None,
    run_id: str | None = None,
    *,
    checked: Checked | None = None,
) -> Any:
    """The body of the benchmark flow, shared by :func:`benchmark` (the config is its
    parameter) and :func:`ape.flows.served.served_benchmark` (the config is read from the
    served file): the canary (unless ``checked`` holds it graded), the local model servers,
    every model, the report. ``checked``: the caller's preflight of ``config``, whose checker
    the canary grades and whose setups the model flows take.

    Everything the run writes, from the canary's cache on, is owner-only (or shared with the
    group, ``[run] share_with_group``): :mod:`ape.tasks.storage.file_modes`."""
    with private_outputs(config.run.output, modes_for(config)):
        try:
            checked = graded_canary(config, checked)  # before any model is served or called
        except CanaryFailed as exc:
            return canary_failed(exc)
        # local GGUF models (provider "llama-cpp") are served for the length of the run; the model
        # flows take the preflight setups, pointed at the servers, by the token handed to them
        with run_logs(None), local_model_servers(config) as base_urls:
            local = checked.at_local_servers(base_urls) if checked is not None else None
            with hand_over(local) as token:
                local_config = with_base_urls(config, base_urls)
                return _evaluate_all(local_config, redo_outcomes, only_models, new_run, run_id, token)


def _suspect(config: ApeConfig, envelope: dict[str, Any]) -> str | None:
    """The run-health line(s) that fail this run, or None (healthy, or accepted by config)."""
    from ape.tasks.report.health import limit_lines, suspect_lines, truncation_lines  # see _after_run

    health = {model: HealthEntry.model_validate(entry) for model, entry in (envelope.get("health") or {}).items()}
    for line in truncation_lines(health):  # a warning: the results measure the budget, not a failure
        log.warning("run health: %s", line)
    for line in limit_lines(health):  # a warning too: a stopped session is still graded on its state
        log.warning("run health: %s", line)
    lines = suspect_lines(health)
    if not lines:
        return None
    if config.run.accept_unhealthy:
        for line in lines:
            log.warning("%s (accepted: [run] accept_unhealthy = true)", line)
        return None
    return "; ".join(lines) + " (if this is expected, set [run] accept_unhealthy = true)"


def _after_run() -> ModuleType:
    """The report and join-history tasks' module, imported once the models ran: the report's
    pandas and SciPy take half a second to import, which a run would otherwise spend before
    its first model call (``tests/unit/test_start_imports.py`` keeps them off the start)."""
    from ape.tasks.after_run import tasks

    return tasks


def canary_failed(exc: CanaryFailed) -> Any:
    """The Failed state that ends the flow run with the canary's one line (a log line and the
    state's message, not a traceback; ``items_failed`` raises the :class:`CanaryFailed` again)."""
    log.error("%s", exc)
    return Failed(message=str(exc), data=exc)


def _evaluate_all(
    config: ApeConfig,
    redo_outcomes: list[str] | None,
    only_models: list[str] | None = None,
    new_run: bool | None = None,
    run_id: str | None = None,
    preflight: str | None = None,
) -> Any:

    started = time.perf_counter()
    RUN_ERROR_LINES.reset()  # the terminal's cap on error lines counts this run's models together
    RETRY_LINES.reset()  # and each model's repeated retry lines are counted afresh
    link = flow_run_link(flow_run.id)
    if link:
        password = ui_password_file()  # APE's own server: a fresh browser meets its login form
        log.info("Flow run: %s%s", link, f" ({password_hint(password.parent)})" if password else "")
    elif flow_run.id:
        log.info("Flow run %s on Prefect's temporary server (no UI to link to)", flow_run.id)
    top, info = Path(config.run.output), None
    if run_id or (new_run if new_run is not None else bool(deployment.id)):
        info = start_run(config, flow_run_id=flow_run.id, run_id=run_id)
        config = config_for_run(config, info)
        log.info("run %s (cache scope: %s) in %s", info.run_id, info.cache_scope, config.run.output)
    if config.checker.implementation == "judge" and config.checker.args.get("calibration_file"):
        checked = handed(preflight)
        judge_agreement_task(config, checked.judge if checked is not None else None)
    failures: list[str] = []
    drained: Drained | None = None
    summaries = []
    subflow_runs: list[str] = []
    runner = evaluate
    if config.run.task_runner == "dask":
        runner = evaluate.with_options(task_runner=dask_task_runner(config))
    parameter = as_parameter(config)  # by reference where too large for a flow-run parameter
    for index, model in enumerate(config.model):
        if only_models and model.model_id not in only_models:
            continue
        # this flow's heartbeat covers its subflows; each subflow's own heartbeat thread
        # would cost up to a second at its exit
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            state = runner(parameter, index, redo_outcomes, preflight=preflight, return_state=True)
        if state.state_details.flow_run_id is not None:
            subflow_runs.append(str(state.state_details.flow_run_id))
        failed = items_failed(state)
        if failed is None:
            summaries.append(state.result())
        else:
            failures.append(str(failed))
        if isinstance(failed, Drained):  # drained: no further model starts either
            drained = failed
            break
    # by hand, in place, the cache lives as long as the output folder does (as runs by hand always did)
    extra: dict[str, Any] = {
        "cache_scope": config.run.cache_scope if info is not None or config.run.cache_scope == "shared" else IN_PLACE
    }
    if info is not None:
        extra["run_id"] = info.run_id
    control = control_log(config)
    if control:  # who paused, resumed or drained a model, when, what changed
        extra["control"] = control
    envelope = _after_run().report_task(config, round(time.perf_counter() - started, 3), extra)
    result = {
        "models": summaries,
        "report": str(Path(config.run.output) / "report.json"),
        "summary": envelope.get("summary"),
        "output": str(config.run.output),
    }
    # before the regression events go out, so they don't queue behind the run's own
    _wait_recorded(subflow_runs, Path(config.run.output))
    if drained is not None:  # ended resumably: its own exit code, not "items failed"
        return Failed(message="; ".join(failures), data=Drained("; ".join(failures)))
    if failures:
        return Failed(message="; ".join(failures), data=ItemsFailed("; ".join(failures)))
    suspect = _suspect(config, envelope)
    if suspect:
        return Failed(message=suspect, data=ResultsSuspect(suspect))
    if info is not None:
        result["run_id"] = info.run_id
        result["regressions"] = _after_run().join_history_task(config, top, info, envelope)
    return result


def _wait_recorded(flow_run_ids: list[str], output: Path) -> None:
    """Before the run reports done, the Prefect server holds every task run of its model
    flows, or, after a short wait, the rest follows in the background (the log says how
    far the UI is behind; see ape.tasks.recording.catch_up)."""
    finish_recording(flow_run_ids, output, on_progress=log.info)
