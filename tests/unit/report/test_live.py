"""The live view's numbers (ape.tasks.report.live): pace, time left, the pass rate's interval
(the report's own), the counts; reading live.json back (ape.tasks.storage.live_files) and
``ape status`` on it. The real run against a real server: tests/integration/test_live_view.py."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ape.cli import main as cli_main
from ape.flows.live.view import LiveView, artifact_key, live_markdown
from ape.schemas.errors import ApeError
from ape.schemas.live import LIVE_FILE, LiveStatus
from ape.schemas.results import CheckResult, CheckStatus, Outcome, OutputBatch, SessionResult
from ape.tasks.report.live import LiveCounts, Sample, describe, duration, eta_seconds, pass_interval, per_minute
from ape.tasks.stats.aggregate import aggregate
from ape.tasks.storage.live_files import MAX_BYTES, find_live, read_live


def _session(item: str, run: int, correct: bool, **extra: object) -> SessionResult:
    outcome = extra.pop("outcome", Outcome.SOLVED)
    return SessionResult(
        item_id=item, run_index=run, model_id="m", outcome=outcome, correct=correct, score=float(correct), **extra
    )


def _batch(item: str, *passes: bool, **extra: object) -> OutputBatch:
    return OutputBatch(
        item_id=item, model_id="m", sessions=[_session(item, i, p, **dict(extra)) for i, p in enumerate(passes)]
    )


# -- pace and time left ----------------------------------------------------------------------
def test_pace_is_the_rise_over_the_last_minute() -> None:
    samples = [Sample(t, items, 2 * items, 100 * items) for t, items in [(0, 0), (30, 10), (90, 40), (120, 70)]]
    # the window is the last 60 s: from t=90 (40 items) to t=120 (70): 30 items in 30 s
    assert per_minute(samples, lambda s: s.items) == pytest.approx(60.0)
    assert per_minute(samples, lambda s: s.tokens) == pytest.approx(6000.0)
    assert per_minute(samples[:2], lambda s: s.items) == pytest.approx(20.0)  # 10 items in 30 s
    assert per_minute([Sample(0, 0, 0, 0), Sample(0.5, 3, 0, 0)], lambda s: s.items) is None  # under a second
    assert per_minute([], lambda s: s.items) is None


def test_time_left_is_the_items_left_at_the_recent_pace() -> None:
    assert eta_seconds(30, 60.0) == pytest.approx(30.0)
    assert eta_seconds(0, None) == 0.0  # nothing left: done, pace or not
    assert eta_seconds(5, None) is None and eta_seconds(5, 0.0) is None  # no pace: not a guess
    assert duration(3725) == "1 h 02 min" and duration(185) == "3 min 05 s" and duration(42.4) == "42 s"


# -- the pass rate's interval is the report's ------------------------------------------------
@pytest.mark.parametrize("clustered", [False, True])
def test_the_interval_from_cluster_counts_is_the_reports(clustered: bool) -> None:
    rng = np.random.default_rng(7)
    rows = []
    for item in range(40):
        runs = 3
        cluster = f"p{item // 4}" if clustered else None
        for _run in range(runs):
            correct = bool(rng.random() < 0.7)
            rows.append(
                {
                    "model_id": "m",
                    "item_id": f"i{item}",
                    "score": float(correct),
                    "correct": correct,
                    "cluster": cluster,
                }
            )
    frame = pd.DataFrame(rows)
    report = aggregate(frame).iloc[0]
    counts = LiveCounts("b", "m", total=40)
    for item in range(40):
        mine = [r for r in rows if r["item_id"] == f"i{item}"]
        counts.add(
            OutputBatch(
                item_id=f"i{item}",
                model_id="m",
                sessions=[_session(r["item_id"], i, r["correct"], cluster=r["cluster"]) for i, r in enumerate(mine)],
            )
        )
    status = counts.status("finished")
    assert status.pass_rate == pytest.approx(float(report["pass_rate"]), abs=1e-12)
    assert status.pass_rate_low == pytest.approx(float(report["pass_rate_low"]), abs=1e-9)
    assert status.pass_rate_high == pytest.approx(float(report["pass_rate_high"]), abs=1e-9)
    assert status.interval_method == "wilson-clustered"


def test_an_interval_of_nothing_is_none_not_nan() -> None:
    assert math.isnan(pass_interval([], []).low)
    status = LiveCounts("b", "m", total=3).status("running")
    assert status.pass_rate is None and status.pass_rate_low is None and status.eta_s is None
    assert dict(describe(status))["pass rate"] == "- (no session saved yet)"


# -- the counts -----------------------------------------------------------------------------
def test_counts_errors_truncations_check_errors_tokens_and_the_pace() -> None:
    clock = [100.0]
    counts = LiveCounts("b", "m", total=10, clock=lambda: clock[0])
    counts.add(_batch("r1", True, True), resumed=True)  # saved by an earlier run: not this run's pace
    counts.add(_batch("a", True, False, input_tokens=10, output_tokens=5, steps=1))
    counts.add(_batch("b", False, outcome=Outcome.ERROR, steps=1))
    counts.add(_batch("c", False, outcome=Outcome.TRUNCATED, input_tokens=7, output_tokens=100, steps=1))
    checked = CheckResult(status=CheckStatus.ERROR)
    counts.add(_batch("d", False, check=checked, input_tokens=1, output_tokens=1, steps=2))
    counts.add(_batch("e", True, cached=True, input_tokens=1000, output_tokens=1000, steps=1))  # no request made
    clock[0] = 130.0
    status = counts.status("running", requests=None, items_in_flight=3)
    assert (status.done, status.resumed, status.total, status.items_in_flight) == (6, 1, 10, 3)
    assert (status.sessions, status.passed) == (8, 4)
    assert (status.errors, status.truncated, status.check_errors) == (1, 1, 1)
    assert status.tokens_per_minute == pytest.approx((2 * 15 + 107 + 2) * 2)  # 30 s: twice per minute
    assert status.requests_per_minute == pytest.approx((2 * 1 + 1 + 1 + 2) * 2)  # the sessions' calls (Dask)
    assert status.items_per_minute == pytest.approx(5 * 2)  # 5 items this run in 30 s
    assert status.eta_s == pytest.approx(4 * 60 / 10)  # 4 left at 10 a minute
    # counted requests (a thread run's meter) take the sessions' calls' place
    clock[0] = 160.0
    assert counts.status("running", requests=90, requests_in_flight=4).requests_per_minute == pytest.approx(90.0)


def test_a_finished_or_stopped_run_shows_no_time_left_and_a_silent_one_is_flagged() -> None:
    counts = LiveCounts("b", "m", total=2)
    counts.add(_batch("a", True))
    stopped = dict(describe(counts.status("stopped")))
    assert stopped["time left"] == "- (1 items not done)" and stopped["state"].startswith("stopped after ")
    assert "since it started" in dict(describe(counts.status("running")))["state"]
    running = counts.status("running")
    later = running.updated_at + timedelta(minutes=5)
    assert dict(describe(running, later))["state"].startswith("running? (no update for 5 min 00 s)")


def test_a_paused_run_shows_no_countdown() -> None:
    """A paused run's pace is from before the pause: its time left would keep counting down."""
    clock = [100.0]
    counts = LiveCounts("b", "m", total=4, clock=lambda: clock[0])
    counts.add(_batch("a", True, steps=1))
    clock[0] = 130.0
    assert dict(describe(counts.status("running")))["time left"].startswith("about ")
    paused = counts.status("paused")
    assert paused.eta_s is not None  # the pace is known; the view must not turn it into a countdown
    left = dict(describe(paused))["time left"]
    assert left == "- (paused, 3 items not done; `ape ctl resume` goes on)"


