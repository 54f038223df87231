"""One way to prepare and start a run, for ``ape run``, ``ape retry`` and ``ape.run``.

The order matters and lives only here:

1. preflight (:func:`ape.flows.preflight.preflight`): a bad config, plugin or data file
   is one line before anything starts; then one request to every model endpoint
   (:func:`ape.flows.preflight.endpoints`), so a dead ``base_url`` is one line too;
2. result storage beside the output folder (before Prefect reads its settings);
3. owner-only modes for everything the run writes (:mod:`ape.tasks.storage.file_modes`),
   and the output folder's lock, so a second run on the same folder is refused at once,
   before a server starts;
4. the canary, graded once (:func:`ape.flows.preflight.graded_canary`); preflight's result,
   the canary's with it, is handed to the flow by run token (:func:`ape.flows.preflight.hand_over`);
5. the Prefect API (APE's local server, one already running, or Prefect's temporary one);
6. the benchmark flow, watched (:mod:`ape.watchdog`).

A served benchmark (``ape serve``, a deployment) starts in Prefect's runner instead; its
flow calls the same preflight and canary (:mod:`ape.flows.served`).
"""

from __future__ import annotations

import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from ape import server
from ape.flows.preflight import Checked, endpoints, graded_canary, hand_over, preflight
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.tasks.storage.config_file import locate
from ape.tasks.storage.config_ref import as_parameter
from ape.tasks.storage.file_modes import modes_for, private_outputs
from ape.tasks.storage.outdir import OutputLock
from ape.watchdog import api_watchdog

log = logging.getLogger("ape")

Api = Literal["start", "reuse", "configured"]
"""Which Prefect API a run reports to: ``start`` APE's local server (started or reused,
``ape run``); ``reuse`` one already running, else Prefect's temporary server (``ape.run``);
``configured`` only what ``PREFECT_API_URL`` says, else the temporary server (``--no-server``)."""

_WORK_STARTED = False  # set once a run's benchmark flow starts: from then on items may be saved


def work_started() -> bool:
    """Whether a run's benchmark flow has started in this process (what Ctrl-C tells the user)."""
    return _WORK_STARTED


@dataclass(frozen=True)
class RunRequest:
    """What the caller chooses about one run; everything else is the config's."""

    redo_outcomes: list[str] | None = None  # ape retry: redo saved items with these outcomes
    only_models: list[str] | None = None  # ape retry of one model's folder
    new_run: bool | None = None  # a new run folder OUTPUT/runs/<run id> (ape run --new-run)
    run_id: str | None = None  # continue this run (ape retry of a run folder)


def launch(config: ApeConfig, request: RunRequest | None = None, *, api: Api = "start", command: bool = True) -> Any:
    """Check, lock and run the benchmark flow; returns its final Prefect state.

    ``command``: this process is an ``ape`` command, so the run may set the ``ape`` logger's
    level, quiet Prefect's console and end the process when the API goes away
    (:mod:`ape.watchdog`); ``ape.run`` in a user's program leaves all three alone.

    Raises:
        ApeError: bad input found before any model call (nothing has run).
        CanaryFailed: the checker graded a known answer wrongly (no model was called).
    """
    request = request or RunRequest()
    if command:
        set_log_level(config)
    checked = preflight(config, run_folder=bool(request.new_run or request.run_id))
    endpoints(config, request.only_models)  # before the canary, which may call a judge's endpoint
    point_result_storage(config)
    # owner-only outputs (ape.tasks.storage.file_modes): the umask is set before the lock
    # file, the server and the flow write anything, and put back when the run ends
    with private_outputs(config.run.output, modes_for(config)), OutputLock(config.run.output):
        # the lock before a server start, so a second run is refused at once
        graded: Checked | None = graded_canary(config, checked)
        connect(api)
        with hand_over(graded) as token:  # the flows take preflight's setups and canary, not new ones
            return _run_flow(config, request, token, command=command)


def set_log_level(config: ApeConfig) -> None:
    """``[cli] log_level`` sets what the terminal and run.log show; ``--debug`` wins."""
    logger = logging.getLogger("ape")
    if logger.level != logging.DEBUG:
        logger.setLevel(config.cli.log_level)


def point_result_storage(config: ApeConfig) -> None:
    """Cached generations live next to the results they belong to, unless the user chose a
    Prefect result storage location themselves. Set before the flow reads Prefect's settings."""
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(config.run.output / ".cache" / "results"))


def connect(api: Api) -> str | None:
    """Point this process at the Prefect API ``api`` names; the API URL, or None for
    Prefect's temporary server."""
    if api == "start":
        return server.ensure_api_url(on_status=log.info)
    if api == "reuse":
        existing = server.existing_api_url(on_status=log.info)
        if existing:
            return existing
        # the temporary server would try to send Prefect's usage telemetry (an ERROR line offline)
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        log.info(
            "No Prefect server running for this APE home: using Prefect's temporary server "
            "(no UI, keeps no history); 'ape server start' first to watch runs in the UI"
        )
        return None
    return server.configured_api_url()


def _run_flow(config: ApeConfig, request: RunRequest, preflight: str | None, *, command: bool) -> Any:
    # deferred on purpose: Prefect reads its settings once, when it is first imported, so it
    # is imported only after point_result_storage (and connect) set them
    from ape.flows.benchmark import benchmark
    from ape.flows.feeders import dask_task_runner
    from ape.flows.logs import quiet_prefect_console

    global _WORK_STARTED
    if config.run.task_runner == "dask":
        try:
            dask_task_runner(config)  # a clear error now, rather than a failed flow run
        except ApeError as exc:
            raise locate(exc, config) from None
    _WORK_STARTED = True
    if command and not log.isEnabledFor(logging.DEBUG):  # --debug keeps Prefect's tracebacks
        quiet_prefect_console()
    watchdog = api_watchdog(config.run.output) if command else None
    with watchdog if watchdog is not None else nullcontext():
        return benchmark(
            as_parameter(config),  # by reference where too large for a flow-run parameter
            redo_outcomes=request.redo_outcomes,
            only_models=request.only_models,
            new_run=request.new_run,
            run_id=request.run_id,
            preflight=preflight,
            return_state=True,
        )
