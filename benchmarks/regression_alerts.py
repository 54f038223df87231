"""Can the regression alerts be trusted night after night? A seeded simulation.

Runs are drawn the way the built-in mock model answers with ``sampling = true``: an
item is *consistent* with probability ``consistency`` (answered alike in every run, right
when its fixed draw is below the accuracy) and drawn afresh per session otherwise;
``runs_per_data`` sessions per item are averaged into the item's score. The graded
metric draws scores in [0, 1] (Beta around an item's quality, mean 0.90) the same way.
Each run is judged by the functions a scheduled run calls, as :mod:`ape.tasks.after_run.join_history`
does: the thresholds from the runs' finish times (:func:`ape.tasks.stats.history_verdicts.thresholds`:
the cadence inferred from their spacing, read from a time column at the resolution the
history has, ``datetime64[us]`` under pandas 3, with the default ``[monitor]`` settings, so
the first runs use the nightly default), then :func:`~ape.tasks.stats.monitor.paired` and
:func:`~ape.tasks.stats.monitor.step`, with a reference of the runs since the last change
point (at most ``window``), vectorised over trials so a model-year takes milliseconds.
The schedule is every day by default (``--every 1h``, ``--every 10min``: hourly, minutes
apart; a model-year is then the runs a year of the inferred cadence holds).

Figures (N = 500 items, nightly: 365 runs a year, budget 1 false alarm per model-year):

1. False alarms of an unchanged model per model-year (goal: at most 1).
2. A drop 0.90 -> 0.85 after 30 ordinary runs: share of trials flagged "regressed" in the
   first run after it and within two runs (goals: first run >= 0.80 at consistency >= 0.5;
   within two >= 0.80 at consistency 0 and >= 0.95 at >= 0.5).
3. A drift of one point per run from 0.90: share flagged within 6 runs (goal >= 0.90).

Today's method (each run against the previous run and the first run, the exact McNemar
test of :func:`ape.tasks.stats.regression.compare` at 5%) is measured on the same draws for
comparison, vectorised the same way.

Usage: python benchmarks/regression_alerts.py [--years 40] [--trials 300] [--every 1D] [--unit us]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ape.schemas.config import MonitorConfig
from ape.tasks.stats.history_verdicts import thresholds
from ape.tasks.stats.monitor import Cadence, Design, cadence, epoch_seconds, paired, step

N = 500
MONITOR = MonitorConfig()  # the defaults: no runs_per_year, 1 false alarm per model-year
WINDOW = MONITOR.window
BUDGET = MONITOR.false_alarms_per_year
WARMUP = 30
START = pd.Timestamp("2026-01-01 03:00", tz="UTC")


@dataclass(frozen=True)
class Schedule:
    """When the runs finish: every ``every`` from ``START``, kept at ``unit`` resolution as the
    history's ``finished_at`` column is."""

    every: pd.Timedelta = pd.Timedelta(days=1)
    unit: str = "us"

    @property
    def runs_per_year(self) -> int:
        """Runs in a model-year: the cadence the monitor infers once it has a window of these runs."""
        times = pd.Series([START + i * self.every for i in range(WINDOW + 1)], dtype=f"datetime64[{self.unit}, UTC]")
        return round(cadence(epoch_seconds(times)).runs_per_year)


SCHEDULE = Schedule()


@dataclass(frozen=True)
class Setting:
    consistency: float
    runs_per_data: int = 1
    graded: bool = False

    @property
    def label(self) -> str:
        metric = "graded" if self.graded else "pass/fail"
        return f"{metric:9} c={self.consistency:.1f} k={self.runs_per_data}"


