"""``ape ctl pause|resume|drain RUN``: steer a running evaluation (see docs/live-control.md).

- ``pause``: no new item starts; the items in flight finish and are saved; then the model's
  flow run shows *Paused* (with a server) and the run waits.
- ``resume``: the run goes on from the next unsaved item (no model call for saved ones).
- ``drain``: no new item starts; those in flight finish and are saved; the run ends
  resumably (exit code 4), and the same ``ape run`` (or ``ape retry``) goes on.

RUN is the run's output folder (as ``ape status`` takes it: the ``[run] output`` folder, a
run folder under ``runs/``, one model's folder): the request goes to the ``control.json`` of
each model going there, and works with or without a server. Or RUN is a flow run's id or
name (the benchmark's or a model's) on a Prefect server: the request goes to the control
variable of each model flow run going in it. The run acts within about a second.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

from ape.cli.flow_run_output import output_of
from ape.cli.status import is_uuid
from ape.schemas.control import Action
from ape.schemas.errors import ApeError
from ape.tasks.common.inert import terminal_safe
from ape.tasks.storage import prefect_api

NAME = "ctl"
HELP = "pause, resume or drain a running evaluation (by its output folder, or its flow run on a server)"

ACTION_OF: dict[str, Action] = {"pause": "pause", "resume": "run", "drain": "drain"}
HINT = "give the run's output folder ([run] output, as `ape status` takes it), or a flow run's id or name"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=sorted(ACTION_OF), help="pause, resume or drain")
    p.add_argument("run", metavar="RUN", help="the run's output folder, or a flow run's id or name on the server")


def main(args: argparse.Namespace) -> int:
    return ctl(args.action, args.run)


def ctl(verb: str, run: str) -> int:
    from ape.tasks.storage.control_channel import current_user

    action = ACTION_OF[verb]
    user = current_user()
    folder: Path | None = Path(run)
    if Path(run).is_dir():
        models = _by_folder(Path(run), action, user)
    elif Path(run).exists():
        raise ApeError("not a folder", where=run, hint=HINT)
    else:
        models, folder = _by_flow_run(run, action, user)
    for line in models:
        print(terminal_safe(f"{verb}: asked {line}"))
    print(terminal_safe(f"The run acts within about a second{_after(verb)}; {shown_by(folder)}."))
    return 0


def shown_by(folder: Path | None) -> str:
    """Where the run's state shows: ``ape status`` of its output folder (never of a flow run id,
    which it does not take), or the flow run's page when the folder is not known here."""
    if folder is None:
        return "the flow run's page in the Prefect UI shows it"
    return f"`ape status {folder}` shows it"


def _after(verb: str) -> str:
    return {
        "pause": ": items in flight finish and are saved, then it waits for `ape ctl resume`",
        "drain": ": items in flight finish and are saved, then it ends (exit code 4); the same `ape run` goes on",
        "resume": "",
    }[verb]


def _by_folder(folder: Path, action: Action, user: str) -> list[str]:
    """Write the request to each model of the folder whose loop is going (its live.json says
    ``running``, ``paused`` or ``draining``)."""
    from ape.tasks.storage.control_channel import write_request_file
    from ape.tasks.storage.live_files import find_live, read_live

    going = [(path.parent, read_live(path)) for path in find_live(folder)]
    going = [(model_dir, live) for model_dir, live in going if live.state in ("running", "paused", "draining")]
    if not going:
        raise ApeError("no model of this run is going (each live.json says finished or stopped)", where=str(folder))
    asked = []
    for model_dir, live in going:
        write_request_file(model_dir, action, f"ape ctl by {user}")
        asked.append(f"{live.model} ({model_dir})")
    return asked


def _by_flow_run(run: str, action: Action, user: str) -> tuple[list[str], Path | None]:
    """Set the control variable of each model flow run going in the flow run ``run``; returns
    what was asked and the run's output folder (from its config, when it exists here)."""
    from ape.server import existing_api_url

    if not existing_api_url():
        raise ApeError(
            "no such folder, and no Prefect server is configured to look up a flow run by that id or name",
            where=run,
            hint=HINT,
        )

    from ape.schemas.control import variable_name
    from ape.tasks.storage.control_channel import set_variable

    with prefect_api.sync_client() as client:
        found = _find_flow_run(client, run)
        models = _model_runs(client, found)
        if not models:
            raise ApeError(f"flow run {found.name} has no model going (running or paused)", where=run)
        asked = []
        for flow_run in models:
            if client.read_variable_by_name(variable_name(flow_run.id)) is None:
                raise ApeError(
                    f"flow run {flow_run.name} has no control variable {variable_name(flow_run.id)}",
                    where=run,
                    hint="it runs without a server's control (an older APE?); give its output folder",
                )
            set_variable(client, flow_run.id, action, user)
            asked.append(f"{flow_run.name} (flow run {flow_run.id})")
    folder = output_of(found.parameters)
    return asked, folder if folder is not None and folder.is_dir() else None


def _find_flow_run(client: Any, run: str) -> Any:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.exceptions import ObjectNotFound

    if is_uuid(run):
        try:
            return client.read_flow_run(uuid.UUID(run))
        except ObjectNotFound:
            raise ApeError("no flow run with this id on the server", where=run, hint=HINT) from None
    found = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run])), limit=2)
    if not found:
        raise ApeError("no such folder, and no flow run of this name on the server", where=run, hint=HINT)
    if len(found) > 1:
        raise ApeError("more than one flow run has this name", where=run, hint="give its id instead")
    return found[0]


def _model_runs(client: Any, flow_run: Any) -> list[Any]:
    """The flow run itself when it is a model's (evaluate), else its model subflow runs going now."""
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    going = FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PAUSED]))
    evaluate = FlowFilter(name=FlowFilterName(any_=["evaluate"]))
    own = client.read_flow_runs(
        flow_filter=evaluate, flow_run_filter=FlowRunFilter(id={"any_": [flow_run.id]}, state=going)
    )
    if own:
        return list(own)
    children = FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run.id]), state=going)
    return list(client.read_flow_runs(flow_filter=evaluate, flow_run_filter=children))
