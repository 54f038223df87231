"""The flow a deployment runs: its owner's config, read from the owner's file, plus a few
validated overrides.

Why a flow of its own: anyone who can create a flow run of a deployment (a schedule, the
UI's "Custom run" form, the REST API, a retry) chooses its parameters. If the config were
a parameter, a run could name code (a schema, adapter, checker, tool factory, hook or
model class, the plugin folder ``base_dir``), files and folders (the data file, templates,
the output folder, calibration files) or an endpoint (``base_url``), and the serving
process would import and run it. So the config never travels as a parameter: the serving
process names the owner's ``config.toml`` in :data:`CONFIG_ENV` (``ape serve`` sets it;
``deployments/prefect.yaml`` sets it in the deployment's job variables), each run reads
that file afresh, and a run may change only the allow-list below (:class:`RunOverrides`),
each value validated before anything is imported. A run that sends any other parameter
is refused by Prefect's parameter check before the flow starts, so no user code is ever
reached; its state message says which parameter, and the UI shows it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.runtime import flow_run
from prefect.states import Failed
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ape.flows.benchmark import run_benchmark
from ape.flows.preflight import endpoints, preflight
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError, validation_error
from ape.schemas.results import Outcome
from ape.tasks.setup.model import run_label
from ape.tasks.storage import prefect_api
from ape.tasks.storage.config_file import load_config

log = logging.getLogger("ape")

# The environment variable naming the owner's config file in the serving process.
CONFIG_ENV = "APE_CONFIG"
NOTE_MAX_CHARS = 500
# The parameters a flow run of a served deployment may set; documented in docs/server.md.
OVERRIDES = ("only_models", "redo_outcomes", "new_run", "note")


class RunOverrides(BaseModel):
    """What one flow run of a deployment may change: which models, which saved outcomes to
    redo, whether to write a new run folder, and a note. Data only: no code, no path, no
    endpoint."""

    model_config = ConfigDict(extra="forbid")

    only_models: list[str] | None = Field(default=None, description="Model ids to evaluate (default: all).")
    redo_outcomes: list[Outcome] | None = Field(default=None, description="Saved outcomes to run again.")
    new_run: bool | None = Field(default=None, description="A new run folder (default for deployments: yes).")
    note: str | None = Field(default=None, max_length=NOTE_MAX_CHARS, description="Shown in the run's log.")

    @field_validator("note")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and any(not ch.isprintable() for ch in value):
            raise ValueError("a note holds printable text on one line")
        return value

    def check_models(self, config: ApeConfig) -> None:
        """Every model named in ``only_models`` is one of the config's."""
        known = [m.model_id for m in config.model]
        unknown = [name for name in self.only_models or [] if name not in known]
        if unknown:
            raise ApeError(
                f"only_models names {', '.join(repr(n) for n in unknown)}, not a model of this benchmark",
                where="flow-run parameter only_models",
                hint=f"models: {', '.join(known)}",
            )


def served_config_path() -> Path:
    """The owner's config file, as the serving process named it in :data:`CONFIG_ENV`."""
    value = os.environ.get(CONFIG_ENV)
    if not value:
        raise ApeError(
            f"this process does not serve a config ({CONFIG_ENV} is not set)",
            where="deployment",
            hint="serve the benchmark with 'ape serve config.toml', or set "
            f"{CONFIG_ENV} in the deployment's job variables (deployments/prefect.yaml)",
        )
    return Path(value)


def load_served(overrides: RunOverrides) -> ApeConfig:
    """The owner's config, read now from the served file, with the run's overrides checked."""
    config = load_config(served_config_path())
    overrides.check_models(config)
    return config


def _run_name() -> str:

    try:
        config = load_config(served_config_path())
    except ApeError:
        return "benchmark"
    note = flow_run.parameters.get("note")
    label = run_label(config) or "benchmark"
    return f"{label} · {note[:40]}" if isinstance(note, str) and note else label


def refused_message(names: list[str]) -> str:
    """The one line a run with parameters outside the allow-list ends with."""
    return (
        f"flow-run parameter(s) {', '.join(repr(n) for n in names)} refused: a served benchmark reads its "
        f"config from its owner's file; a run may set only {', '.join(OVERRIDES)}"
    )


def name_refused_parameters(flow: Any, flow_run: Any, state: Any) -> None:
    """An ``on_crashed`` hook, run by the serving process: a run whose parameters are not the
    flow's crashes in Prefect's engine before the flow's code (nothing of it is imported or
    run), with a bare "Process exited with status code: 1"; this marks it Failed with the
    line that says which parameters were refused, so the UI shows why."""
    refused = sorted(set(flow_run.parameters or {}) - set(OVERRIDES))
    if not refused:
        return

    message = refused_message(refused)
    log.error("%s", message)
    with prefect_api.sync_client() as client:
        client.set_flow_run_state(flow_run.id, Failed(message=message), force=True)


@flow(
    name="benchmark",
    flow_run_name=_run_name,
    persist_result=False,
    validate_parameters=True,
    on_crashed=[name_refused_parameters],
)
def served_benchmark(
    only_models: list[str] | None = None,
    redo_outcomes: list[Outcome] | None = None,
    new_run: bool | None = None,
    note: str | None = None,
) -> Any:
    """Run the served benchmark: the owner's config file, read afresh for each run.

    A flow run may set only these parameters (see the module doc); every other setting,
    and everything that names code, a file, a folder or an endpoint, comes from the file.
    """
    _leave_ctrl_c_to_the_runner()
    try:
        overrides = RunOverrides(only_models=only_models, redo_outcomes=redo_outcomes, new_run=new_run, note=note)
        config = load_served(overrides)
        # the checks of `ape run`, on the file as it is now; a deployment's run is a new run
        checked = preflight(config, run_folder=overrides.new_run is not False)
        endpoints(config, overrides.only_models)  # a dead endpoint: one line, no session run
    except (ApeError, ValidationError) as exc:
        if isinstance(exc, ValidationError):
            exc = validation_error(exc, "bad flow-run parameter", default="parameters", quote=False)
        message = str(exc)
        log.error("%s", message)
        return Failed(message=message)
    if overrides.note:
        log.info("note: %s", overrides.note)
    outcomes = [o.value for o in overrides.redo_outcomes] if overrides.redo_outcomes else None
    return run_benchmark(config, outcomes, overrides.only_models, overrides.new_run, checked=checked)


def _leave_ctrl_c_to_the_runner() -> None:
    """A Ctrl-C in the terminal of ``ape serve`` reaches this flow-run process too (one process
    group). The serving process turns it into a graceful stop that cancels this run (Prefect's
    runner, state Cancelled); handled here as well, it would end the run with a traceback."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
