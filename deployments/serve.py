"""Serve the benchmark flow as a scheduled Prefect deployment: ``ape serve config.toml --cron``.

Why serve instead of ``prefect deploy``: a served deployment needs no work pool
or worker, only this long-running process. The deployment carries no config: its
flow (:func:`ape.flows.served.served_benchmark`) reads the owner's config file,
named in the serving process's environment, afresh for every run, and a run's
parameters may set only the allow-list of :class:`ape.flows.served.RunOverrides`
(the UI's "Custom run" form shows exactly those). ``prefect.yaml`` beside this file
is the work-pool alternative for teams that run workers.

The flow is not hard-coded in :func:`deployment_for`, so any flow whose parameters
are those overrides can be deployed the same way (the tests use a tiny one).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from prefect import serve as prefect_serve
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterName,
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.schedules import CronSchedule
from prefect.schedules import Cron, Interval
from prefect.utilities.callables import ParameterSchema
from pydantic import ValidationError

from ape.flows.served import CONFIG_ENV, OVERRIDES
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError, problem_message
from ape.tasks.plugins.loader import load_object
from ape.tasks.storage import prefect_api

if TYPE_CHECKING:
    from prefect import Flow
    from prefect.deployments.runner import RunnerDeployment

BENCHMARK_FLOW = "ape.flows.served:served_benchmark"
DEFAULT_TAGS = ("ape",)


def cron_schedule(cron: str, timezone: str | None = None) -> Any:
    """A Prefect cron schedule, or an ApeError saying what is wrong with ``cron``."""

    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValidationError as exc:
        reason = "; ".join(problem_message(err) for err in exc.errors())
        raise ApeError(
            f"invalid schedule {cron!r}: {reason}",
            where="--cron",
            hint="use five fields 'minute hour day month weekday', e.g. '0 3 * * *' for 03:00 "
            "daily, and an IANA timezone such as 'Europe/Berlin'",
        ) from None
    return Cron(cron, timezone=timezone)


def deployment_for(
    flow: Flow[..., Any],
    config: ApeConfig,
    cron: str | None,
    name: str,
    *,
    timezone: str | None = None,
    tags: Sequence[str] = DEFAULT_TAGS,
    description: str | None = None,
    interval: float | None = None,
) -> RunnerDeployment:
    """A deployment of ``flow`` named ``name`` for the benchmark ``config`` describes.

    ``cron`` or ``interval`` (seconds; optional) becomes the deployment's schedule. Every
    run of a deployment is a new run of the benchmark (``OUTPUT/runs/<run id>``), measured
    afresh and compared with the one before (see ``ape.flows.benchmark``). The deployment's
    parameters are only the run overrides, with their defaults: the config stays in its
    file. A flow whose parameters are anything else is refused here.
    """

    extra = sorted(set(flow.parameters.properties) - set(OVERRIDES))
    if extra:
        raise ApeError(
            f"flow '{flow.name}' takes parameter(s) {', '.join(extra)} beyond the run overrides",
            where="deployment",
            hint=f"a served flow reads its config from the served file and takes only {', '.join(OVERRIDES)}",
        )
    schedules = [cron_schedule(cron, timezone)] if cron else None
    if interval is not None:
        if interval <= 0:
            raise ApeError(f"invalid interval {interval}: must be positive seconds", where="--interval")

        schedules = [*(schedules or []), Interval(interval, timezone=timezone)]
    # called from synchronous code, so Prefect's sync_compatible method returns the deployment itself
    deployment = cast(
        "RunnerDeployment",
        flow.to_deployment(
            name=name,
            schedules=schedules,
            tags=list(tags),
            description=description or f"APE benchmark '{config.name}' ({len(config.model)} model(s))",
            enforce_parameter_schema=True,
        ),
    )
    deployment._parameter_openapi_schema = closed_schema(deployment._parameter_openapi_schema)
    return deployment


def closed_schema(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false``: the server then answers a flow run
    with any other parameter (``config``, ``base_dir``, ...) with 409 and the name of the
    parameter, before the run exists. (A caller may switch the server's check off for its
    run; the flow's ``on_crashed`` hook then names the refused parameters.)"""

    class ClosedParameterSchema(ParameterSchema):
        additionalProperties: bool = False  # noqa: N815 - the JSON Schema keyword

    # set explicitly: Prefect sends the schema with exclude_unset, which would drop a default
    return ClosedParameterSchema.model_validate({**schema.model_dump(), "additionalProperties": False})


