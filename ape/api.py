"""The Python API behind ``ape.run``: the same run as ``ape run``, returning the report."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ape.launch import launch
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.schemas.report import Envelope
from ape.tasks.storage.config_file import load_config

log = logging.getLogger("ape")


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
    if not isinstance(config, ApeConfig):
        config = load_config(config, overrides)
    elif overrides:
        raise ApeError("overrides apply to a config file; edit the ApeConfig instead", where="ape.run(overrides=...)")
    state = launch(config, api="reuse", command=False)
    from ape.flows.states import items_failed  # deferred: Prefect is imported by launch, after its settings

    failed = items_failed(state)
    if failed is not None:
        log.warning("%s", failed)
    report = Path(config.run.output) / "report.json"
    return Envelope.model_validate_json(report.read_text(encoding="utf-8"))
