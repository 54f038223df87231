"""A new run of one model against its own recent history: the reference, the decision, the record.

Reads the state the previous run left in ``runs.parquet`` (the monitor columns of
:mod:`ape.tasks.storage.history`), builds the reference of the runs since the last change point
(at most ``window`` of them, items paired by id and unchanged content), takes one step of
the detector of :mod:`ape.tasks.stats.monitor` and returns the verdict with the columns that
carry the state on to the next run. Histories written before the monitor existed have no
state: the reference is then the trailing runs with the current fingerprints, both sums
start at zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ape.schemas.config import MonitorConfig
from ape.schemas.report import RegressionRow
from ape.tasks.stats.intervals import CONFIDENCE_LEVEL
from ape.tasks.stats.monitor import Cadence, Design, cadence, design, detectable_drop, epoch_seconds, paired, step
from ape.tasks.stats.normal import two_sided_z
from ape.tasks.storage import history

FINGERPRINTS = ("config_fingerprint", "data_fingerprint", "checker_fingerprint")
VERDICTS = {-1: "regressed", 1: "improved", 0: "no detectable change"}


@dataclass(frozen=True)
class Start:
    """Where the current reference starts and the sums it carries."""

    start: str
    up: float
    down: float
    change: str | None  # "baseline" when ``ape baseline`` moved the start for this run


def _fresh(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def current_start(mine: pd.DataFrame, pinned: str | None) -> Start:
    """The reference start and the sums after the newest earlier run of the model (``mine``, oldest first)."""
    last = mine.iloc[-1]
    if not _fresh(last.get("history_start")):
        start = str(last["history_start"])
        restarted = last.get("history_change") in ("alarm", "fingerprint")  # "baseline" reset before its run
        up = 0.0 if restarted or _fresh(last.get("history_cusum_up")) else float(last["history_cusum_up"])
        down = 0.0 if restarted or _fresh(last.get("history_cusum_down")) else float(last["history_cusum_down"])
    else:  # a history written before the monitor: the trailing runs with the newest fingerprints
        same = np.logical_and.reduce([(mine[c] == last[c]).to_numpy() for c in FINGERPRINTS])
        breaks = np.flatnonzero(~same)
        start = str(mine["run_id"].iloc[breaks[-1] + 1 if breaks.size else 0])
        up = down = 0.0
    if pinned is not None and pinned > start and pinned in set(mine["run_id"]):
        return Start(start=pinned, up=0.0, down=0.0, change="baseline")
    return Start(start=start, up=up, down=down, change=None)


#: An earlier run's items (the history's ``items`` columns) with scores graded again by the
#: current checker, or None when its saved answers are gone.
Rescorer = Callable[[str], "pd.DataFrame | None"]


def reference_matrix(
    top: Path, runs: list[str], model_id: str, current: pd.DataFrame, given: dict[str, pd.DataFrame] | None = None
) -> np.ndarray:
    """(runs, items) scores of the reference runs aligned to ``current``; NaN where an item is
    missing or its content changed. ``given`` replaces the history's items of some runs."""
    given = given or {}
    ids = current["item_id"].astype(str).to_numpy()
    hashes = current["item_hash"].astype(str).to_numpy()
    matrix = np.full((len(runs), len(ids)), np.nan)
    position = pd.Index(ids)
    for row, run_id in enumerate(runs):
        items = given[run_id] if run_id in given else history.read_items(top, run_id, model_id)
        where = position.get_indexer(items["item_id"].astype(str))
        keep = where >= 0
        same = hashes[where[keep]] == items["item_hash"].astype(str).to_numpy()[keep]
        matrix[row, where[keep][same]] = items["score"].to_numpy(float)[keep][same]
    return matrix


def evidence(z: float, down: float, up: float, design: Design, verdict: int, by_limit: bool) -> str:
    """The statistic against its threshold, in words."""
    if verdict != 0 and by_limit:
        return f"z = {z:+.2f} beyond the single-run limit ±{design.limit:.2f}"
    if verdict < 0:
        return f"downward CUSUM {down:.2f} > h = {design.h:.2f} (z = {z:+.2f})"
    if verdict > 0:
        return f"upward CUSUM {up:.2f} > h = {design.h:.2f} (z = {z:+.2f})"
    return f"z = {z:+.2f} (limit ±{design.limit:.2f}); CUSUM down {down:.2f}, up {up:.2f} (h = {design.h:.2f})"


def thresholds(
    earlier: pd.Series, finished: pd.Timestamp, settings: MonitorConfig, *, pinned: bool
) -> tuple[Cadence, Design]:
    """The cadence of a model's runs and the detector's thresholds for its next run.

    ``earlier``: the finish times of the model's earlier runs (the history's ``finished_at``,
    any resolution), ``finished``: this run's. The newest ``window`` gaps set the cadence, so a
    schedule that changed is followed within a window. A pinned baseline takes half the
    false-alarm budget (its McNemar tests spend the other half)."""
    times = np.append(epoch_seconds(earlier), epoch_seconds([finished]))
    times = times[~np.isnan(times)]  # rows of older versions may lack a time
    pace = cadence(times[-(settings.window + 1) :], settings.runs_per_year)
    budget = settings.false_alarms_per_year * (0.5 if pinned else 1.0)
    return pace, design(pace.runs_per_year, budget)


