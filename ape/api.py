"""The Python API behind ``ape.run``: the same benchmark flow as ``ape run``, returning the report."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ape.config import load_config, locate
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.schemas.report import Envelope

log = logging.getLogger("ape")


def preflight(config: ApeConfig) -> tuple[Any, list[Any], list[str]]:
    """Resolve every plugin, the template and the data before any flow starts, so a bad
    input is one clear line instead of a failed flow run.

    Returns:
        The first model's plan, the tools and the item ids.
    """
    from ape.flows.resume import recorded, refuse_mixing
    from ape.flows.run_plan import make_plan, resume_fingerprints
    from ape.tasks.models.build import build_model
    from ape.tasks.solving.tools import load_tools
    from ape.tasks.storage.history import check_history
    from ape.tasks.storage.outdir import check_output_folder

    try:
        check_output_folder(config.run.output)
        check_history(config.run.output)  # a damaged history is found now, not after every model call
        check_judge_model(config)  # before the plans build their checkers (and so the judge)
        plans = [make_plan(config, model) for model in config.model]
        for model in config.model:
            build_model(model, config.base_dir)
        tools = load_tools(config.tools, config.base_dir)
        if config.run.load_save:  # refuse to mix results now, not in a failed flow run
            for plan in plans:
                previous = recorded(plan.out_dir / config.run.metadata_file)
                refuse_mixing(previous, resume_fingerprints(plan), plan.out_dir)
        return plans[0], tools, plans[0].provider().scan()
    except ApeError as exc:
        raise locate(exc, config) from None


def check_judge_model(config: ApeConfig) -> None:
    """Build a judge's own model (``[checker.judge]``) as the ``[[model]]`` sections are built,
    so a model that cannot work there (an unknown mock behaviour, a missing key) is one line
    naming ``[checker.judge]`` before any model call, not a check error on every item."""
    from ape.schemas.config import ModelConfig
    from ape.tasks.checking.judge import judge_model_config
    from ape.tasks.models.build import build_model

    if config.checker.implementation != "judge" or not isinstance(config.checker.judge, ModelConfig):
        return  # no judge, or a judge that names a [[model]] (built with the others)
    model_cfg = judge_model_config(config)
    try:
        build_model(model_cfg, config.base_dir)
    except ApeError as exc:
        exc.where = (exc.where or "").replace(f"[model] '{model_cfg.model_id}'", "[checker.judge]", 1)
        raise


def canary(config: ApeConfig) -> list[Any]:
    """Grade the checker's known answers (``ape.tasks.checking.canary``) before any model call.

    Raises:
        CanaryFailed: one line naming the checker, the example and the cause.
        ApeError: a ``[[checker.canary]]`` item that does not fit the DataModel.
    """
    from ape.flows.run_plan import grade_canary

    try:
        return grade_canary(config)
    except ApeError as exc:
        raise locate(exc, config) from None


def run(config: ApeConfig | str | Path, overrides: dict[str, Any] | None = None) -> Envelope:
    """Run a benchmark (every model, then the report) and return its report.

    The flow runs against the Prefect API this process is configured for
    (``PREFECT_API_URL``), else against the server ``ape server start`` (or an earlier
    ``ape run``) left running for this APE home, else on Prefect's temporary in-process
    server, which has no UI and keeps no history. Unlike ``ape run`` it never starts a
    server that outlives the call. Items whose sessions errored do not raise: the envelope is
    returned (its leaderboard counts them) and the flow run ends Failed, so it can be
    retried.

    Args:
        config: a path to a ``config.toml`` or an :class:`ApeConfig`.
        overrides: dotted config keys to set after reading the file,
            e.g. ``{"run.output": "out"}`` (only with a path).

    Returns:
        The :class:`Envelope` written to ``report.json`` in the output folder.

    Raises:
        ApeError: a bad config, plugin or data file (nothing has run yet).
        CanaryFailed: the checker graded a known answer wrongly (no model was called).
    """
    from ape.flows.benchmark import benchmark
    from ape.flows.states import items_failed

    if not isinstance(config, ApeConfig):
        config = load_config(config, overrides)
    elif overrides:
        raise ApeError("overrides apply to a config file; edit the ApeConfig instead", where="ape.run(overrides=...)")
    preflight(config)
    from ape.tasks.checking.canary import passed

    canary(config)  # known answers first: a broken checker stops before any server or model
    _choose_prefect_api()
    with passed(config.checker):
        failed = items_failed(benchmark(config, return_state=True))
    if failed is not None:
        log.warning("%s", failed)
    report = Path(config.run.output) / "report.json"
    return Envelope.model_validate_json(report.read_text(encoding="utf-8"))


def _choose_prefect_api() -> None:
    """Point this process at APE's running server when the user configured no API, and say
    in one line where the flow runs."""
    from ape.server import configured_api_url, ensure_api_url, running_api_url

    if configured_api_url():
        return
    if running_api_url() is not None:
        ensure_api_url(on_status=log.info)  # reuses it: the URL goes to the environment and settings
        return
    # the temporary server would try to send Prefect's usage telemetry (an ERROR line offline)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    log.info(
        "No Prefect server running for this APE home: using Prefect's temporary server "
        "(no UI, keeps no history); 'ape server start' first to watch runs in the UI"
    )
