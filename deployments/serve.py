"""Serve the benchmark flow as a scheduled Prefect deployment: ``ape serve config.toml --cron``.

Why serve instead of ``prefect deploy``: a served deployment needs no work pool
or worker, only this long-running process, and it carries the whole config as
the flow's one pydantic parameter, so the Prefect UI shows it as a form that a
user can edit before a custom run. ``prefect.yaml`` beside this file is the
work-pool alternative for teams that run workers.

The flow is not hard-coded in :func:`deployment_for`, so any flow taking
``config: ApeConfig`` can be deployed the same way (the tests use a tiny one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError

if TYPE_CHECKING:
    from prefect import Flow
    from prefect.deployments.runner import RunnerDeployment

BENCHMARK_FLOW = "ape.flows.benchmark:benchmark"
DEFAULT_TAGS = ("ape",)


def config_parameter(config: ApeConfig) -> dict[str, Any]:
    """The config as a JSON-ready flow parameter, keyed by TOML names (``schema``, ``class``)."""
    return config.model_dump(mode="json", by_alias=True)


def cron_schedule(cron: str, timezone: str | None = None) -> Any:
    """A Prefect cron schedule, or an ApeError saying what is wrong with ``cron``."""
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.schedules import Cron

    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValidationError as exc:
        reason = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in exc.errors())
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
    """A deployment of ``flow`` named ``name`` with ``config`` as its default parameter.

    ``cron`` or ``interval`` (seconds; optional) becomes the deployment's schedule. Every
    run of a deployment is a new run of the benchmark (``OUTPUT/runs/<run id>``), measured
    afresh and compared with the one before (see ``ape.flows.benchmark``). Parameters are
    validated against the flow's signature by the server, so a form edit in the
    UI that breaks the config is rejected before a run starts.
    """
    if "config" not in flow.parameters.properties:
        raise ApeError(
            f"flow '{flow.name}' has no 'config' parameter",
            where="deployment",
            hint="deploy a flow whose signature is (config: ApeConfig)",
        )
    schedules = [cron_schedule(cron, timezone)] if cron else None
    if interval is not None:
        if interval <= 0:
            raise ApeError(f"invalid interval {interval}: must be positive seconds", where="--interval")
        from prefect.schedules import Interval

        schedules = [*(schedules or []), Interval(interval, timezone=timezone)]
    # called from synchronous code, so Prefect's sync_compatible method returns the deployment itself
    return cast(
        "RunnerDeployment",
        flow.to_deployment(
            name=name,
            schedules=schedules,
            parameters={"config": config_parameter(config)},
            tags=list(tags),
            description=description or f"APE benchmark '{config.name}' ({len(config.model)} model(s))",
        ),
    )


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
    with the one that finished before it.
    """
    from prefect import serve as prefect_serve

    deployment = deployment_for(flow, config, cron, name, timezone=timezone, interval=interval)
    if on_status is not None:
        schedule = (
            f" on schedule '{cron}' ({timezone or 'UTC'})" if cron else f" every {interval:g} s" if interval else ""
        )
        on_status(f"serving deployment '{flow.name}/{name}'{schedule}")
    prefect_serve(deployment, limit=1)


def load_benchmark_flow() -> Flow[..., Any]:
    """Import the benchmark flow lazily, so this module loads without the runner."""
    from ape.tasks.plugins.loader import load_object

    return load_object(BENCHMARK_FLOW, where="deployment")
