"""`ape prune` on a real output folder: a history (Parquet), `latest`, a pinned baseline, a
resumable run, a run with a batch in flight and a run the history never recorded; only the
run nothing needs goes, and a dry run removes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd

from ape.cli import main
from ape.tasks.storage.history import RUN_COPY, RUN_ITEMS_COPY, append_run, read_runs, rebuild, set_baseline
from ape.tasks.storage.outdir import LOCK_FILE
from ape.tasks.storage.runs import RUN_FILE, RunInfo, point_latest, read_info, run_folder, write_info

NOW = datetime.now(UTC)
# a run's hold on the output folder, as OutputLock takes it, in another process
HOLD_LOCK = "import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(300)\n"


def _run_id(days_ago: float, tail: str) -> str:
    return f"{NOW - timedelta(days=days_ago):%Y%m%dT%H%M%SZ}-{tail}"


def _folder(top: Path, run_id: str, *, finished: bool = True, ledger: list[dict] | None = None) -> Path:
    folder = run_folder(top, run_id)
    (folder / "m" / ".cache").mkdir(parents=True)
    (folder / "m" / "results.jsonl").write_text('{"id": "q1"}\n' * 2000)
    (folder / "m" / ".cache" / "key").write_text("x" * 5000)
    if ledger is not None:
        (folder / "m" / "batches.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ledger))
    write_info(folder, RunInfo(run_id=run_id, started_at=NOW.isoformat(), status="finished" if finished else "running"))
    return folder


def _record(top: Path, run_id: str, start: str) -> None:
    items = pd.DataFrame(
        [{"model_id": "m", "item_id": "q1", "item_hash": "h", "score": 1.0, "passed": True, "n": 1, "c": 1}]
    )
    append_run(top, run_id, [{"model_id": "m", "benchmark": "b", "history_start": start, "mean_score": 1.0}], items)


def test_prune_keeps_what_the_history_latest_a_resumable_run_and_a_batch_need(tmp_path: Path, capsys) -> None:
    top = tmp_path / "out"
    old, pinned, batching, start, newest = (
        _run_id(60, "0000000a"),
        _run_id(55, "0000000b"),
        _run_id(50, "0000000c"),
        _run_id(40, "0000000d"),
        _run_id(35, "0000000e"),
    )
    unrecorded, resumable, fresh = _run_id(45, "0000000f"), _run_id(44, "00000010"), _run_id(1, "00000011")
    in_flight = [
        {"event": "submitting", "tag": "t1"},
        {"event": "submitted", "tag": "t1", "batch_id": "batch_1"},
        {"event": "submitted", "tag": "t2", "batch_id": "batch_2"},
        {"event": "ended", "batch_id": "batch_2"},
    ]
    for run_id in (old, pinned, start, newest, unrecorded, fresh):
        _folder(top, run_id)
    _folder(top, batching, ledger=in_flight)
    _folder(top, resumable, finished=False)
    for run_id in (old, pinned, batching):
        _record(top, run_id, old)
    for run_id in (start, newest, fresh):  # a change point at `start`: the reference is start..fresh
        _record(top, run_id, start)
    set_baseline(top, pinned)
    point_latest(top, fresh)
    (top / "runs" / "notes").mkdir()  # not a run folder: left alone

    assert main(["prune", "--dry-run", str(top)]) == 0
    dry = capsys.readouterr().out
    assert f"{old}: would remove (" in dry
    assert "would remove 1 of 8 run folder(s)" in dry
    assert f"{pinned}: kept: the pinned baseline" in dry
    assert f"{batching}: kept: 1 batch(es) in flight in its ledger (batch_1)" in dry
    assert f"{start}: kept: in m's current history reference" in dry
    assert f"{unrecorded}: kept: not in the history" in dry
    assert f"{resumable}: kept: unfinished: `ape retry` can resume it" in dry
    assert f"{fresh}: kept: latest points at it" in dry
    assert (run_folder(top, old) / "m" / "results.jsonl").is_file()  # a dry run removes nothing

    # a run going in the output folder (another process holding its lock): refused, nothing removed
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(top / LOCK_FILE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert main(["prune", str(top)]) == 2
        assert "in use by another ape run" in capsys.readouterr().err
        assert (run_folder(top, old) / "m" / "results.jsonl").is_file()
    finally:
        holder.kill()
        holder.wait(timeout=60)

    assert main(["prune", str(top)]) == 0
    assert "removed 1 of 8 run folder(s)" in capsys.readouterr().out
    gone = run_folder(top, old)
    assert sorted(p.name for p in gone.iterdir()) == sorted([RUN_FILE, RUN_COPY, RUN_ITEMS_COPY])
    assert read_info(gone).pruned_at is not None
    for run_id in (pinned, batching, start, newest, unrecorded, resumable, fresh):
        assert (run_folder(top, run_id) / "m" / "results.jsonl").is_file(), run_id
    assert (top / "runs" / "notes").is_dir()

    # the history is whole, and can still be rebuilt from the copies the pruned folder kept
    assert old in set(read_runs(top)["run_id"])
    rebuild(top)
    assert old in set(read_runs(top)["run_id"])

    # a second prune finds the folder pruned already; --older-than spares younger runs
    assert main(["prune", "--dry-run", "--older-than", "0", str(top)]) == 0
    again = capsys.readouterr().out
    assert f"{old}: kept: pruned already" in again and "would remove 0 of 8" in again


def test_prune_refuses_a_damaged_history(tmp_path: Path, capsys) -> None:
    top = tmp_path / "out"
    run_id = _run_id(60, "0000000a")
    _folder(top, run_id)
    _record(top, run_id, run_id)
    runs_file = top / "history" / "runs.parquet"
    os.truncate(runs_file, runs_file.stat().st_size // 2)
    assert main(["prune", str(top)]) == 2
    assert "runs.parquet" in capsys.readouterr().err
    assert (run_folder(top, run_id) / "m" / "results.jsonl").is_file()
