"""What a run says of the stage chains it left out (stage_chains.json, the report's line) and
how ``ape record`` rebuilds them from the saved results, without a Prefect server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ape import cli
from ape.schemas.report import Envelope, StageChainsEntry
from ape.schemas.results import CheckResult, CheckStatus, Outcome, OutputBatch, SessionResult
from ape.tasks.recording.afterwards import rebuild, session_marks
from ape.tasks.recording.stage_runs import STAGES
from ape.tasks.report.markdown import markdown_table
from ape.tasks.storage.stage_chains import CHAINS_FILE, note_flow_run, read_chains, record_folder


def _session(run_index: int, **extra: object) -> SessionResult:
    fields: dict = {
        "item_id": "q1",
        "run_index": run_index,
        "model_id": "m",
        "outcome": Outcome.SOLVED,
        "check": CheckResult(status=CheckStatus.PASSED, score=1.0, runtime_s=0.25),
        "score": 1.0,
        "correct": True,
        "latency_s": 2.0,
    }
    fields.update(extra)
    return SessionResult(**fields)


def test_the_file_keeps_earlier_flow_runs_of_the_results_it_resumed(tmp_path: Path) -> None:
    note_flow_run(tmp_path, "m", "flow-1", 3, [("q1", 0), ("q2", 1)])
    note_flow_run(tmp_path, "m", "flow-2", 5, [])  # a rerun in place that resumed: flow-1 stays
    chains = read_chains(tmp_path)
    assert chains is not None
    assert [run.flow_run_id for run in chains.flow_runs] == ["flow-1", "flow-2"]
    assert (chains.chains_recorded, chains.chains_left_out) == (8, 2)
    note_flow_run(tmp_path, "m", "flow-2", 6, [])  # the same flow run again (a retry): replaced
    chains = read_chains(tmp_path)
    assert chains is not None and [run.chains_recorded for run in chains.flow_runs] == [3, 6]
    data = json.loads((tmp_path / CHAINS_FILE).read_text())
    assert data["flow_runs"][0]["left_out"] == [{"item_id": "q1", "run_index": 0}, {"item_id": "q2", "run_index": 1}]
    assert not list(tmp_path.glob(f".{CHAINS_FILE}.*"))  # the temporary file was renamed, none left
    note_flow_run(tmp_path, "m", "flow-3", 0, [])  # resumed with nothing to run: no entry of its own
    chains = read_chains(tmp_path)
    assert chains is not None and [run.flow_run_id for run in chains.flow_runs] == ["flow-1", "flow-2"]
    note_flow_run(tmp_path, "m", "flow-4", 2, [], keep_earlier=False)  # results started afresh
    chains = read_chains(tmp_path)
    assert chains is not None and [run.flow_run_id for run in chains.flow_runs] == ["flow-4"]


def test_a_damaged_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / CHAINS_FILE).write_text('{"flow_runs": [{"chains_recorded": 1}]}')
    with pytest.raises(Exception, match="stage_chains.json is damaged"):
        read_chains(tmp_path)
    assert read_chains(tmp_path / "elsewhere") is None


def test_a_plain_session_is_rebuilt_with_the_live_states_and_its_saved_times() -> None:
    marks = session_marks(_session(0), end=1000.0)
    assert [m.stage for m in marks] == list(STAGES)
    assert [(m.state_type, m.state_name) for m in marks] == [
        ("COMPLETED", "Completed"),
        ("COMPLETED", "Completed"),
        ("COMPLETED", "Completed"),
        ("COMPLETED", "Passed"),
        ("COMPLETED", "Completed"),
    ]
    render, solve, adapt, check, score = marks
    assert render.start == pytest.approx(1000.0 - 2.25) and solve.end - solve.start == pytest.approx(2.0)
    assert adapt.start == adapt.end == solve.end
    assert check.end - check.start == pytest.approx(0.25) and score.end == pytest.approx(1000.0)
    assert score.message == "score 1"


def test_cached_and_unusual_sessions_keep_their_states() -> None:
    cached = session_marks(_session(0, cached=True), end=10.0)
    assert [m.state_name for m in cached] == ["Completed", "Cached", "Cached", "Passed", "Completed"]
    wrong = session_marks(_session(0, check=CheckResult(status=CheckStatus.FAILED), score=0.0), end=10.0)
    assert wrong[3].state_name == "Incorrect"
    parse = session_marks(_session(0, outcome=Outcome.PARSING_FAILED, check=None, score=0.0), end=10.0)
    assert [(m.state_type, m.state_name) for m in parse[2:4]] == [("FAILED", "Failed"), ("COMPLETED", "Skipped")]


def test_an_items_sessions_are_laid_end_to_end_before_it_was_saved(tmp_path: Path) -> None:
    saved = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    batch = OutputBatch(item_id="q1", model_id="m", sessions=[_session(0), _session(1)], saved_at=saved)
    results = tmp_path / "results.jsonl"
    results.write_text(batch.model_dump_json() + "\n")
    marks = rebuild(results, [("q1", 0), ("q1", 1), ("q9", 0)])
    assert set(marks) == {("q1", 0), ("q1", 1)}  # q9 has no saved result
    assert marks[("q1", 1)][-1].end == pytest.approx(saved.timestamp())
    assert marks[("q1", 0)][-1].end == pytest.approx(marks[("q1", 1)][0].start)


def test_the_report_says_how_many_and_the_command_that_records_the_rest(tmp_path: Path) -> None:
    left = Envelope(stage_chains={"m": StageChainsEntry(recorded=7, left_out=3, record_command="ape record out")})
    text = markdown_table(left)
    assert "7 recorded, 3 left out" in text and "`ape record out`" in text
    every = Envelope(stage_chains={"m": StageChainsEntry(recorded=10)})
    assert "all 10 recorded" in markdown_table(every) and "ape record" not in markdown_table(every)
    assert "Stage chains" not in markdown_table(Envelope())  # results from before the file: no line
    (tmp_path / "model-a").mkdir()
    assert record_folder(tmp_path / "model-a", tmp_path) == tmp_path
    assert record_folder(tmp_path, tmp_path) == tmp_path
    assert record_folder(tmp_path / "model-a", tmp_path / "other") == tmp_path / "model-a"


def _output(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps({"completed_ids": [], "errored_ids": [], "model": "m"}))
    return folder


def test_record_refuses_what_it_cannot_record_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.main(["record", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "plain").mkdir()
    assert cli.main(["record", str(tmp_path / "plain")]) == 2
    assert "not a run or output folder" in capsys.readouterr().err
    old = _output(tmp_path / "old")
    assert cli.main(["record", str(old)]) == 2
    assert "no stage_chains.json here" in capsys.readouterr().err
    note_flow_run(old, "m", "flow-1", 4, [])
    assert cli.main(["record", str(old)]) == 0
    assert "nothing left to record" in capsys.readouterr().out
    note_flow_run(old, "m", "flow-1", 4, [("q1", 0)])
    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape-home"))  # no server of its own running
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setattr("ape.server.configured_api_url", lambda: None)
    assert cli.main(["record", str(old)]) == 2
    assert "no Prefect server reachable" in capsys.readouterr().err


def test_redone_sessions_are_counted_once_however_many_retries(tmp_path):
    """60 sessions; each retry redoes the same 30 (their answers were cut): the file must
    still count 60 recorded, not 90, 120, ... (report.json's ``recorded`` grew per retry)."""
    note_flow_run(tmp_path, "m", "first", 60, [])
    redone = {f"i{n}": 1 for n in range(30)}
    for flow_run in ("second", "third", "fourth"):
        chains = note_flow_run(tmp_path, "m", flow_run, 30, [], superseded=redone)
        assert chains.chains_recorded == 60, flow_run
    assert chains.chains_left_out == 0


def test_a_redone_item_left_out_earlier_loses_its_left_out_entry_not_a_recorded_count(tmp_path):
    note_flow_run(tmp_path, "m", "first", 8, [("a", 0), ("b", 0)])  # 10 sessions, 2 left out
    chains = note_flow_run(tmp_path, "m", "second", 1, [], superseded={"a": 1})
    assert chains.chains_left_out == 1  # b's chain still waits for ape record
    assert chains.chains_recorded == 9  # 8 earlier + a's new one


def test_a_session_left_out_whole_gets_its_own_task_run_rebuilt() -> None:
    from ape.tasks.recording.afterwards import session_mark

    chain = session_marks(_session(0), end=1000.0)
    mark = session_mark(chain)
    assert (mark.stage, mark.state_type, mark.state_name) == ("session", "COMPLETED", "Completed")
    assert (mark.start, mark.end) == (chain[1].start, chain[2].end)  # solve -> adapt, as the run records it
    assert session_mark(session_marks(_session(0, cached=True), end=10.0)).state_name == "Cached"


def _live(folder: Path, state: str, flow_run_id: str | None, started: datetime) -> None:
    from ape.schemas.live import LIVE_FILE, LiveStatus

    counts = dict.fromkeys(("total", "done", "resumed", "items_in_flight", "sessions", "passed"), 0)
    counts.update(errors=0, check_errors=0, truncated=0)
    live = LiveStatus(
        benchmark="t",
        model="m",
        state=state,
        flow_run_id=flow_run_id,
        started_at=started,
        updated_at=started,
        elapsed_s=0,
        **counts,
    )
    (folder / LIVE_FILE).write_text(live.model_dump_json())


def _saved(path: Path, item: str, at: datetime, sessions: int = 1) -> None:
    batch = OutputBatch(
        item_id=item, model_id="m", sessions=[_session(i, item_id=item) for i in range(sessions)], saved_at=at
    )
    with path.open("a") as handle:
        handle.write(batch.model_dump_json() + "\n")


KILLED = "0b7e2c1e-5f0a-4c59-9b1e-3d2f7a6c8e01"


def test_a_killed_run_is_named_from_the_sessions_it_saved_once(tmp_path: Path) -> None:
    from ape.tasks.storage.stage_chains import note_interrupted

    started = datetime(2026, 12, 7, 1, 0, tzinfo=UTC)
    results = tmp_path / "results.jsonl"
    _saved(results, "old", datetime(2026, 12, 6, tzinfo=UTC))  # an earlier run's, resumed by the killed one
    _saved(results, "q1", datetime(2026, 12, 7, 1, 1, tzinfo=UTC), sessions=2)
    _saved(results, "q2", datetime(2026, 12, 7, 1, 2, tzinfo=UTC))
    note_flow_run(tmp_path, "m", "flow-1", 1, [])  # the earlier, finished run's entry stays
    _live(tmp_path, "running", KILLED, started)
    entry = note_interrupted(tmp_path, results)
    assert entry is not None and entry.interrupted and entry.flow_run_id == KILLED
    assert {(s.item_id, s.run_index) for s in entry.left_out} == {("q1", 0), ("q1", 1), ("q2", 0)}
    chains = read_chains(tmp_path)
    assert chains is not None and [run.flow_run_id for run in chains.flow_runs] == ["flow-1", KILLED]
    assert note_interrupted(tmp_path, results) is None  # named once: the next call adds nothing
    assert read_chains(tmp_path) == chains


@pytest.mark.parametrize(
    ("state", "flow_run_id"),
    [
        ("finished", KILLED),
        ("stopped", KILLED),
        ("running", None),
        ("running", "../../flow_runs/x"),
        ("running", "urn:uuid:" + KILLED),
    ],
)
def test_no_killed_run_is_named_for_an_ended_run_or_an_id_that_is_not_a_flow_runs(
    tmp_path: Path, state: str, flow_run_id: str | None
) -> None:
    from ape.tasks.storage.stage_chains import note_interrupted

    now = datetime.now(UTC)
    _saved(tmp_path / "results.jsonl", "q1", now)
    _live(tmp_path, state, flow_run_id, now)
    assert note_interrupted(tmp_path, tmp_path / "results.jsonl") is None
    assert read_chains(tmp_path) is None


def test_a_damaged_list_is_not_overwritten_by_a_killed_runs_entry(tmp_path: Path) -> None:
    from ape.schemas.errors import ApeError
    from ape.tasks.storage.stage_chains import note_interrupted

    now = datetime.now(UTC)
    _live(tmp_path, "running", KILLED, now)
    (tmp_path / CHAINS_FILE).write_text("{not json")
    with pytest.raises(ApeError, match="damaged"):
        note_interrupted(tmp_path, tmp_path / "results.jsonl")
    assert (tmp_path / CHAINS_FILE).read_text() == "{not json"


def test_the_catch_up_takes_off_only_what_it_recorded_from_the_file_as_it_is_now(tmp_path: Path) -> None:
    """The catch-up read the file, then the next run of the folder wrote it (its own entry,
    and a session it redid dropped from the earlier one); the catch-up's end keeps both."""
    from ape.tasks.storage.stage_chains import settle

    note_flow_run(tmp_path, "m", "flow-1", 5, [("a", 0), ("b", 0), ("c", 0)])
    read_by_catch_up = read_chains(tmp_path)
    assert read_by_catch_up is not None
    note_flow_run(tmp_path, "m", "flow-2", 3, [("d", 0)], superseded={"c": 1})  # redid c, left d out
    written = settle(tmp_path, {"flow-1": ({("a", 0), ("b", 0), ("c", 0)}, set())})
    assert written == read_chains(tmp_path)
    assert written is not None
    first, second = written.flow_runs
    assert (first.flow_run_id, first.chains_recorded, first.left_out) == ("flow-1", 7, [])  # a and b: c was redone
    assert (second.flow_run_id, second.chains_recorded) == ("flow-2", 3)
    assert [(s.item_id, s.run_index) for s in second.left_out] == [("d", 0)]  # still waits to be recorded
    # a session with no saved result any more is dropped, not counted
    note_flow_run(tmp_path, "m", "flow-2", 3, [("d", 0), ("e", 0)])
    again = settle(tmp_path, {"flow-2": ({("d", 0)}, {("e", 0)})})
    assert again is not None and (again.flow_runs[-1].chains_recorded, again.flow_runs[-1].left_out) == (4, [])
    (tmp_path / "none").mkdir()
    assert settle(tmp_path / "none", {}) is None  # a folder without the file: nothing to settle


def test_writers_of_the_file_take_turns(tmp_path: Path) -> None:
    """A rewrite waits while another process holds the folder's lock (a real child process)."""
    import subprocess
    import sys
    import threading

    from ape.tasks.storage.stage_chains import settle

    note_flow_run(tmp_path, "m", "flow-1", 1, [("a", 0)])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.readline()",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        done = threading.Event()
        worker = threading.Thread(target=lambda: (settle(tmp_path, {"flow-1": ({("a", 0)}, set())}), done.set()))
        worker.start()
        assert not done.wait(0.5)  # held off while the other process holds the lock
        chains = read_chains(tmp_path)
        assert chains is not None and chains.chains_left_out == 1
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait()
    worker.join(30)
    assert done.is_set()
    after = read_chains(tmp_path)
    assert after is not None and (after.chains_recorded, after.chains_left_out) == (2, 0)
