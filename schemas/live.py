"""``live.json``: how far one model's run has got, rewritten every few seconds while it goes.

Each model's output folder holds one (``ape status`` reads it; the Prefect UI shows the same
numbers as the flow run's artifacts, :mod:`ape.flows.live.view`). Written whole and atomically
(a reader sees the old or the new file), owner-only like every output of a run. What
``ape status`` reads back is untrusted (anyone who can write the folder can write it), so it
is validated against this model: unknown keys, wrong types, negative counts and non-finite
numbers are refused, and no pickle is ever involved.

Fields, per model:

- ``state``: ``running`` while the run goes (``paused`` or ``draining`` while ``ape ctl``
  holds it), ``finished`` when its loop ended over every
  item, ``stopped`` when it ended early (an error, a budget, Ctrl-C, a cancel). A run killed
  outright leaves ``running`` behind, its ``updated_at`` no longer moving.
- ``total``, ``done`` (items; ``resumed`` of them saved by an earlier run), ``items_in_flight``.
- ``sessions``, ``passed``, ``pass_rate`` with its 95% interval ``pass_rate_low`` /
  ``pass_rate_high`` (the report's interval, ``interval_method``), over every saved session,
  resumed ones included: at the end they are the report's numbers.
- ``errors`` (sessions whose outcome is ERROR), ``check_errors``, ``truncated`` (TRUNCATED).
- ``requests_in_flight`` (model requests going now, retries included; None where this
  process cannot see them: a Dask run's calls are made by its workers),
  ``requests_per_minute``, ``tokens_per_minute`` (input plus output tokens of the sessions
  saved), ``items_per_minute``: over the last minute; None until there is something to time.
- ``eta_s``: the items left at the last minute's pace; None while no pace is known.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LIVE_FILE = "live.json"

State = Literal["running", "paused", "draining", "finished", "stopped"]

Count = Field(ge=0)
Share = Field(default=None, ge=0.0, le=1.0)
Rate = Field(default=None, ge=0.0)


class LiveStatus(BaseModel):
    """One model's progress, as ``live.json`` holds it (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    version: Literal[1] = 1
    benchmark: str = Field(max_length=1000)
    model: str = Field(max_length=1000)
    state: State
    flow_run_id: str | None = Field(default=None, max_length=100)
    started_at: datetime
    updated_at: datetime
    elapsed_s: float = Field(ge=0.0)
    total: int = Count
    done: int = Count
    resumed: int = Count
    items_in_flight: int = Count
    sessions: int = Count
    passed: int = Count
    pass_rate: float | None = Share
    pass_rate_low: float | None = Share
    pass_rate_high: float | None = Share
    interval_method: str = Field(default="none", max_length=40)
    errors: int = Count
    check_errors: int = Count
    truncated: int = Count
    requests_in_flight: int | None = Field(default=None, ge=0)
    requests_per_minute: float | None = Rate
    tokens_per_minute: float | None = Rate
    items_per_minute: float | None = Rate
    eta_s: float | None = Rate
