"""``mirror.json``: what the catch-up writes of its progress, and the line ``ape status`` makes
of it (how far the Prefect UI is behind, or that it completed, or what completes it)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ape.schemas.errors import ApeError
from ape.schemas.mirror import MIRROR_FILE, MirrorStatus
from ape.server import process_alive
from ape.tasks.storage import mirror_status
from ape.tasks.storage.mirror_status import MirrorProgress, describe_mirror, read_mirror
from tests.helpers.processes import dead_pid


def _status(state: str, done: int = 14_200, total: int = 20_000, **extra: object) -> MirrorStatus:
    now = datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC)
    fields: dict = dict(
        state=state, chains_total=total, chains_done=done, pid=os.getpid(), started_at=now, updated_at=now
    )
    fields.update(extra)
    return MirrorStatus(**fields)


def test_the_catch_up_writes_its_pace_and_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(mirror_status.time, "monotonic", lambda: clock[0])
    progress = MirrorProgress(tmp_path, chains_total=1000, chains_done=200)
    first = progress.write("sending")
    assert (first.chains_done, first.eta_s) == (200, None)  # no pace yet
    clock[0] = 110.0
    progress.sent(200)  # 200 chains in 10 s: the 600 left take 30 s more
    written = read_mirror(tmp_path)
    assert written is not None and written.state == "sending"
    assert written.chains_done == 400 and written.eta_s == pytest.approx(30.0)
    assert written.pid == os.getpid()
    progress.write("complete")
    done = read_mirror(tmp_path)
    assert done is not None and (done.state, done.chains_done, done.eta_s) == ("complete", 1000, None)


def test_status_says_how_far_behind_and_when_it_completed(tmp_path: Path) -> None:
    line = describe_mirror(_status("sending", eta_s=31.6), tmp_path, alive=True)
    assert line.startswith("UI: 14,200 of 20,000 session chains recorded, the rest within about 32 s")
    assert f"pid {os.getpid()}" in line and str(tmp_path / "record.log") in line
    assert "within about 4 min" in describe_mirror(_status("sending", eta_s=250.0), tmp_path, alive=True)
    assert "within" not in describe_mirror(_status("sending"), tmp_path, alive=True)  # no pace known yet
    assert describe_mirror(_status("complete", done=20_000), tmp_path, alive=False) == (
        "UI: all 20,000 session chains recorded (completed 2026-12-07 01:02:03 UTC)"
    )


@pytest.mark.parametrize(
    ("state", "says"),
    [
        ("server_gone", "the Prefect server stopped answering"),
        ("incomplete", "had not taken in the rest"),
        ("sending", "ended before it was done"),  # its process is gone
    ],
)
def test_a_mirror_that_stopped_says_why_and_what_completes_it(tmp_path: Path, state: str, says: str) -> None:
    pid = dead_pid()
    line = describe_mirror(_status(state, pid=pid), tmp_path, alive=process_alive(pid))
    assert line.startswith("UI: 14,200 of 20,000 session chains recorded; ")
    assert says in line and f"`ape record {tmp_path}`" in line


@pytest.mark.parametrize(
    "text",
    [
        '{"state": "sending"}',
        json.dumps({**json.loads(_status("sending").model_dump_json()), "command": "rm -rf ~"}),
        json.dumps({**json.loads(_status("sending").model_dump_json()), "chains_done": -1}),
        "x" * 200_000,
    ],
    ids=["keys-missing", "unknown-key", "negative-count", "too-large"],
)
def test_a_file_ape_did_not_write_is_one_line_naming_it(tmp_path: Path, text: str) -> None:
    (tmp_path / MIRROR_FILE).write_text(text)
    with pytest.raises(ApeError) as caught:
        read_mirror(tmp_path)
    assert str(tmp_path / MIRROR_FILE) in str(caught.value) and "\n" not in str(caught.value)


def test_no_file_is_no_catch_up(tmp_path: Path) -> None:
    assert read_mirror(tmp_path) is None
