"""A damaged history is found before a run (one line naming the file and `--rebuild`), and
rebuilt from the copies the run folders keep: the same rows, so the same verdicts and the
same reference for the next run. No Prefect needed: runs are judged and recorded as
``ape.tasks.after_run.join_history.join_history`` does it (``judge``, then ``append_run``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ape.cli import main
from ape.schemas.config import MonitorConfig
from ape.schemas.errors import ApeError
from ape.tasks.stats.history_verdicts import history_verdict
from ape.tasks.storage import history, runs

T0 = pd.Timestamp("2026-01-01T03:00:00", tz="UTC")
N = 300


def run_id(index: int) -> str:
    return f"{(T0 + pd.Timedelta(days=index)):%Y%m%dT%H%M%SZ}-{index:08x}"


def scores_table(model_id: str, scores: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model_id": model_id,
            "item_id": [f"i{i}" for i in range(scores.size)],
            "item_hash": "h",
            "score": scores,
            "passed": scores >= 0.5,
            "n": 1,
            "c": (scores >= 0.5).astype(int),
        }
    )


def record(top: Path, index: int, scores: dict[str, np.ndarray], *, folder: bool = True) -> dict[str, str]:
    """One new run of every model in ``scores``: its run folder (finished), then each model
    judged against the history and the run appended. Returns model -> verdict."""
    rid = run_id(index)
    finished = T0 + pd.Timedelta(days=index, minutes=5)
    if folder:
        path = runs.run_folder(top, rid)
        path.mkdir(parents=True)
        runs.write_info(path, runs.RunInfo(run_id=rid, started_at=str(T0), status="finished"))
    before = history.read_runs(top)
    rows, tables, verdicts = [], [], {}
    for model_id, values in scores.items():
        table = scores_table(model_id, values)
        prints = {"config_fingerprint": "c", "data_fingerprint": "d", "checker_fingerprint": "k"}
        verdict, columns = history_verdict(
            top,
            model_id,
            rid,
            table,
            prints,
            MonitorConfig(),
            runs=before,
            pinned=history.baseline(top),
            finished=finished,
        )
        row = {
            "model_id": model_id,
            "benchmark": "b",
            "n_items": values.size,
            "mean_score": float(values.mean()),
            "finished_at": finished,
            **prints,
            **columns,
        }
        if verdict is not None:
            row.update(
                {
                    "history_run": verdict.reference_run_id,
                    "history_verdict": verdict.verdict,
                    "history_diff": verdict.mean_diff,
                }
            )
            verdicts[model_id] = verdict.verdict
        rows.append(row)
        tables.append(table)
    history.append_run(top, rid, rows, pd.concat(tables))
    return verdicts


def draws(seed: int, runs_: int, drop_at: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    fixed = rng.random(N)
    out = []
    for index in range(runs_):
        p = 0.7 if index >= drop_at else 0.9
        out.append(
            {
                "a": (np.where(fixed < 0.5, fixed, rng.random(N)) < p).astype(float),
                "b": (rng.random(N) < 0.8).astype(float),
            }
        )
    return out


def build(top: Path, scores: list[dict[str, np.ndarray]]) -> list[dict[str, str]]:
    return [record(top, index, values) for index, values in enumerate(scores)]


def test_a_rebuilt_history_gives_the_same_verdicts_and_the_same_next_verdict(tmp_path: Path, capsys) -> None:
    top, twin = tmp_path / "out", tmp_path / "twin"
    scores = draws(3, 12, drop_at=9)
    verdicts = build(top, scores)
    assert "regressed" in {v.get("a") for v in verdicts}  # the history holds an alarm and a new reference
    assert main(["baseline", str(top), run_id(4)]) == 0
    shutil.copytree(top, twin, symlinks=True)  # the undamaged history, to compare with
    original = history.read_runs(top)
    original_items = history.read_all_items(top)

    # a truncated runs.parquet: one line naming it and the way out, never Arrow's message alone
    path = top / "history" / "runs.parquet"
    damaged = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(damaged)
    with pytest.raises(ApeError) as caught:
        history.check_history(top)
    text = str(caught.value)
    assert text.startswith(f"{path}: the run history cannot be read") and "\n" not in text
    assert f"ape history {top} --rebuild" in text
    with pytest.raises(ApeError, match="--rebuild"):
        history.read_runs(top)
    assert main(["history", str(top)]) == 2
    assert "--rebuild" in capsys.readouterr().err

    assert main(["history", str(top), "--rebuild", "--no-chart"]) == 0
    out = capsys.readouterr().out
    assert f"rebuilt {top / 'history'}: 12 runs (24 rows)" in out and "pinned baseline kept" in out
    history.check_history(top)
    pd.testing.assert_frame_equal(history.read_runs(top), original)
    pd.testing.assert_frame_equal(
        history.read_all_items(top).sort_values(["run_id", "model_id", "item_id"]).reset_index(drop=True),
        original_items.sort_values(["run_id", "model_id", "item_id"]).reset_index(drop=True),
    )
    assert history.baseline(top) == run_id(4)
    (kept,) = tmp_path.joinpath("out").glob("history.bak-*")  # the damaged history, set aside whole
    assert (kept / "runs.parquet").read_bytes() == damaged and (kept / "baseline.json").is_file()

    # the next run is judged alike against the rebuilt and the original history
    following = draws(3, 14, drop_at=9)[12:]
    for index, values in enumerate(following, start=12):
        assert record(top, index, values) == record(twin, index, values)
    pd.testing.assert_frame_equal(history.read_runs(top), history.read_runs(twin))


def test_damaged_items_and_baseline_are_found_and_unrebuildable_runs_are_named(tmp_path: Path) -> None:
    top = tmp_path / "out"
    build(top, draws(5, 3, drop_at=99))
    history.check_history(top)  # an intact history passes
    items = top / "history" / "items" / f"{run_id(1)}.parquet"
    items.write_bytes(b"PAR1 not really")
    with pytest.raises(ApeError, match=f"^{items}: the run history cannot be read"):
        history.check_history(top)
    items.unlink()
    with pytest.raises(ApeError, match=f"lists run {run_id(1)} but its items file is missing"):
        history.check_history(top)
    (top / "history" / "baseline.json").write_text("{not json")
    runs_file = top / "history" / "runs.parquet"
    runs_file.unlink()
    with pytest.raises(ApeError, match=r"baseline.json: the pinned baseline cannot be read.*ape baseline"):
        history.check_history(top)

    # a run recorded by an older APE (no copy in its folder) and an unfinished run are named, not guessed
    (runs.run_folder(top, run_id(0)) / history.RUN_COPY).unlink()
    unfinished = runs.run_folder(top, run_id(7))
    unfinished.mkdir()
    runs.write_info(unfinished, runs.RunInfo(run_id=run_id(7), started_at=str(T0)))
    done = history.rebuild(top)
    assert done.runs == [run_id(1), run_id(2)] and done.rows == 4 and done.baseline is None
    assert "kept no copy" in done.skipped[run_id(0)] and "not finished" in done.skipped[run_id(7)]
    assert sorted(history.read_runs(top)["run_id"].unique()) == [run_id(1), run_id(2)]
    history.check_history(top)


def test_runs_recorded_without_a_copy_get_one_when_the_next_run_is_recorded(tmp_path: Path) -> None:
    """Histories written before run folders kept copies become rebuildable from the next run on."""
    top = tmp_path / "out"
    scores = draws(9, 4, drop_at=99)
    build(top, scores[:3])
    for index in range(3):
        for name in (history.RUN_COPY, history.RUN_ITEMS_COPY):
            (runs.run_folder(top, run_id(index)) / name).unlink()
    record(top, 3, scores[3])
    for index in range(4):
        assert (runs.run_folder(top, run_id(index)) / history.RUN_COPY).is_file()
    before = history.read_runs(top)
    shutil.rmtree(top / "history")
    assert history.rebuild(top).runs == [run_id(i) for i in range(4)]
    pd.testing.assert_frame_equal(history.read_runs(top), before)


def test_nothing_to_rebuild_from_is_one_line(tmp_path: Path) -> None:
    top = tmp_path / "out"
    record(top, 0, {"a": np.ones(5)}, folder=False)  # a history without run folders
    with pytest.raises(ApeError, match="nothing to rebuild from"):
        history.rebuild(top)
    assert history.read_runs(top)["run_id"].tolist() == [run_id(0)]  # left as it was