# -- live.json: written, read back, refused when it is not one ---------------------------------
def _status(**changes: object) -> dict:
    data = json.loads(LiveCounts("b", "m", total=4).status("running").model_dump_json())
    data.update(changes)
    return data


def test_the_live_view_writes_live_json_owner_only_and_counts_resumed_items(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(_batch("old", True, False).model_dump_json() + "\n" + _batch("gone", True).model_dump_json())
    old = os.umask(0o077)  # as during a run (ape.tasks.storage.file_modes)
    try:
        with LiveView(
            out_dir=tmp_path, benchmark="b", model="m", label="b · m", total=3, results_path=results, resumed=["old"]
        ) as view:
            view.add(_batch("new", True))
    finally:
        os.umask(old)
    assert view.last is not None and view.last.state == "stopped"  # 2 of 3 items: the loop ended early
    live = read_live(tmp_path / LIVE_FILE)
    assert (live.state, live.done, live.resumed, live.sessions, live.passed) == ("stopped", 2, 1, 3, 2)
    assert (tmp_path / LIVE_FILE).stat().st_mode & 0o777 == 0o600
    # a loop that ended with an error says "stopped" too, whatever was done
    with (
        pytest.raises(RuntimeError),
        LiveView(out_dir=tmp_path, benchmark="b", model="m", label="b · m", total=1, results_path=results) as view,
    ):
        view.add(_batch("x", True))
        raise RuntimeError("save failed")
    assert read_live(tmp_path / LIVE_FILE).state == "stopped"
    with LiveView(out_dir=tmp_path, benchmark="b", model="m", label="b · m", total=1, results_path=results) as view:
        view.add(_batch("x", True))
    assert read_live(tmp_path / LIVE_FILE).state == "finished"


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"extra": 1}, "extra"),
        ({"done": -1}, "done"),
        ({"pass_rate": 1.5}, "pass_rate"),
        ({"state": "exploded"}, "state"),
        ({"version": 2}, "version"),
    ],
)
def test_a_forged_or_damaged_live_json_is_one_error_naming_file_and_key(
    tmp_path: Path, changes: dict, key: str
) -> None:
    path = tmp_path / LIVE_FILE
    path.write_text(json.dumps(_status(**changes)))
    with pytest.raises(ApeError) as caught:
        read_live(path)
    assert f"{path} key {key}" in str(caught.value)