def history_verdict(
    top: Path,
    model_id: str,
    run_id: str,
    current: pd.DataFrame,
    prints: dict[str, str],
    settings: MonitorConfig,
    *,
    runs: pd.DataFrame,
    pinned: str | None,
    finished: pd.Timestamp,
    rescore: Rescorer | None = None,
) -> tuple[RegressionRow | None, dict[str, Any]]:
    """The verdict of ``run_id`` against the model's history (``runs``: the runs table before
    this run) and the history columns to record. No verdict for a model's first run.

    When the checker changed and ``rescore`` can grade the newest reference runs' saved
    answers again (at most ``settings.rescore_runs``), the run is judged against those, as
    if the checker had not changed, and still starts a new reference: the history keeps the
    scores each run had when it was recorded.

    The steps are separate functions so each can be read alone: which runs are the
    reference (:func:`choose_reference`), the detector's step (:func:`decide`), the change
    point it leaves (:func:`change_point`), and what is written: the row
    (:func:`regression_row`, with :func:`notes`) and the history columns (:func:`history_columns`)."""
    mine = runs[(runs["model_id"] == model_id) & (runs["run_id"] < run_id)].sort_values("run_id")
    pace, design = thresholds(mine["finished_at"], finished, settings, pinned=pinned is not None)
    record: dict[str, Any] = {
        "history_runs_per_year": pace.runs_per_year,
        "history_limit": design.limit,
        "history_h": design.h,
        "history_k": design.k,
    }
    if mine.empty:
        record.update(first_run_columns(run_id))
        return None, record
    begin = current_start(mine, pinned)
    last = mine.iloc[-1]
    changed = [c.split("_")[0] for c in FINGERPRINTS if last[c] != prints.get(c, last[c])]
    reference = choose_reference(mine, begin, changed, settings, rescore)
    judged_changed = [c for c in changed if not (c == "checker" and reference.regraded)]
    scores = current["score"].to_numpy(float)
    matrix = reference_matrix(top, reference.runs, model_id, current, reference.regraded)
    outcome = decide(scores, matrix, begin, design, judged_changed)
    change = change_point(changed, outcome.verdict, begin)
    row = regression_row(
        model_id,
        run_id,
        str(last["run_id"]),
        scores,
        reference,
        outcome,
        pace,
        design,
        change,
        notes(reference, judged_changed, changed, begin, pace, outcome.unpaired),
    )
    record.update(history_columns(run_id, row, outcome, begin, change))
    return row, record


def first_run_columns(run_id: str) -> dict[str, Any]:
    """The history columns of a model's first run: it starts the reference, with no verdict."""
    return {
        "history_start": run_id,
        "history_change": "first",
        "history_joins": True,
        "history_since": 1,
        "history_cusum_up": 0.0,
        "history_cusum_down": 0.0,
    }


@dataclass(frozen=True)
class Reference:
    """The earlier runs a new run is compared with, kept together because the row, the notes
    and the history columns all describe the same choice."""

    since_change: int  # the joined runs since the change point (before the window cut)
    runs: list[str]  # the reference runs, oldest first
    regraded: dict[str, pd.DataFrame]  # run id -> its items graded again by the current checker


def choose_reference(
    mine: pd.DataFrame, begin: Start, changed: list[str], settings: MonitorConfig, rescore: Rescorer | None
) -> Reference:
    """The newest ``window`` joined runs since the reference start; when the checker changed,
    only those whose saved answers could be graded again, so the run is compared as if the
    checker had not changed (when none can be, the whole window, judged by the single-run limit)."""
    joined = mine["history_joins"].fillna(True).astype(bool)
    candidates = mine[(mine["run_id"] >= begin.start) & joined]
    runs = candidates["run_id"].tail(settings.window).tolist()
    regraded: dict[str, pd.DataFrame] = {}
    if "checker" in changed and rescore is not None and settings.rescore_runs and runs:
        found = {r: rescore(r) for r in runs[-settings.rescore_runs :]}
        regraded = {r: items for r, items in found.items() if items is not None}
        if regraded:
            runs = [r for r in runs if r in regraded]
    return Reference(since_change=len(candidates), runs=runs, regraded=regraded)


@dataclass(frozen=True)
class Outcome:
    """One step of the detector on this run, unpacked from the arrays of
    :func:`~ape.tasks.stats.monitor.paired` and :func:`~ape.tasks.stats.monitor.step`
    (which take many models at once) into the numbers of this one."""

    z: float
    up: float  # the sums before an alarm resets them: what the row shows
    down: float
    verdict: int  # -1 regressed, 1 improved, 0 no detectable change
    by_limit: bool
    n: int  # paired items
    se: float
    diff: float | None  # the mean paired difference; None with no paired item
    reference_mean: float | None
    unpaired: int  # current items left out as new or changed


