"""The control channels and the run's control (ape.tasks.storage.control_channel, ape.flows.live.control), without a server."""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from uuid import uuid4

import pytest

from ape.flows.live.control import RunControl, recorded_events
from ape.schemas.control import CONTROL_FILE
from ape.tasks.storage.control_channel import Refused, read_request_file, request_of_variable, write_request_file


def _write(folder: Path, payload: dict, mode: int = 0o600) -> Path:
    path = folder / CONTROL_FILE
    path.write_text(json.dumps(payload))
    path.chmod(mode)
    return path


def test_a_written_request_is_owner_only_and_reads_back(tmp_path: Path) -> None:
    path = write_request_file(tmp_path, "pause", "ape ctl by alice")
    assert path.stat().st_mode & 0o777 == 0o600
    request = read_request_file(tmp_path)
    assert request is not None and request.action == "pause" and request.by == "ape ctl by alice"


@pytest.mark.parametrize(
    ("payload", "mode", "said"),
    [
        ({"action": "pause", "by": "x", "at": "2030-01-01T00:00:00Z"}, 0o620, "writable by group or others"),
        ({"action": "pause", "by": "x", "at": "2030-01-01T00:00:00Z", "code": "import os"}, 0o600, "code"),
        ({"action": "explode", "by": "x", "at": "2030-01-01T00:00:00Z"}, 0o600, "action"),
        ({"action": "pause", "by": "\x1b[31mred", "at": "2030-01-01T00:00:00Z"}, 0o600, "by"),
    ],
)
def test_a_hostile_request_file_is_refused_naming_the_file(tmp_path: Path, payload: dict, mode: int, said: str) -> None:
    _write(tmp_path, payload, mode)
    with pytest.raises(Refused, match=said) as caught:
        read_request_file(tmp_path)
    assert CONTROL_FILE in str(caught.value)


def test_a_link_is_refused_and_an_earlier_runs_request_ignored(tmp_path: Path) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    _write(tmp_path, {"action": "drain", "by": "x", "at": old.isoformat()})
    assert read_request_file(tmp_path, since=datetime.now(UTC)) is None  # a drain left by an earlier run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / CONTROL_FILE).symlink_to(tmp_path / CONTROL_FILE)
    with pytest.raises(Refused, match="link"):
        read_request_file(elsewhere)


def test_a_variable_value_must_be_an_action_and_its_tag_names_who_asked() -> None:
    with pytest.raises(Refused, match="not one of run, pause, drain"):
        request_of_variable("rm -rf /", [], "t1")
    with pytest.raises(Refused):
        request_of_variable({"action": "pause"}, [], "t1")
    assert request_of_variable("pause", ["ape-ctl:alice:pause"], "t1").by == "ape ctl by alice"
    assert request_of_variable("run", ["ape-ctl:alice:pause"], "t2").by == "Prefect variable"  # a UI edit after
    assert request_of_variable("pause", ["ape-ctl:<b>x</b>:pause"], "t3").by == "Prefect variable"


class FlakyServer:
    """A client whose variable read fails like a server restarting, then answers ``value``."""

    def __init__(self, failures: int, value: str) -> None:
        self.failures = failures
        self.value = value
        self.updated = "t0"

    def read_variable_by_name(self, name: str):
        if self.failures:
            self.failures -= 1
            raise OSError("503 Service Unavailable")
        return SimpleNamespace(value=self.value, tags=[], updated=self.updated)


def test_server_errors_are_retried_told_once_and_a_change_is_acted_on_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    control = RunControl(out_dir=tmp_path, model="m", flow_run_id=uuid4(), client=lambda: None)
    server = FlakyServer(failures=3, value="run")
    with caplog.at_level(logging.WARNING, logger="ape"):
        for _ in range(4):
            control.poll(server)  # three 503s, then the value the run created
    assert control.mode == "run" and control.events == []
    assert sum("control variable not read" in r.message for r in caplog.records) == 1
    server.value, server.updated = "pause", "t1"
    control.poll(server)
    control.poll(server)
    assert control.mode == "pause" and [e.action for e in control.events] == ["pause"]
    control.apply("run", "Prefect UI or API (Resume)")  # the UI resumed: the variable still says pause
    control.poll(server)
    assert control.mode == "run"  # not paused again by a request already acted on
    server.value, server.updated = "drain", "t2"
    control.poll(server)
    control.apply("run", "someone")
    assert control.mode == "drain"  # a drain is final
    assert [e.action for e in control.events] == ["pause", "resume", "drain"]


def test_the_file_channel_alone_pauses_and_resumes(tmp_path: Path) -> None:
    control = RunControl(out_dir=tmp_path, model="m", flow_run_id=None, client=lambda: None)
    control.poll(None)
    assert control.mode == "run"
    write_request_file(tmp_path, "pause", "ape ctl by bob")
    control.poll(None)
    assert control.mode == "pause" and control.events[-1].by == "ape ctl by bob"
    os.utime(tmp_path / CONTROL_FILE)  # the same request again is not a new one
    control.poll(None)
    assert len(control.events) == 1


def test_a_resumed_runs_earlier_actions_are_kept_and_a_planted_entry_dropped() -> None:
    """metadata.json is read back: only entries that are control events survive into the log."""
    good = {"action": "drain", "by": "ape ctl by alice", "at": "2026-12-04T10:00:00+00:00", "changed": "drained"}
    previous = {"control": [good, {"action": "exec", "by": "x", "at": "now", "changed": ""}, "text", {**good, "x": 1}]}
    kept = recorded_events(previous)
    assert [e.action for e in kept] == ["drain"] and kept[0].by == "ape ctl by alice"
    assert recorded_events({"control": "not a list"}) == [] and recorded_events({}) == []


class _StuckServer:
    """A Prefect client whose server takes the variable and then stops answering."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.deleting = threading.Event()

    def __call__(self) -> _StuckServer:
        return self

    def __enter__(self) -> _StuckServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read_variable_by_name(self, name: str) -> None:
        return None

    def delete_variable_by_name(self, name: str) -> None:
        self.deleting.set()
        self.release.wait(60)


def test_the_runs_end_does_not_wait_for_a_server_that_stopped_answering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C waited minutes while Prefect's client retried the control variable's removal on a
    busy server: the end now waits END_WAIT_S for it and says the variable was left."""
    import ape.flows.live.control as control_module

    monkeypatch.setattr(control_module, "END_WAIT_S", 0.2)
    monkeypatch.setattr(control_module.prefect_api, "create_variable", lambda *a, **k: None)
    server = _StuckServer()
    control = RunControl(out_dir=tmp_path, model="m", flow_run_id=uuid4(), client=server, every_s=3600)
    with caplog.at_level(logging.WARNING, logger="ape"):
        with control:
            pass
    server.release.set()
    assert server.deleting.is_set()  # it was asked, and the end went on without its answer
    assert "did not answer within" in caplog.text and "is left on it" in caplog.text
