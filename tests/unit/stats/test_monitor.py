"""The history monitor: thresholds from the false-alarm budget, the paired statistic, the
combined Shewhart-CUSUM step, Holm, and one model's runs judged through the history files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ape.schemas.config import MonitorConfig
from ape.tasks.report.trend import history_markdown, write_trend_chart
from ape.tasks.stats.monitor import MARGIN, design, detectable_drop, holm, paired, runs_per_year, step, two_sided_arl
from ape.tasks.stats.reference import judge
from ape.tasks.storage import history


def run_length(plan, shift: float, chains: int, runs: int, seed: int) -> np.ndarray:
    """Runs until the first alarm of chains fed N(shift, 1) statistics (runs + 1 if none)."""
    rng = np.random.default_rng(seed)
    up, down = np.zeros(chains), np.zeros(chains)
    first = np.full(chains, runs + 1)
    for t in range(runs):
        result = step(rng.normal(shift, 1.0, chains), up, down, plan)
        up, down = result.up, result.down
        first = np.where((result.verdict != 0) & (first > runs), t + 1, first)
    return first


@pytest.mark.parametrize("cadence", [52.0, 365.0])
def test_the_thresholds_give_the_budgeted_runs_between_false_alarms(cadence: float) -> None:
    plan = design(cadence, 1.0)
    arl = MARGIN * cadence  # runs between false alarms, with the margin for the approximations
    assert two_sided_arl(plan.k, plan.h, plan.limit) == pytest.approx(arl, rel=1e-3)
    lengths = run_length(plan, 0.0, chains=1500, runs=int(arl * 7), seed=1)
    assert (lengths <= arl * 7).mean() > 0.99
    assert np.mean(lengths) == pytest.approx(arl, rel=0.1)
    # a smaller budget waits longer; a shift of 2 standard errors is caught within a few runs
    assert design(cadence, 0.5).h > plan.h and design(cadence, 0.5).limit > plan.limit
    assert np.mean(run_length(plan, -2.0, chains=2000, runs=50, seed=2)) < 4


def test_cadence_comes_from_the_spacing_of_the_runs_or_the_setting() -> None:
    day = 86400.0
    assert runs_per_year([i * day for i in range(10)]) == pytest.approx(365.25)
    assert runs_per_year([i * 7 * day for i in range(10)]) == pytest.approx(365.25 / 7)
    assert runs_per_year([0.0, day]) == 365.0  # too few runs: nightly
    assert runs_per_year([i * day for i in range(10)], configured=12) == 12


def draws(rng: np.random.Generator, trials: int, n: int, runs: int, consistency: float, p: float) -> np.ndarray:
    consistent = rng.random((trials, 1, n)) < consistency
    fixed = rng.random((trials, 1, n))
    return (np.where(consistent, fixed, rng.random((trials, runs, n))) < p).astype(float)


@pytest.mark.parametrize("consistency", [0.0, 0.8])
def test_the_paired_statistic_is_standard_normal_for_an_unchanged_model(consistency: float) -> None:
    rng = np.random.default_rng(3)
    scores = draws(rng, trials=2000, n=400, runs=11, consistency=consistency, p=0.9)
    result = paired(scores[:, -1], scores[:, :-1])
    assert np.all(result.n_items == 400) and np.all(result.reference_runs == 10)
    assert np.mean(result.z) == pytest.approx(0.0, abs=0.08)
    assert np.var(result.z) == pytest.approx(1.0, abs=0.12)
    # consistency shrinks the yardstick: only the items that vary between runs add noise
    expected = np.sqrt(0.09 * (1 - consistency) * 1.1 / 400)
    assert np.median(result.se) == pytest.approx(expected, rel=0.1)


def test_the_paired_statistic_on_a_drop_a_consistent_model_and_missing_items() -> None:
    rng = np.random.default_rng(4)
    before = draws(rng, trials=200, n=500, runs=10, consistency=0.5, p=0.9)
    after = draws(rng, trials=200, n=500, runs=1, consistency=0.0, p=0.8)[:, 0]
    assert np.mean(paired(after, before).z < -3.5) > 0.95
    same = np.ones((1, 5, 50))
    assert paired(same[:, 0], same).z[0] == 0.0  # a model answering alike every run: no signal, no noise
    worse = same[:, 0].copy()
    worse[0, :5] = 0.0
    assert paired(worse, same).z[0] < -3  # ... and a change on a tenth of the items is plain
    holes = same.copy()
    holes[0, :, :10] = np.nan
    assert paired(same[:, 0], holes).n_items[0] == 40


def test_a_step_alarms_both_ways_restarts_and_keeps_the_alarming_run_out() -> None:
    plan = design(365, 1.0)
    zero = np.zeros(3)
    result = step(np.array([-plan.limit - 0.1, plan.limit + 0.1, 0.0]), zero, zero, plan)
    assert result.verdict.tolist() == [-1, 1, 0] and result.by_limit.tolist() == [True, True, False]
    assert result.restart.tolist() == [True, True, False] and result.joins.tolist() == [False, False, True]
    assert np.all(result.up == 0) and np.all(result.down == 0)
    # a drift: each run alone is within the limit, the cumulative sum is not
    down = np.zeros(1)
    verdicts = []
    for z in (-1.5, -2.0, -2.2):
        result = step(np.array([z]), np.zeros(1), down, plan)
        down = result.down
        verdicts.append(int(result.verdict[0]))
    assert verdicts[0] == 0 and -1 in verdicts and not result.by_limit[0]
    # a changed fingerprint: judged by the single-run limit only, then a new reference with this run
    result = step(np.array([-2.0]), np.zeros(1), np.array([plan.h]), plan, fingerprint_changed=True)
    assert result.verdict[0] == 0 and result.restart[0] and result.joins[0] and result.down[0] == 0


def test_the_detectable_drop_is_caught_four_times_in_five() -> None:
    plan = design(365, 1.0)
    rng = np.random.default_rng(5)
    for down in (0.0, 2.0):
        drop = detectable_drop(down, 0.01, plan)
        z = rng.normal(-drop / 0.01, 1.0, 20000)
        caught = step(z, np.zeros(z.size), np.full(z.size, down), plan).verdict < 0
        assert caught.mean() == pytest.approx(0.8, abs=0.02)
    assert detectable_drop(2.0, 0.01, plan) < detectable_drop(0.0, 0.01, plan)


def test_holm_steps_down() -> None:
    assert holm([0.01, 0.04, 0.03], 0.05) == [True, False, False]
    assert holm([0.01, 0.02], 0.05) == [True, True]
    assert holm([0.2, None, 0.001], 0.05) == [False, False, True]


# ------------------------------------------------------------------ through the history files

DAY = pd.Timedelta(days=1)
T0 = pd.Timestamp("2026-01-01", tz="UTC")


def scores_table(scores: np.ndarray, hashes: list[str] | None = None) -> pd.DataFrame:
    n = scores.size
    return pd.DataFrame({
        "model_id": "m", "item_id": [f"i{i}" for i in range(n)], "item_hash": hashes or ["h"] * n,
        "score": scores, "passed": scores >= 0.5, "n": 1, "c": (scores >= 0.5).astype(int),
    })  # fmt: skip


def record(
    top: Path, index: int, scores: np.ndarray, config: str = "c", pinned: str | None = None, checker: str = "k",
    rescore=None,
):  # fmt: skip
    """What record_run does for one model: judge against the history, then append."""
    run_id = f"2026{index:04d}T000000Z-0000"
    prints = {"config_fingerprint": config, "data_fingerprint": "d", "checker_fingerprint": checker}
    table = scores_table(scores)
    finished = T0 + index * DAY
    verdict, columns = judge(
        top, "m", run_id, table, prints, MonitorConfig(), runs=history.read_runs(top), pinned=pinned, finished=finished,
        rescore=rescore,
    )  # fmt: skip
    row = {"model_id": "m", "benchmark": "b", "n_items": scores.size, "mean_score": float(scores.mean()),
           "finished_at": finished, **prints, **columns}  # fmt: skip
    if verdict is not None:
        row.update({"history_run": verdict.reference_run_id, "history_verdict": verdict.verdict,
                    "history_diff": verdict.mean_diff})  # fmt: skip
    history.append_run(top, run_id, [row], table)
    return run_id, verdict


def test_runs_judged_through_the_history_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    n = 400
    consistent, fixed = rng.random(n) < 0.5, rng.random(n)

    def draw(p: float) -> np.ndarray:
        return (np.where(consistent, fixed, rng.random(n)) < p).astype(float)

    first, none = record(tmp_path, 1, draw(0.9))
    assert none is None  # nothing to compare with yet
    verdicts = [record(tmp_path, i, draw(0.9))[1] for i in range(2, 14)]
    assert [v.verdict for v in verdicts] == ["no detectable change"] * 12
    last = verdicts[-1]
    assert last.reference_runs == 12 and last.reference_from == first and last.runs_since_change == 13
    assert last.ci_low < last.mean_diff < last.ci_high and last.min_detectable_change > 0
    assert "limit" in last.evidence
    drop_id, drop = record(tmp_path, 14, draw(0.75))
    assert drop.verdict == "regressed" and drop.change_point == "alarm" and drop.statistic < -drop.threshold
    assert drop.ci_high < 0
    # after the alarm the reference restarts with the next run: the alarming run is not in it
    _, after = record(tmp_path, 15, draw(0.75))
    assert after.verdict == "not comparable" and after.reference_runs == 0
    assert after.new_items == 0 and "new or changed" not in after.note  # no reference: nothing to be new against
    _, again = record(tmp_path, 16, draw(0.75))
    assert again.reference_from == f"2026{15:04d}T000000Z-0000" and again.verdict == "no detectable change"
    # a changed prompt: compared with the old reference once, then a new reference from that run
    changed_id, changed = record(tmp_path, 17, draw(0.75), config="c2")
    assert changed.change_point == "fingerprint" and "config changed" in changed.note
    _, next_one = record(tmp_path, 18, draw(0.75), config="c2")
    assert next_one.reference_from == changed_id and next_one.reference_runs == 1
    # `ape baseline`: the reference starts at the pinned run
    _, pinned = record(tmp_path, 19, draw(0.75), config="c2", pinned=f"2026{18:04d}T000000Z-0000")
    assert pinned.reference_from == f"2026{18:04d}T000000Z-0000" and "pinned baseline" in pinned.note
    # what `ape history` shows is what was decided at run time
    runs = history.read_runs(tmp_path)
    assert runs.loc[runs["run_id"] == drop_id, "history_verdict"].item() == "regressed"
    table = history_markdown(runs)
    assert table.count("▼ regressed") == 1 and "◆ new reference (alarm) after this run" in table
    assert "◆ new reference (fingerprint)" in table
    assert write_trend_chart(runs, tmp_path / "trend.png").stat().st_size > 1000


def test_a_changed_checker_is_judged_on_the_re_scored_newest_reference_runs(tmp_path: Path) -> None:
    """The new checker fails the first half of the items: against the saved scores that is a
    collapse, against the reference runs graded again by it nothing changed."""
    rng = np.random.default_rng(8)
    n = 400
    strict = np.arange(n) < n // 2
    asked: list[str] = []

    def regrade(run_id: str) -> pd.DataFrame | None:
        asked.append(run_id)
        if run_id == runs[-1]:
            return None  # its saved answers are gone: left out of the reference
        items = history.read_items(tmp_path, run_id, "m")
        return items.assign(score=np.where(strict, 0.0, items["score"]))

    draw = lambda: (rng.random(n) < 0.9).astype(float)  # noqa: E731
    runs = [record(tmp_path, i, draw())[0] for i in range(1, 9)]
    now = np.where(strict, 0.0, draw())
    _, void = record(tmp_path, 9, now, checker="k2")  # no re-scoring: the old behaviour
    assert void.verdict == "regressed" and void.rescored_runs == 0 and "single-run limit" in void.note
    shutil.rmtree(history.history_dir(tmp_path))
    runs = [record(tmp_path, i, draw())[0] for i in range(1, 9)]
    _, verdict = record(tmp_path, 9, now, checker="k2", rescore=regrade)
    assert asked == runs[-5:]  # the newest rescore_runs (5) of the reference, nothing older
    assert verdict.verdict == "no detectable change" and verdict.rescored_runs == 4 and verdict.reference_runs == 4
    assert verdict.reference_from == runs[-5] and verdict.reference_run_id == runs[-2]
    assert verdict.change_point == "fingerprint" and "4 newest reference runs were re-scored" in verdict.note
    assert abs(verdict.mean_diff) < 0.05


def test_a_history_from_before_the_monitor_is_read_and_continued(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    old = [c for c in history.RUNS_SCHEMA.names if not c.startswith("history_")]
    for i in range(1, 6):  # rows as older versions wrote them: no monitor columns
        scores = (rng.random(300) < 0.9).astype(float)
        row = {"model_id": "m", "benchmark": "b", "n_items": 300, "mean_score": scores.mean(),
               "finished_at": T0 + i * DAY, "config_fingerprint": "c" if i > 2 else "old",
               "data_fingerprint": "d", "checker_fingerprint": "k", "previous_verdict": "no detectable change"}  # fmt: skip
        history.append_run(tmp_path, f"2026{i:04d}T000000Z-0000", [row], scores_table(scores))
    frame = pd.read_parquet(tmp_path / "history" / "runs.parquet")
    frame[[c for c in old if c in frame.columns]].to_parquet(tmp_path / "history" / "runs.parquet")
    assert history.read_runs(tmp_path)["history_verdict"].isna().all()
    assert "(vs previous run)" in history_markdown(history.read_runs(tmp_path))
    _, verdict = record(tmp_path, 6, (rng.random(300) < 0.9).astype(float))
    # the reference: the trailing runs with the current fingerprints (runs 3 to 5)
    assert verdict.reference_runs == 3 and verdict.reference_from == f"2026{3:04d}T000000Z-0000"
    assert verdict.verdict == "no detectable change"