def decide(scores: np.ndarray, matrix: np.ndarray, begin: Start, design: Design, judged_changed: list[str]) -> Outcome:
    """Pair the run with the reference matrix and take the detector's step from the carried sums;
    a changed fingerprint not made good by re-scoring is judged by the single-run limit alone."""
    comparison = paired(scores[None, :], matrix[None, :, :])
    z = float(comparison.z[0])
    result = step(np.array([z]), np.array([begin.up]), np.array([begin.down]), design, bool(judged_changed))
    n = int(comparison.n_items[0])
    return Outcome(
        z=z,
        up=float(result.up_before_reset[0]),
        down=float(result.down_before_reset[0]),
        verdict=int(result.verdict[0]),
        by_limit=bool(result.by_limit[0]),
        n=n,
        se=float(comparison.se[0]),
        diff=float(comparison.mean_diff[0]) if n else None,
        reference_mean=float(comparison.reference_mean[0]) if n else None,
        unpaired=len(scores) - n if matrix.shape[0] else 0,  # with no reference, nothing is new or changed
    )


def change_point(changed: list[str], verdict: int, begin: Start) -> str | None:
    """Why the reference starts anew after (or, for ``baseline``, at) this run: a changed
    fingerprint outranks an alarm, which outranks a pinned baseline."""
    if changed:
        return "fingerprint"
    if verdict != 0:
        return "alarm"
    return begin.change


def notes(
    reference: Reference, judged_changed: list[str], changed: list[str], begin: Start, pace: Cadence, unpaired: int
) -> list[str]:
    """The row's notes: everything that makes this verdict differ from an ordinary comparison."""
    said = []
    if reference.regraded:
        said.append(
            f"checker changed: the saved answers of the {len(reference.regraded)} newest reference runs were "
            "re-scored with this run's checker (no model calls) and compared on those"
        )
    if judged_changed:
        said.append(f"{', '.join(judged_changed)} changed: judged against the old reference by the single-run limit")
    if changed:
        said.append("the next runs are compared with this one onwards")
    if begin.change == "baseline":
        said.append(f"the reference starts at the pinned baseline {begin.start}")
    if not reference.runs:
        said.append("the first run of a new reference (the run before it alarmed): nothing to compare with yet")
    if pace.source == "default":
        said.append(f"thresholds for {pace.reason}")
    if unpaired:
        said.append(f"{unpaired} items new or changed: left out")
    return said


def regression_row(
    model_id: str,
    run_id: str,
    last_run: str,
    scores: np.ndarray,
    reference: Reference,
    outcome: Outcome,
    pace: Cadence,
    design: Design,
    change: str | None,
    said: list[str],
) -> RegressionRow:
    """The report's row of the verdict, with the interval of the mean difference and the
    smallest drop the next run could still detect (from zero sums after a restart)."""
    diff, n = outcome.diff, outcome.n
    half_width = two_sided_z(1 - CONFIDENCE_LEVEL) * outcome.se  # the normal interval of the mean difference
    restart = change in ("fingerprint", "alarm")
    return RegressionRow(
        model_id=model_id,
        run_id=run_id,
        against="history",
        reference_run_id=reference.runs[-1] if reference.runs else last_run,
        reference_from=reference.runs[0] if reference.runs else None,
        reference_runs=len(reference.runs),
        runs_since_change=reference.since_change + 1,
        verdict=VERDICTS[outcome.verdict] if n else "not comparable",
        n_items=n,
        mean_current=float(np.nanmean(scores)) if len(scores) else None,
        mean_reference=outcome.reference_mean,
        mean_diff=diff,
        ci_low=diff - half_width if diff is not None else None,
        ci_high=diff + half_width if diff is not None else None,
        statistic=outcome.z,
        threshold=design.limit,
        cusum_down=outcome.down,
        cusum_up=outcome.up,
        cusum_limit=design.h,
        evidence=evidence(outcome.z, outcome.down, outcome.up, design, outcome.verdict, outcome.by_limit),
        change_point=change,
        alpha=1.0 / design.arl,
        min_detectable_change=detectable_drop(0.0 if restart else outcome.down, outcome.se, design) if n else None,
        new_items=outcome.unpaired,
        rescored_runs=len(reference.regraded),
        runs_per_year=pace.runs_per_year,
        cadence=pace.source,
        cadence_reason=pace.reason,
        note="; ".join(said) or None,
    )


def history_columns(
    run_id: str, row: RegressionRow, outcome: Outcome, begin: Start, change: str | None
) -> dict[str, Any]:
    """The state carried to the next run (the sums, where the reference starts, whether this
    run joins it) and what the trend report shows of this one."""
    restart = change in ("fingerprint", "alarm")
    return {
        "history_z": outcome.z,
        "history_se": outcome.se,
        "history_cusum_up": outcome.up,
        "history_cusum_down": outcome.down,
        "history_reference_mean": row.mean_reference,
        "history_reference_from": row.reference_from,
        "history_reference_runs": row.reference_runs,
        "history_since": row.runs_since_change,
        "history_start": run_id if restart else begin.start,
        "history_change": change,
        "history_joins": not (change == "alarm"),
        "history_evidence": row.evidence,
    }