class Model:
    """Draws runs of ``trials`` independent models on ``n`` items (one benchmark each)."""

    def __init__(self, setting: Setting, trials: int, n: int, rng: np.random.Generator) -> None:
        self.setting, self.rng = setting, rng
        self.consistent = rng.random((trials, n)) < setting.consistency
        self.fixed = rng.random((trials, n))
        if setting.graded:
            self.quality = rng.beta(9.0, 1.0, (trials, n))
        self._fixed_scores: dict[float, np.ndarray] = {}

    def run(self, accuracy: np.ndarray | float) -> np.ndarray:
        trials, n = self.fixed.shape
        k = self.setting.runs_per_data
        accuracy = np.broadcast_to(np.asarray(accuracy, dtype=float), (trials,))[:, None, None]
        if self.setting.graded:
            a = 10.0 * np.clip(self.quality * accuracy[..., 0] / 0.9, 1e-3, 1 - 1e-3)[:, None, :]
            fresh = self.rng.beta(a, 10.0 - a, (trials, k, n))
            key = float(accuracy.mean())
            if key not in self._fixed_scores:  # a consistent item's score: one draw for every run
                self._fixed_scores[key] = stats.beta.ppf(self.fixed, a[:, 0], 10.0 - a[:, 0])[:, None, :]
            fixed = self._fixed_scores[key]
            scores = np.where(self.consistent[:, None, :], fixed, fresh)
        else:
            fresh = self.rng.random((trials, k, n))
            draw = np.where(self.consistent[:, None, :], self.fixed[:, None, :], fresh)
            scores = (draw < accuracy).astype(float)
        return scores.mean(axis=1)


class Monitor:
    """The scheduled run's monitor over a batch of trials: reference window, sums and the times."""

    def __init__(self, trials: int, n: int, schedule: Schedule = SCHEDULE) -> None:
        self.schedule = schedule
        self.finished: list[pd.Timestamp] = []  # the earlier runs' finish times (the newest window)
        self.buffer = np.full((trials, WINDOW, n), np.nan)
        self.up = np.zeros(trials)
        self.down = np.zeros(trials)
        self.t = 0

    def thresholds(self) -> tuple[Cadence, Design]:
        """The thresholds of the next run, from the finish times as the history holds them."""
        earlier = pd.Series(self.finished, dtype=f"datetime64[{self.schedule.unit}, UTC]")
        return thresholds(earlier, START + self.t * self.schedule.every, MONITOR, pinned=False)

    def observe(self, scores: np.ndarray) -> np.ndarray:
        _, design = self.thresholds()
        comparison = paired(scores, self.buffer)
        result = step(comparison.z, self.up, self.down, design)
        self.up, self.down = result.up, result.down
        self.buffer[result.restart] = np.nan  # a new reference starts (after an alarming run)
        self.buffer[:, self.t % WINDOW] = np.where(result.joins[:, None], scores, np.nan)
        self.finished = [*self.finished, START + self.t * self.schedule.every][-WINDOW:]
        self.t += 1
        return result.verdict


class Today:
    """Today's method: McNemar (exact, 5%) against the previous run and the first run."""

    def __init__(self) -> None:
        self.first: np.ndarray | None = None
        self.previous: np.ndarray | None = None

    @staticmethod
    def regressed(current: np.ndarray, reference: np.ndarray) -> np.ndarray:
        now, before = current >= 0.5, reference >= 0.5
        gained, lost = (now & ~before).sum(axis=-1), (~now & before).sum(axis=-1)
        p = np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(gained, lost), gained + lost, 0.5))
        return (p < 0.05) & (gained < lost)

    def observe(self, scores: np.ndarray) -> np.ndarray:
        alert = np.zeros(scores.shape[0], dtype=bool)
        if self.previous is not None and self.first is not None:
            alert = self.regressed(scores, self.previous) | self.regressed(scores, self.first)
        self.first = scores if self.first is None else self.first
        self.previous = scores
        return alert


def false_alarms(setting: Setting, years: int, seed: int, schedule: Schedule = SCHEDULE) -> tuple[float, float, float]:
    """(alarms per model-year, its 95% half-width across years, today's alerts per model-year)."""
    rng = np.random.default_rng(seed)
    model = Model(setting, years, N, rng)
    monitor, today = Monitor(years, N, schedule), Today()
    alarms = np.zeros(years)
    alerts = np.zeros(years)
    for _ in range(schedule.runs_per_year):
        scores = model.run(0.90)
        alarms += monitor.observe(scores) != 0
        alerts += today.observe(scores)
    return float(alarms.mean()), float(1.96 * alarms.std(ddof=1) / np.sqrt(years)), float(alerts.mean())


