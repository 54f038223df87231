"""A checker that raises is reported at its own file and line: in the one-line error on the
terminal and in run.log, in sessions.log, and (under --debug) with its traceback."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from ape.flows.progress import Tally, report_errors
from ape.schemas.results import CheckStatus, ErrorInfo, Outcome, OutputBatch, SessionResult
from ape.schemas.transcript import EntryKind, TranscriptEntry
from ape.tasks.checking.check import run_check
from ape.tasks.storage.transcripts import format_entry

CHECKER = """\
def check(item, solution):
    counts = {}
    return counts["population"] == solution
"""


def _checker(tmp_path: Path):
    path = tmp_path / "my_checker.py"
    path.write_text(CHECKER, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("my_checker_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check, path


def test_check_error_names_the_checkers_file_and_line(tmp_path: Path) -> None:
    check, path = _checker(tmp_path)
    for timeout in (None, 5.0):  # the checker runs in the caller's thread or under a time limit
        result = run_check(check, {"id": "c1"}, 3, timeout_s=timeout)
        assert result.status is CheckStatus.ERROR and result.error is not None
        assert result.error.where == f"{path}:3 in check"
        assert result.error.line() == f"KeyError: 'population' (at {path}:3 in check)"
        assert result.error.traceback is not None and 'counts["population"]' in result.error.traceback


def test_the_location_reaches_the_terminal_run_log_and_sessions_log(tmp_path: Path, caplog) -> None:
    check, path = _checker(tmp_path)
    result = run_check(check, {"id": "c1"}, 3)
    session = SessionResult(item_id="c1", run_index=0, model_id="m", outcome=Outcome.SOLVED, check=result)
    batch = OutputBatch(item_id="c1", model_id="m", sessions=[session])
    with caplog.at_level(logging.DEBUG, logger="ape"):
        report_errors(batch, Tally(total=1))
    lines = [r.getMessage() for r in caplog.records]
    assert f"item c1 run 0: check error: KeyError: 'population' (at {path}:3 in check)" in lines
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 1 and "Traceback" in debug[0] and f'File "{path}", line 3' in debug[0]
    entry = TranscriptEntry(kind=EntryKind.CHECK, t=0.1, content="ERROR", error=result.error)
    assert f"    ! KeyError: 'population' (at {path}:3 in check)" in format_entry(entry)


def test_an_error_inside_a_library_called_by_the_checker_points_at_the_checkers_line(tmp_path: Path) -> None:
    path = tmp_path / "lib_checker.py"
    path.write_text(
        "import json\n\n\ndef check(item, solution):\n    return json.loads('{not json')\n", encoding="utf-8"
    )
    spec = importlib.util.spec_from_file_location("lib_checker_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = run_check(module.check, {"id": "c1"}, 3)
    assert result.error is not None and result.error.where == f"{path}:5 in check"


def test_a_library_error_is_placed_at_the_calling_line_and_a_plain_error_has_none() -> None:
    import json

    try:
        json.loads("{not json")
    except ValueError as exc:
        error = ErrorInfo.from_exception(exc)
    assert error.where is not None and error.where.endswith(
        "in test_a_library_error_is_placed_at_the_calling_line_and_a_plain_error_has_none"
    )
    assert ErrorInfo(type="ConnectionError", message="down").line() == "ConnectionError: down"
