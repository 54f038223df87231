"""``mirror.json``: how far the Prefect mirror of a run is behind, while ``ape record`` (the
background catch-up after a run, or one run by hand) sends what the server had not taken in.

Written whole and atomically into the folder ``ape record`` was given (a run's output
folder, for the catch-up) when it starts, every few seconds while it sends, and when it ends.
``ape status`` reads it back as untrusted input (anyone who can write the folder can write
it): validated against this model, unknown keys and wrong types refused, nothing evaluated.

Fields:

- ``state``: ``sending`` while chains go out; ``complete`` when the server holds every chain
  of the folder's runs; ``incomplete`` when the wait for the server ended first (``ape
  record`` exits 1, ``stage_chains.json`` still names the rest); ``server_gone`` when the
  server stopped answering (the results are complete, the rest waits for ``ape record``).
- ``chains_total``: the session chains of the folder's runs, recorded or to be recorded;
  ``chains_done``: of them, those the server held when ``ape record`` started plus those sent
  since.
- ``pid``: the process sending (``ape status`` tells a live one from one that died).
- ``eta_s``: the chains left at the pace sent so far; None until there is a pace.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MIRROR_FILE = "mirror.json"

MirrorState = Literal["sending", "complete", "incomplete", "server_gone"]


class MirrorStatus(BaseModel):
    """The catch-up's progress, as ``mirror.json`` holds it (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    version: Literal[1] = 1
    state: MirrorState
    chains_total: int = Field(ge=0)
    chains_done: int = Field(ge=0)
    pid: int = Field(gt=0)
    started_at: datetime
    updated_at: datetime
    eta_s: float | None = Field(default=None, ge=0.0)
