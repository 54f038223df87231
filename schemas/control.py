"""Control of a running evaluation: pause, resume, drain (see ``docs/live-control.md``).

Two channels carry a request to a model's running loop (:mod:`ape.flows.live.control`), read
about once a second, off the loop that saves:

- ``control.json`` in the model's output folder (:data:`CONTROL_FILE`), written by
  ``ape ctl ACTION OUTPUT``: one :class:`ControlRequest`. It works with or without a server.
  Anyone who can write the folder could write it, so it is read only when it is a plain file
  owned by this user and not writable by group or others, and is validated against the
  model (unknown keys, an unknown action, a long or odd ``by`` are refused). A request older
  than the run's loop is an earlier run's, and is ignored.
- with a Prefect server, a **variable** named after the model's flow run
  (:func:`variable_name`), created by the run with the value ``"run"`` and deleted when it
  ends: editable on the UI's *Variables* page, or set by ``ape ctl ACTION FLOW_RUN``. Its
  value must be one of :data:`ACTIONS` (a JSON string); anything else is logged once and
  ignored. A tag ``ape-ctl:<user>:<action>`` (set by ``ape ctl``) names who asked.

A paused flow run's *Resume* button (Prefect UI, or ``POST /flow_runs/{id}/resume``) resumes
it too. Each action the loop takes is a :class:`ControlEvent`, listed in the model's
``metadata.json`` (``control``) and in ``report.json``'s summary (``control``, per model).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

CONTROL_FILE = "control.json"

Action = Literal["run", "pause", "drain"]
ACTIONS: tuple[Action, ...] = ("run", "pause", "drain")

VARIABLE_PREFIX = "ape-control-"
CTL_TAG = "ape-ctl"
# who asked, as a file or a tag may say it: printable, short, no markup or escapes
BY_PATTERN = r"^[A-Za-z0-9 ._@:()-]{1,100}$"
USER_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class ControlRequest(BaseModel):
    """What ``control.json`` holds: the action wanted now, who asked, when."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    action: Action
    by: str = Field(pattern=BY_PATTERN)
    at: datetime


class ControlEvent(BaseModel):
    """One action the run took: ``pause``, ``paused`` (in flight saved, the flow run Paused),
    ``resume``, ``drain``; ``by`` whom or what, ``at`` when (UTC), what ``changed``."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["pause", "paused", "resume", "drain"]
    by: str
    at: datetime
    changed: str


def variable_name(flow_run_id: UUID | str) -> str:
    """The Prefect variable that controls the model's flow run ``flow_run_id``."""
    return f"{VARIABLE_PREFIX}{UUID(str(flow_run_id))}"


def ctl_tag(user: str, action: Action) -> str:
    """The tag ``ape ctl`` sets with a variable's value: who asked for ``action``."""
    return f"{CTL_TAG}:{user}:{action}"