def drop(setting: Setting, trials: int, seed: int, schedule: Schedule = SCHEDULE) -> tuple[float, float, float]:
    """(flagged in the first run after 0.90 -> 0.85, within two runs, today's first-run share)."""
    rng = np.random.default_rng(seed)
    model = Model(setting, trials, N, rng)
    monitor, today = Monitor(trials, N, schedule), Today()
    for _ in range(WARMUP):
        scores = model.run(0.90)
        monitor.observe(scores)
        today.observe(scores)
    first_scores = model.run(0.85)
    first = monitor.observe(first_scores) < 0
    today_first = today.regressed(first_scores, today.previous)
    second = monitor.observe(model.run(0.85)) < 0
    return float(first.mean()), float((first | second).mean()), float(today_first.mean())


def drift(setting: Setting, trials: int, seed: int, runs: int = 6, schedule: Schedule = SCHEDULE) -> float:
    """Share of trials flagged "regressed" within ``runs`` runs of a drift of one point per run."""
    rng = np.random.default_rng(seed)
    model = Model(setting, trials, N, rng)
    monitor = Monitor(trials, N, schedule)
    for _ in range(WARMUP):
        monitor.observe(model.run(0.90))
    flagged = np.zeros(trials, dtype=bool)
    for j in range(1, runs + 1):
        flagged |= monitor.observe(model.run(0.90 - 0.01 * j)) < 0
    return float(flagged.mean())


SETTINGS = [
    *(Setting(c, k) for k in (1, 3) for c in (0.0, 0.5, 0.8, 1.0)),
    Setting(0.0, 1, graded=True),
    Setting(0.5, 1, graded=True),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--years", type=int, default=40, help="simulated model-years per setting")
    parser.add_argument("--trials", type=int, default=300, help="trials of the drop and the drift")
    parser.add_argument("--every", default="1D", help="time between runs (pandas: 1D, 1h, 10min)")
    parser.add_argument("--unit", default="us", choices=["s", "ms", "us", "ns"], help="resolution of the time column")
    args = parser.parse_args()
    schedule = Schedule(pd.Timedelta(args.every), args.unit)
    probe = Monitor(1, 1, schedule)
    first, _ = probe.thresholds()
    for _ in range(WINDOW):
        probe.observe(np.zeros((1, 1)))
    pace, design = probe.thresholds()
    print(
        f"N={N} items, a run every {args.every} (finish times at [{schedule.unit}]); the first run's cadence: "
        f"{first.reason}; from the 31st: {pace.reason}. Budget {BUDGET:g} false alarm per model-year "
        f"({schedule.runs_per_year} runs), window {WINDOW} runs; design k={design.k:.2f} h={design.h:.2f} "
        f"L={design.limit:.2f} (in-control ARL {design.arl:.0f})"
    )
    print(
        "| setting | false alarms / model-year (goal <= 1) | today: alerts / model-year "
        "| drop: 1st run | drop: within 2 | today: 1st run | drift: within 6 |"
    )
    print("|---|---|---|---|---|---|---|")
    for index, setting in enumerate(SETTINGS):
        started = time.perf_counter()
        rate, half, today = false_alarms(setting, args.years, seed=100 + index, schedule=schedule)
        cells = [f"{rate:.2f} ± {half:.2f}", f"{today:.1f}"]
        if setting.graded:
            cells += ["-", "-", "-", "-"]
        else:
            first_run, two, today_first = drop(setting, args.trials, seed=200 + index, schedule=schedule)
            cells += [
                f"{first_run:.2f}",
                f"{two:.2f}",
                f"{today_first:.2f}",
                f"{drift(setting, args.trials, 300 + index, schedule=schedule):.2f}",
            ]
        print(f"| {setting.label} | " + " | ".join(cells) + f" |  <!-- {time.perf_counter() - started:.0f} s -->")


if __name__ == "__main__":
    main()
