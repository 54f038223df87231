"""An output folder with results of runs by hand and new runs in runs/: the report takes the
latest run (or the one named), says so in one line, and never pools runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ape.tasks.report.sessions_table import load_sessions
from ape.tasks.storage.run_files import find_runs
from tests.unit.report.test_report import batch, session, write_results

OLD, NEW = "20260101T030000Z-aaaa1111", "20260102T030000Z-bbbb2222"


def _output(tmp_path: Path) -> Path:
    top = tmp_path / "output"
    for model in ("atlas", "boreas"):
        for folder, correct in ((top, False), (top / "runs" / OLD, False), (top / "runs" / NEW, True)):
            items = [batch(model, f"c{i:02d}", [session(model, f"c{i:02d}", correct=correct)]) for i in range(40)]
            write_results(folder / model / "results.jsonl", items)
    return top


def test_the_latest_run_is_reported_with_one_line(tmp_path: Path, ape_log) -> None:
    top = _output(tmp_path)
    ape_log.set_level(logging.INFO, logger="ape")
    runs = find_runs([top])
    assert {r.folder for r in runs} == {top / "runs" / NEW / "atlas", top / "runs" / NEW / "boreas"}
    lines = [r.getMessage() for r in ape_log.records]
    assert lines == [
        f"{top}: reporting the latest run, {NEW}; to use other results, name them instead: one of the 2 runs, "
        f"{top / 'runs'}/<run id>; or the results of runs by hand, {top / 'atlas'} {top / 'boreas'}"
    ]
    sessions = load_sessions([top])  # what ape report reads
    assert len(sessions) == 2 * 40 and sessions["correct"].all()  # the new run's answers only
    assert not any(r.levelno >= logging.WARNING for r in ape_log.records)  # no "is in both ..."


def test_the_latest_link_wins_and_a_named_run_or_folder_is_taken_as_given(tmp_path: Path, ape_log) -> None:
    top = _output(tmp_path)
    ape_log.set_level(logging.INFO, logger="ape")
    os.symlink(Path("runs") / OLD, top / "latest")  # the newest finished run is the older id
    assert {r.folder.parent.name for r in find_runs([top])} == {OLD}
    ape_log.clear()
    assert {r.folder.parent.name for r in find_runs([top / "runs" / NEW])} == {NEW}
    assert {r.folder for r in find_runs([top / "atlas", top / "boreas"])} == {top / "atlas", top / "boreas"}
    assert not ape_log.records  # nothing to decide, nothing said