def test_non_finite_numbers_and_oversized_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / LIVE_FILE
    path.write_text(json.dumps(_status()).replace('"elapsed_s": ', '"elapsed_s": NaN, "x": '))
    with pytest.raises(ApeError):
        read_live(path)
    path.write_text(" " * (MAX_BYTES + 1))
    with pytest.raises(ApeError, match="larger than"):
        read_live(path)


def test_which_live_files_a_folder_shows(tmp_path: Path) -> None:
    with pytest.raises(ApeError, match="no such output folder"):
        find_live(tmp_path / "missing")
    with pytest.raises(ApeError, match="no live.json here"):
        find_live(tmp_path)
    for model in ("a", "b"):
        (tmp_path / model).mkdir()
        (tmp_path / model / LIVE_FILE).write_text("{}")
    assert find_live(tmp_path) == [tmp_path / "a" / LIVE_FILE, tmp_path / "b" / LIVE_FILE]
    assert find_live(tmp_path / "a") == [tmp_path / "a" / LIVE_FILE]
    top = tmp_path / "top"
    for run in ("20260101T000000Z-00000001", "20260102T000000Z-00000002"):
        (top / "runs" / run).mkdir(parents=True)
        (top / "runs" / run / LIVE_FILE).write_text("{}")
    assert find_live(top) == [top / "runs" / "20260102T000000Z-00000002" / LIVE_FILE]  # the newest run


def test_ape_status_prints_the_numbers_and_refuses_what_is_not_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    counts = LiveCounts("bench", "m\x1b[31m", total=4)
    counts.add(_batch("a", True, False))
    (tmp_path / LIVE_FILE).write_text(counts.status("running").model_dump_json())
    assert cli_main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "bench · m" in out and "\x1b" not in out  # the model's name cannot drive the terminal
    assert "1 of 4 done (25.0%)" in out and "50.0% (95% interval" in out
    assert cli_main(["status", str(tmp_path), "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert LiveStatus.model_validate(shown).done == 1
    assert cli_main(["status", str(tmp_path / "nope")]) == 2
    assert "no such output folder" in capsys.readouterr().err
    assert cli_main(["status", "0190a3c1-7a2b-7c3d-8e4f-0123456789ab"]) == 2
    assert "no flow run with this id whose folder is here" in capsys.readouterr().err


def test_the_markdown_artifact_shows_names_as_text_and_has_a_valid_key() -> None:
    counts = LiveCounts("My Bench!", "[x](http://evil)", total=1)
    text = live_markdown(counts.status("running"))
    assert "`[x](http://evil)`" in text and "| items | 0 of 1 done" in text
    key = artifact_key("My Bench!", "Qwen/Qwen2-7B")
    assert key == "my-bench-live-qwen-qwen2-7b"
    assert artifact_key("", "é") == "benchmark-live-model"


def test_updated_at_is_utc() -> None:
    status = LiveCounts("b", "m", total=1).status("running")
    assert status.updated_at.tzinfo is not None
    assert abs((datetime.now(UTC) - status.updated_at).total_seconds()) < 60


def test_ape_status_ends_with_how_far_the_prefect_ui_is_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two models' folders under the output folder, the catch-up's mirror.json in the output
    folder: the UI line after the models' blocks; a damaged one costs that line only."""
    from ape.schemas.mirror import MIRROR_FILE
    from ape.tasks.storage.mirror_status import MirrorProgress

    for model in ("a", "b"):
        (tmp_path / model).mkdir()
        (tmp_path / model / LIVE_FILE).write_text(
            LiveCounts("bench", model, total=4).status("finished").model_dump_json()
        )
    assert cli_main(["status", str(tmp_path)]) == 0
    assert "UI:" not in capsys.readouterr().out  # no catch-up ran: the server kept up
    MirrorProgress(tmp_path, chains_total=20_000, chains_done=14_200).write("sending")
    for shown in (tmp_path, tmp_path / "a"):  # the output folder, or one model's
        assert cli_main(["status", str(shown)]) == 0
        out = capsys.readouterr().out
        assert out.rstrip().splitlines()[-1].startswith("UI: 14,200 of 20,000 session chains recorded"), out
    (tmp_path / MIRROR_FILE).write_text('{"state": "complete", "shell": "rm -rf ~"}')
    assert cli_main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "bench · b" in out and "UI: cannot tell how far the Prefect UI is behind" in out
    assert "rm -rf" not in out
