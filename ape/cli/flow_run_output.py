"""The output folder of a flow run on the server, from the config it was started with.

``ape ctl`` takes a flow run's id and then advised ``ape status <that id>``, which takes
only folders; a flow run of APE (the benchmark's or a model's) carries its config as a
parameter, whose ``[run] output`` is the folder ``ape status`` reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ape.tasks.storage import prefect_api

__all__ = ["flow_run_output", "output_of"]


def output_of(parameters: Mapping[str, Any] | None) -> Path | None:
    """``[run] output`` of the config among a flow run's parameters; None when it has none."""
    config = (parameters or {}).get("config")
    run = config.get("run") if isinstance(config, Mapping) else None
    output = run.get("output") if isinstance(run, Mapping) else None
    return Path(output) if isinstance(output, str) and output.strip() else None


def flow_run_output(run_id: str) -> Path | None:
    """The output folder of the flow run ``run_id`` on the configured server; None without a
    server, without such a flow run, or when its parameters name no folder that exists here."""
    from ape.server import existing_api_url

    if not existing_api_url():
        return None
    not_found, _ = prefect_api.object_errors()
    try:
        with prefect_api.sync_client() as client:
            flow_run = client.read_flow_run(uuid.UUID(run_id))
    except (not_found, ValueError):
        return None
    folder = output_of(flow_run.parameters)
    return folder if folder is not None and folder.is_dir() else None
