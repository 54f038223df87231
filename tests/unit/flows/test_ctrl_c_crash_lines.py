"""The terminal leaves out the crash lines Prefect's engine logs for a Ctrl-C, and only those:
a crash from any other exception, and every other record, still shows."""

from __future__ import annotations

import logging

from ape.flows.logs import CtrlCCrashes


def record(name: str = "prefect.flow_runs", level: int = logging.ERROR) -> logging.LogRecord:
    message = "Crash detected! Execution was aborted by an interrupt signal."
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_a_crash_line_logged_while_a_ctrl_c_is_handled_is_left_out() -> None:
    keep = CtrlCCrashes()
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        assert not keep.filter(record())
        assert not keep.filter(record("prefect.task_runs"))
        assert keep.filter(record(level=logging.INFO))  # not an error line
        assert keep.filter(record("ape"))  # APE's own lines: never


def test_a_real_crash_still_shows() -> None:
    keep = CtrlCCrashes()
    try:
        raise RuntimeError("the model server went away")
    except RuntimeError:
        assert keep.filter(record())
    assert keep.filter(record())  # logged outside any exception
