"""The pieces that mark a killed run Crashed: the automation's shape, the heartbeat setting,
and the resumed run's pointer to the flow run it continues (the real kill is in
tests/integration/test_crash_marking.py)."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from ape import crash_marking
from ape.schemas.live import LIVE_FILE
from ape.tasks.storage.live_files import interrupted_flow_run


def test_the_automation_crashes_a_flow_run_whose_heartbeats_stop_and_spares_finished_ones() -> None:
    automation = crash_marking.crash_automation()
    trigger = automation.trigger
    assert trigger.posture == "Proactive"
    assert trigger.after == {"prefect.flow-run.heartbeat"}
    # a run that ends sends its final state in time: that closes the window, nothing fires
    assert {"prefect.flow-run.Completed", "prefect.flow-run.Failed", "prefect.flow-run.Crashed"} <= trigger.expect
    assert "prefect.flow-run.heartbeat" in trigger.expect
    assert trigger.for_each == {"prefect.resource.id"}  # one window per flow run
    assert trigger.within == timedelta(seconds=crash_marking.SILENCE_S)
    # three heartbeats: one late heartbeat on a busy machine is not a death
    assert crash_marking.SILENCE_S >= 3 * crash_marking.HEARTBEAT_S
    (action,) = automation.actions
    assert action.type == "change-flow-run-state" and action.state == "CRASHED"


def test_heartbeats_are_switched_on_unless_the_user_chose_an_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(crash_marking.HEARTBEAT_ENV, raising=False)
    crash_marking.enable_heartbeats()
    assert os.environ[crash_marking.HEARTBEAT_ENV] == str(crash_marking.HEARTBEAT_S)
    monkeypatch.setenv(crash_marking.HEARTBEAT_ENV, "120")
    crash_marking.enable_heartbeats()
    assert os.environ[crash_marking.HEARTBEAT_ENV] == "120"


def _live(folder: Path, state: str, flow_run_id: str | None = "f-1") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    live = {
        "version": 1,
        "benchmark": "b",
        "model": "m",
        "state": state,
        "flow_run_id": flow_run_id,
        "started_at": "2026-12-05T10:00:00Z",
        "updated_at": "2026-12-05T10:01:00Z",
        "elapsed_s": 60.0,
        "total": 10,
        "done": 3,
        "resumed": 0,
        "items_in_flight": 2,
        "sessions": 3,
        "passed": 2,
        "errors": 0,
        "check_errors": 0,
        "truncated": 0,
    }
    (folder / LIVE_FILE).write_text(json.dumps(live))


@pytest.mark.parametrize("state", ["running", "paused", "draining"])
def test_a_folder_left_mid_run_names_its_flow_run(tmp_path: Path, state: str) -> None:
    _live(tmp_path, state)
    assert interrupted_flow_run(tmp_path) == "f-1"


@pytest.mark.parametrize("state", ["finished", "stopped"])
def test_a_folder_whose_run_ended_names_none(tmp_path: Path, state: str) -> None:
    _live(tmp_path, state)
    assert interrupted_flow_run(tmp_path) is None


def test_a_missing_or_damaged_live_view_names_none(tmp_path: Path) -> None:
    assert interrupted_flow_run(tmp_path) is None
    (tmp_path / LIVE_FILE).write_text('{"state": "running", "flow_run_id": "x"')
    assert interrupted_flow_run(tmp_path) is None
