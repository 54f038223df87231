"""The history monitor: thresholds from the false-alarm budget, the paired statistic, the
combined Shewhart-CUSUM step, Holm, and one model's runs judged through the history files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ape.schemas.config import MonitorConfig
from ape.tasks.report.trend import LEGEND, history_markdown, reference_band, write_trend_chart
from ape.tasks.stats.history_verdicts import history_verdict
from ape.tasks.stats.monitor import (
    DEFAULT_RUNS_PER_YEAR,
    MARGIN,
    MAX_RUNS_PER_YEAR,
    MIN_EARLIER_RUNS,
    cadence,
    design,
    detectable_drop,
    epoch_seconds,
    paired,
    runs_per_year,
    step,
    two_sided_arl,
)
from ape.tasks.stats.significance import holm_rejected
from ape.tasks.storage import history


def run_length(design, shift: float, chains: int, runs: int, seed: int) -> np.ndarray:
    """Runs until the first alarm of chains fed N(shift, 1) statistics (runs + 1 if none)."""
    rng = np.random.default_rng(seed)
    up, down = np.zeros(chains), np.zeros(chains)
    first = np.full(chains, runs + 1)
    for t in range(runs):
        result = step(rng.normal(shift, 1.0, chains), up, down, design)
        up, down = result.up, result.down
        first = np.where((result.verdict != 0) & (first > runs), t + 1, first)
    return first


@pytest.mark.parametrize("cadence", [52.0, 365.0])
def test_the_thresholds_give_the_budgeted_runs_between_false_alarms(cadence: float) -> None:
    limits = design(cadence, 1.0)
    arl = MARGIN * cadence  # runs between false alarms, with the margin for the approximations
    assert two_sided_arl(limits.k, limits.h, limits.limit) == pytest.approx(arl, rel=1e-3)
    lengths = run_length(limits, 0.0, chains=1500, runs=int(arl * 7), seed=1)
    assert (lengths <= arl * 7).mean() > 0.99
    assert np.mean(lengths) == pytest.approx(arl, rel=0.1)
    # a smaller budget waits longer; a shift of 2 standard errors is caught within a few runs
    assert design(cadence, 0.5).h > limits.h and design(cadence, 0.5).limit > limits.limit
    assert np.mean(run_length(limits, -2.0, chains=2000, runs=50, seed=2)) < 4


def test_cadence_comes_from_the_spacing_of_the_runs_or_the_setting() -> None:
    day = 86400.0
    assert runs_per_year([i * day for i in range(10)]) == pytest.approx(365.25)
    assert runs_per_year([i * 7 * day for i in range(10)]) == pytest.approx(365.25 / 7)
    assert runs_per_year([0.0, day]) == 365.0  # too few runs: nightly
    assert runs_per_year([i * day for i in range(10)], configured=12) == 12


def test_the_cadence_is_inferred_only_from_enough_earlier_runs_and_says_so() -> None:
    hour = 3600.0
    # this run and MIN_EARLIER_RUNS - 1 earlier ones, hourly: not yet trusted
    few = cadence([i * hour for i in range(MIN_EARLIER_RUNS)])
    assert few.runs_per_year == DEFAULT_RUNS_PER_YEAR and few.source == "default"
    assert f"{MIN_EARLIER_RUNS - 1} earlier runs, fewer than the {MIN_EARLIER_RUNS}" in few.reason
    enough = cadence([i * hour for i in range(MIN_EARLIER_RUNS + 1)])
    assert enough.source == "inferred" and enough.runs_per_year == MAX_RUNS_PER_YEAR  # 8766 a year, capped
    assert "median spacing (1 hour)" in enough.reason and "capped at hourly" in enough.reason
    minutes = cadence([i * 300.0 for i in range(12)])
    assert minutes.runs_per_year == MAX_RUNS_PER_YEAR and minutes.source == "inferred"
    assert "(5 minutes) of the last 12 runs, capped at hourly" in minutes.reason
    # one odd gap (a manual run between nightly ones) does not move the median
    nightly = [i * 86400.0 for i in range(8)] + [7 * 86400.0 + 60.0]
    assert cadence(nightly).runs_per_year == pytest.approx(365.25)
    assert cadence([], configured=52).source == "configured"
    assert cadence([float("nan")] * 9).source == "default"  # times older histories lack


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_times_are_read_in_seconds_whatever_the_columns_resolution(unit: str) -> None:
    """pandas 3 reads the history's timestamps as datetime64[us], pandas 2 as [ns]: an
    integer view would be off by 1000 between them, which once made the monitor believe
    a nightly model ran once a year and raise false alarms from its third run."""
    when = pd.Series(
        pd.to_datetime(["2026-01-01 03:00:00", "2026-01-02 03:00:00", None, "1969-12-31 23:59:59"], utc=True)
    ).astype(f"datetime64[{unit}, UTC]")
    seconds = epoch_seconds(when)
    expected = pd.Timestamp("2026-01-01 03:00:00", tz="UTC").timestamp()
    assert seconds[0] == expected and seconds[1] - seconds[0] == 86400.0
    assert np.isnan(seconds[2]) and seconds[3] == -1.0
    naive = epoch_seconds(pd.DatetimeIndex(["2026-01-01 03:00:00"]).as_unit(unit))  # naive: taken as UTC
    assert naive.tolist() == [expected]
    assert epoch_seconds([pd.Timestamp("2026-01-01 03:00", tz="Europe/Berlin")]).tolist() == [expected - 3600]
    assert epoch_seconds([]).size == 0
    nightly = [*(pd.Timestamp("2026-01-01", tz="UTC") + pd.Timedelta(days=i) for i in range(10))]
    column = pd.Series(nightly).astype(f"datetime64[{unit}, UTC]")
    assert cadence(epoch_seconds(column)).runs_per_year == pytest.approx(365.25)


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
    limits = design(365, 1.0)
    zero = np.zeros(3)
    result = step(np.array([-limits.limit - 0.1, limits.limit + 0.1, 0.0]), zero, zero, limits)
    assert result.verdict.tolist() == [-1, 1, 0] and result.by_limit.tolist() == [True, True, False]
    assert result.restart.tolist() == [True, True, False] and result.joins.tolist() == [False, False, True]
    assert np.all(result.up == 0) and np.all(result.down == 0)
    # a drift: each run alone is within the limit, the cumulative sum is not
    down = np.zeros(1)
    verdicts = []
    for z in (-1.5, -2.0, -2.2):
        result = step(np.array([z]), np.zeros(1), down, limits)
        down = result.down
        verdicts.append(int(result.verdict[0]))
    assert verdicts[0] == 0 and -1 in verdicts and not result.by_limit[0]
    # a changed fingerprint: judged by the single-run limit only, then a new reference with this run
    result = step(np.array([-2.0]), np.zeros(1), np.array([limits.h]), limits, fingerprint_changed=True)
    assert result.verdict[0] == 0 and result.restart[0] and result.joins[0] and result.down[0] == 0


def test_the_detectable_drop_is_caught_four_times_in_five() -> None:
    limits = design(365, 1.0)
    rng = np.random.default_rng(5)
    for down in (0.0, 2.0):
        drop = detectable_drop(down, 0.01, limits)
        z = rng.normal(-drop / 0.01, 1.0, 20000)
        caught = step(z, np.zeros(z.size), np.full(z.size, down), limits).verdict < 0
        assert caught.mean() == pytest.approx(0.8, abs=0.02)
    assert detectable_drop(2.0, 0.01, limits) < detectable_drop(0.0, 0.01, limits)


def test_holm_steps_down() -> None:
    assert holm_rejected([0.01, 0.04, 0.03], 0.05) == [True, False, False]
    assert holm_rejected([0.01, 0.02], 0.05) == [True, True]
    assert holm_rejected([0.2, None, 0.001], 0.05) == [False, False, True]


# ------------------------------------------------------------------ through the history files

DAY = pd.Timedelta(days=1)
T0 = pd.Timestamp("2026-01-01", tz="UTC")


def scores_table(scores: np.ndarray, hashes: list[str] | None = None) -> pd.DataFrame:
    n = scores.size
    return pd.DataFrame(
        {
            "model_id": "m",
            "item_id": [f"i{i}" for i in range(n)],
            "item_hash": hashes or ["h"] * n,
            "score": scores,
            "passed": scores >= 0.5,
            "n": 1,
            "c": (scores >= 0.5).astype(int),
        }
    )


def record(
    top: Path,
    index: int,
    scores: np.ndarray,
    config: str = "c",
    pinned: str | None = None,
    checker: str = "k",
    rescore=None,
):
    """What join_history does for one model: judge against the history, then append."""
    run_id = f"2026{index:04d}T000000Z-0000"
    prints = {"config_fingerprint": config, "data_fingerprint": "d", "checker_fingerprint": checker}
    table = scores_table(scores)
    finished = T0 + index * DAY
    verdict, columns = history_verdict(
        top,
        "m",
        run_id,
        table,
        prints,
        MonitorConfig(),
        runs=history.read_runs(top),
        pinned=pinned,
        finished=finished,
        rescore=rescore,
    )
    row = {
        "model_id": "m",
        "benchmark": "b",
        "n_items": scores.size,
        "mean_score": float(scores.mean()),
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


@pytest.mark.parametrize("unit", ["us", "ns"])
def test_the_verdict_says_which_cadence_it_used_at_either_resolution(tmp_path: Path, unit: str) -> None:
    """The monitor reads the history as it comes back from Parquet (us with pandas 3, ns with
    pandas 2): the same nightly runs give the same cadence either way, the default until
    MIN_EARLIER_RUNS earlier runs exist, and each verdict says which and why."""
    rng = np.random.default_rng(9)
    read = history.read_runs

    def at_unit(top: Path, columns: list[str] | None = None) -> pd.DataFrame:
        runs = read(top, columns)
        return runs.assign(finished_at=runs["finished_at"].astype(f"datetime64[{unit}, UTC]"))

    verdicts = []
    for index in range(1, 10):
        scores = (rng.random(200) < 0.9).astype(float)
        run_id = f"2026{index:04d}T000000Z-0000"
        prints = {"config_fingerprint": "c", "data_fingerprint": "d", "checker_fingerprint": "k"}
        runs = at_unit(tmp_path)
        assert str(runs["finished_at"].dtype) == f"datetime64[{unit}, UTC]"
        verdict, columns = history_verdict(
            tmp_path,
            "m",
            run_id,
            scores_table(scores),
            prints,
            MonitorConfig(),
            runs=runs,
            pinned=None,
            finished=T0 + index * DAY,
        )
        row = {"model_id": "m", "benchmark": "b", "n_items": 200, "finished_at": T0 + index * DAY, **prints, **columns}
        history.append_run(tmp_path, run_id, [row], scores_table(scores))
        verdicts.append((columns["history_runs_per_year"], verdict))
    first_cadence, nothing = verdicts[0]
    assert nothing is None and first_cadence == DEFAULT_RUNS_PER_YEAR
    for earlier, (recorded, verdict) in enumerate(verdicts[1:], start=1):
        assert verdict.runs_per_year == recorded and verdict.verdict == "no detectable change"
        if earlier < MIN_EARLIER_RUNS:
            assert verdict.cadence == "default" and recorded == DEFAULT_RUNS_PER_YEAR
            assert f"{earlier} earlier runs" in verdict.cadence_reason and "the default 365" in verdict.note
        else:
            assert verdict.cadence == "inferred" and recorded == pytest.approx(365.25)
            assert "median spacing (1 day)" in verdict.cadence_reason and "default" not in (verdict.note or "")


def test_the_reference_band_never_shows_a_score_outside_0_to_1(tmp_path: Path) -> None:
    """`ape history` once printed `0.975 [0.889, 1.061]` for a pass rate. The band is the
    single-run limit in score units; a side whose limit no score can reach has none."""
    row = {
        "model_id": "m",
        "benchmark": "b",
        "n_items": 40,
        "mean_score": 0.975,
        "ci_low": 0.87,
        "ci_high": 0.996,
        "finished_at": T0,
        "history_verdict": "no detectable change",
        "history_reference_mean": 0.975,
        "history_se": 0.025,
        "history_limit": 3.44,
        "history_z": 0.1,
        "history_h": 2.6,
        "history_cusum_up": 0.0,
        "history_cusum_down": 0.0,
    }
    inside = {**row, "history_reference_mean": 0.5, "history_se": 0.01, "history_limit": 3.0}
    floor = {**row, "history_reference_mean": 0.02, "history_se": 0.025}  # near 0: no lower limit
    for index, summary in enumerate((row, inside, floor, {**row, "history_se": None})):
        history.append_run(tmp_path, f"2026{index:04d}T000000Z-0000", [summary], scores_table(np.ones(40)))
    runs = history.read_runs(tmp_path)
    low, high = reference_band(runs)
    assert low[0] == pytest.approx(0.975 - 3.44 * 0.025) and pd.isna(high[0])  # the limit the monitor applies
    assert (low[1], high[1]) == pytest.approx((0.47, 0.53))
    assert pd.isna(low[2]) and high[2] == pytest.approx(0.02 + 0.086)
    shown = pd.concat([low, high]).dropna()
    assert ((shown >= 0) & (shown <= 1)).all()
    table = history_markdown(runs)
    assert "0.975 [0.889, none]" in table and "0.500 [0.470, 0.530]" in table and "0.020 [none, 0.106]" in table
    assert "1.061" not in table and "-0.066" not in table
    assert table.rstrip().endswith(LEGEND) and "`none`" in LEGEND  # the marks are explained under the table
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
        row = {
            "model_id": "m",
            "benchmark": "b",
            "n_items": 300,
            "mean_score": scores.mean(),
            "finished_at": T0 + i * DAY,
            "config_fingerprint": "c" if i > 2 else "old",
            "data_fingerprint": "d",
            "checker_fingerprint": "k",
            "previous_verdict": "no detectable change",
        }
        history.append_run(tmp_path, f"2026{i:04d}T000000Z-0000", [row], scores_table(scores))
    frame = pd.read_parquet(tmp_path / "history" / "runs.parquet")
    frame[[c for c in old if c in frame.columns]].to_parquet(tmp_path / "history" / "runs.parquet")
    assert history.read_runs(tmp_path)["history_verdict"].isna().all()
    assert "(vs previous run)" in history_markdown(history.read_runs(tmp_path))
    _, verdict = record(tmp_path, 6, (rng.random(300) < 0.9).astype(float))
    # the reference: the trailing runs with the current fingerprints (runs 3 to 5)
    assert verdict.reference_runs == 3 and verdict.reference_from == f"2026{3:04d}T000000Z-0000"
    assert verdict.verdict == "no detectable change"