def serve_config(
    flow: Flow[..., Any],
    config: ApeConfig,
    cron: str | None,
    name: str,
    *,
    timezone: str | None = None,
    on_status: Callable[[str], None] | None = None,
    interval: float | None = None,
) -> None:
    """Register the deployment and run its scheduled and manual runs until interrupted.

    The caller points Prefect at a persistent server first (``ape serve`` starts or reuses
    the local one): served runs on Prefect's temporary server would be lost. One run at a
    time: runs of one benchmark share its output folder and history, and each is compared
    with the one that finished before it. Each run reads ``config.config_file`` again, so
    an edit to the file applies from the next run on.
    """

    if config.config_file is None:
        raise ApeError(
            "a served benchmark needs its config file: each run reads it afresh",
            where="ape serve",
            hint="load the config with ape.load_config(path) or serve it with 'ape serve config.toml'",
        )
    deployment = deployment_for(flow, config, cron, name, timezone=timezone, interval=interval)
    # the flow-run processes inherit this process's environment (Prefect's runner starts them)
    os.environ[CONFIG_ENV] = str(Path(config.config_file).resolve())
    if on_status is not None:
        schedule = (
            f" on schedule '{cron}' ({timezone or 'UTC'})" if cron else f" every {interval:g} s" if interval else ""
        )
        on_status(f"serving deployment '{flow.name}/{name}'{schedule} of {config.config_file}")
    prefect_serve(deployment, limit=1)


# How far a state's time may lie before the moment of the stop and still count as the stop's:
# the server stamps states with its own clock, and a second of skew is common.
STOP_CLOCK_SLACK = timedelta(seconds=2)
STOPPED_TYPES = [StateType.CANCELLED, StateType.CANCELLING]
UNFINISHED_TYPES = [StateType.RUNNING, StateType.PENDING]


@dataclass(frozen=True)
class StopOutcome:
    """What stopping ``ape serve`` did to the deployment's runs, as the server records them:
    ``cancelled`` the names of the runs the stop cancelled (they were in progress);
    ``unfinished`` runs still Running or Pending after it (not stopped cleanly)."""

    cancelled: list[str]
    unfinished: list[str]


def stop_outcome(deployment_name: str, stopped_at: datetime) -> StopOutcome:
    """Ask the server which runs of ``deployment_name`` ("flow/name") the stop at ``stopped_at``
    (aware, UTC) cancelled, and which are still in progress. The runner cancels a run in
    progress before it returns (state Cancelled, message "Runner is shutting down."), so this
    is what happened rather than what a message assumes. Raises what the client raises when
    the server does not answer; the caller says so."""

    flow_name, _, name = deployment_name.partition("/")
    runs = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=STOPPED_TYPES + UNFINISHED_TYPES)))
    deployments = DeploymentFilter(name=DeploymentFilterName(any_=[name]))
    flows = FlowFilter(name=FlowFilterName(any_=[flow_name]))
    with prefect_api.sync_client() as client:
        found = client.read_flow_runs(flow_filter=flows, flow_run_filter=runs, deployment_filter=deployments, limit=50)
    cancelled, unfinished = [], []
    for run in found:
        if run.state is None:
            continue
        if run.state.type in UNFINISHED_TYPES:
            unfinished.append(run.name)
        elif run.state.timestamp is not None and run.state.timestamp >= stopped_at - STOP_CLOCK_SLACK:
            cancelled.append(run.name)
    return StopOutcome(cancelled=sorted(cancelled), unfinished=sorted(unfinished))


def load_benchmark_flow() -> Flow[..., Any]:
    """Import the benchmark flow lazily, so this module loads without the runner."""

    return load_object(BENCHMARK_FLOW, where="deployment")
