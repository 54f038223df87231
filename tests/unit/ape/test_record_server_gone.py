"""`ape record` whose server stops answering mid-way: one line, exit 1 at once, nothing drained."""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx
import pytest

from ape.cli import record
from ape.cli.exit_codes import EXIT_FAILED


class Exited(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def test_a_server_gone_mid_way_ends_the_command_at_once_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(folder: Path) -> int:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    def hard_exit(code: int) -> None:  # os._exit: no atexit handlers (Prefect's events drain)
        raise Exited(code)

    monkeypatch.setattr(record, "record", refused)
    monkeypatch.setattr(record.os, "_exit", hard_exit)
    with pytest.raises(Exited) as ended:
        record.main(argparse.Namespace(folder=tmp_path))
    assert ended.value.code == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "the Prefect server stopped answering (ConnectError" in err
    assert f"run `ape record {tmp_path}` again" in err


def test_other_errors_are_not_taken_for_a_gone_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(folder: Path) -> int:
        raise ValueError("a bug")

    monkeypatch.setattr(record, "record", broken)
    with pytest.raises(ValueError, match="a bug"):
        record.main(argparse.Namespace(folder=tmp_path))


def test_a_server_gone_mid_way_is_what_ape_status_then_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The catch-up had started sending (its mirror.json says so) when the server went: the file
    says the server is gone, so `ape status` says why the UI stays behind and what completes it."""
    from ape.tasks.storage.mirror_status import describe_mirror, read_mirror

    def gone_mid_way(folder: Path) -> int:
        progress = record._start_progress(folder, 100, 50, pending=[object()])
        progress.sent(20)
        assert (read_mirror(folder) or pytest.fail("no mirror.json")).state == "sending"
        raise httpx.ConnectError("[Errno 111] Connection refused")

    def hard_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(record, "record", gone_mid_way)
    monkeypatch.setattr(record.os, "_exit", hard_exit)
    with pytest.raises(Exited):
        record.main(argparse.Namespace(folder=tmp_path))
    status = read_mirror(tmp_path)
    assert status is not None and status.state == "server_gone"
    assert (status.chains_done, status.chains_total) == (120, 150)
    assert "the Prefect server stopped answering" in describe_mirror(status, tmp_path, alive=False)
