"""Regression monitoring across runs: a model against its own recent history.

Every new run of a model is compared, paired by item, with a *reference*: per item, the
mean score over the model's runs since the last change point (a confirmed alarm, a
changed fingerprint of model, prompt, solver, data or checker, or ``ape baseline``),
at most ``[monitor] window`` runs. Scores are the item's mean over its sessions, so
graded metrics and ``runs_per_data > 1`` count fully.

The per-run statistic is the standardized paired difference

    z = mean_i(x_i - ref_i) / se,   se^2 = w * mean_i(1 + 1 / m_i) / n

(then corrected for skewness, below) where ``w`` is the run-to-run variance of an item's
score measured *within the reference runs* (so a model that answers alike every run, high
"consistency", gets a small ``w``, and a real change does not inflate its own yardstick),
``m_i`` the reference runs of item ``i`` and ``n`` the paired items. With only one
reference run ``w`` is half the variance of the paired differences. Under an unchanged
model the ``z`` of successive runs are the recursive residuals of the self-starting CUSUM
of Hawkins (1987, "Self-starting CUSUM charts for location and scale", The Statistician
36), close to independent N(0, 1). Close, not equal: a mean of pass/fail scores near 0.9
has a long lower tail (skewness about -2.7 / sqrt(items that vary)), which doubles the
chance of z < -3.4. So ``z`` is mapped to its normal score by the Cornish-Fisher expansion
(Cornish and Fisher 1937), ``z - g/6 (z^2 - 1)``, with the skewness ``g`` of the mean
difference estimated from the items' third cumulants within the reference runs (held
constant beyond |z| = 4 and |g| = 0.5, so the map stays monotone).

They feed a two-sided combined Shewhart-CUSUM scheme (Page 1954, "Continuous inspection
schemes", Biometrika 41; Lucas 1982, "Combined Shewhart-CUSUM quality control schemes",
J. Quality Technology 14; Montgomery, "Introduction to Statistical Quality Control",
ch. 9):

    up_t   = max(0, up_{t-1}   + z_t - k)      alarm "improved"  if up_t   > h or z_t >  L
    down_t = max(0, down_{t-1} - z_t - k)      alarm "regressed" if down_t > h or z_t < -L

The single-run limit ``L`` catches a sudden drop in the run it happens; the cumulative
sums catch a slow drift. ``k``, ``h`` and ``L`` are chosen so that the in-control average
run length (ARL, runs between false alarms) of the two-sided scheme equals ``1.2 *
runs_per_year / false_alarms_per_year`` (a 20% margin for the approximations): the ARL of
each side is computed with the Markov chain of Brook and Evans (1972, Biometrika 59) and
the two sides combined as ``1/ARL = 1/ARL_up + 1/ARL_down``. The cadence ``runs_per_year`` is
``[monitor] runs_per_year`` when set, else the median spacing of the model's finish times
(:func:`cadence`, read with :func:`epoch_seconds`, which does not depend on the time
column's resolution), trusted once ``MIN_EARLIER_RUNS`` (5) earlier runs exist and nightly
until then; each verdict says which it used and why. After an alarm both sums
restart at zero and the reference restarts with the run after the alarming one (that run
was picked for being extreme; as a reference it would make the next ordinary run alarm the
other way). The first run after a changed fingerprint is judged against the old reference
by the single-run limit (the verdict on the change), then starts the new reference.

:func:`ape.tasks.stats.monitor.step` is the one place the decision is taken; the scheduled
run (:mod:`ape.tasks.after_run.join_history`) and ``benchmarks/regression_alerts.py`` both call it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
import pandas as pd
from scipy.special import ndtr

from ape.tasks.stats.normal import z_quantile

K = 1.0  # reference value in standard units: tuned to shifts of about 2 (a drop the size of 2 se)
SHEWHART_SHARE = 0.25  # share of the false-alarm budget spent by the single-run limit
POWER = 0.8
# the design's in-control ARL is this much above runs_per_year / budget: z is only close to
# N(0, 1) (estimated variance, short references after a restart, discrete scores), and the
# seeded simulation (benchmarks/regression_alerts.py) measures the rate that results
MARGIN = 1.2
MIN_RUNS_PER_YEAR = 1.0
MAX_RUNS_PER_YEAR = 24 * 365.0  # hourly
DEFAULT_RUNS_PER_YEAR = 365.0


@dataclass(frozen=True)
class Design:
    """Thresholds of the two-sided scheme for one false-alarm budget."""

    k: float
    h: float
    limit: float
    arl: float  # in-control average run length (runs per false alarm), both sides together


def _one_sided_arl(k: float, h: float, limit: float, shift: float = 0.0, states: int = 60) -> float:
    """ARL of ``S = max(0, S + z - k)``, alarm at ``S > h`` or ``z > limit``, z ~ N(shift, 1)."""
    w = 2 * h / (2 * states - 1)
    centres = np.arange(states) * w
    edges = np.concatenate([[-np.inf], (np.arange(states) + 0.5) * w])  # upper edges of states
    # z that moves S from centre i into state j: (edge_{j-1} - c_i + k, edge_j - c_i + k], capped at limit
    upper = np.minimum(edges[1:][None, :] - centres[:, None] + k, limit) - shift
    lower = np.minimum(edges[:-1][None, :] - centres[:, None] + k, limit) - shift
    cdf = _norm_cdf
    transition = cdf(upper) - cdf(lower)
    arl = np.linalg.solve(np.eye(states) - transition, np.ones(states))
    return float(arl[0])


def _norm_cdf(x: np.ndarray) -> np.ndarray:

    return ndtr(x)


def two_sided_arl(k: float, h: float, limit: float, shift: float = 0.0) -> float:
    up = _one_sided_arl(k, h, limit, shift)
    down = up if shift == 0 else _one_sided_arl(k, h, limit, -shift)
    return 1.0 / (1.0 / up + 1.0 / down)


@lru_cache(maxsize=256)
def _design(arl: float, k: float) -> Design:
    limit = z_quantile(1 - 1 / (2 * arl / SHEWHART_SHARE))
    low, high = 0.0, 20.0
    for _ in range(32):
        middle = (low + high) / 2
        if two_sided_arl(k, middle, limit) < arl:
            low = middle
        else:
            high = middle
    return Design(k=k, h=high, limit=limit, arl=arl)


def design(runs_per_year: float, false_alarms_per_year: float, k: float = K) -> Design:
    """Thresholds giving on average ``false_alarms_per_year`` alarms of an unchanged model."""
    arl = max(MARGIN * runs_per_year / false_alarms_per_year, 2.0)
    return _design(float(f"{arl:.3g}"), k)  # rounded: a cached design per budget


#: earlier runs of a model needed before their spacing sets the cadence: with fewer, one odd
#: gap (a manual run between two nightly ones, a retry) is the median and moves the thresholds
MIN_EARLIER_RUNS = 5
YEAR = 365.25 * 86400.0  # seconds
SECOND = pd.Timedelta(seconds=1)
EPOCH = pd.Timestamp(0, tz="UTC")


def epoch_seconds(times: Sequence[object] | pd.Series | pd.Index) -> np.ndarray:
    """Seconds since 1970-01-01 UTC of each time (NaN where missing), whatever the resolution.

    Why not ``astype("int64") / 1e9``: the integer view counts in the column's own unit, which
    depends on the installed versions and on how the column was made (pandas 3 reads the
    history's Parquet timestamps as ``datetime64[us]``; other versions and frames built in
    memory can hold ``[ns]``, ``[ms]`` or ``[s]``). A difference of times divided by a
    ``Timedelta`` is a float in seconds for every unit. Naive times are taken as UTC.
    """
    stamps = pd.to_datetime(times if isinstance(times, pd.Series) else pd.Series(list(times), dtype=object), utc=True)
    return ((stamps - EPOCH) / SECOND).to_numpy(dtype=float, na_value=np.nan)


@dataclass(frozen=True)
class Cadence:
    """The runs per year the thresholds are designed for, where that number came from and why."""

    runs_per_year: float
    source: Literal["configured", "inferred", "default"]
    reason: str


def cadence(finished: Sequence[float] | np.ndarray, configured: float | None = None) -> Cadence:
    """The cadence: ``[monitor] runs_per_year`` when set, else from the median spacing of the
    runs' finish times (seconds since epoch, this run's last), once :data:`MIN_EARLIER_RUNS`
    earlier runs exist; before that the default, nightly (:data:`DEFAULT_RUNS_PER_YEAR`).

    The median of the gaps, not their mean: one long pause or a burst of manual runs does not
    move it. Clipped to between yearly and hourly: runs minutes apart (a user trying a config)
    are designed for as hourly ones, so their thresholds are never so strict that no drop is
    seen.
    """
    if configured:
        return Cadence(float(configured), "configured", f"[monitor] runs_per_year = {configured:g}")
    times = np.sort(np.asarray([t for t in finished if t is not None and not math.isnan(t)], dtype=float))
    earlier = max(times.size - 1, 0)
    if earlier < MIN_EARLIER_RUNS:
        return Cadence(
            DEFAULT_RUNS_PER_YEAR,
            "default",
            f"the default {DEFAULT_RUNS_PER_YEAR:g} runs a year (nightly): {earlier} earlier runs, fewer than the "
            f"{MIN_EARLIER_RUNS} whose spacing sets the cadence",
        )
    gap = float(np.median(np.diff(times)))
    spacing = YEAR / gap if gap > 0 else math.inf
    inferred = float(np.clip(spacing, MIN_RUNS_PER_YEAR, MAX_RUNS_PER_YEAR))
    clipped = ""
    if inferred != spacing:
        clipped = ", capped at hourly" if inferred == MAX_RUNS_PER_YEAR else ", raised to yearly"
    return Cadence(
        inferred,
        "inferred",
        f"{inferred:.4g} runs a year from the median spacing ({_duration(gap)}) of the last {times.size} runs{clipped}",
    )


def _duration(seconds: float) -> str:
    """A gap in words: "1 day", "7 minutes"."""
    value, unit = seconds, "second"
    for name, size in (("day", 86400.0), ("hour", 3600.0), ("minute", 60.0)):
        if seconds >= size:
            value, unit = seconds / size, name
            break
    return f"{value:.3g} {unit}{'' if f'{value:.3g}' == '1' else 's'}"


def runs_per_year(finished: Sequence[float] | np.ndarray, configured: float | None = None) -> float:
    """The runs per year of :func:`cadence`, without the reason."""
    return cadence(finished, configured).runs_per_year


MAX_SKEW = 0.5


def inflation_3(counts: np.ndarray, use: np.ndarray) -> np.ndarray:
    """Mean third-cumulant factor of ``x - mean(reference)`` per item: 1 - 1/m^2."""
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(use, 1 - 1 / np.maximum(counts, 1) ** 2, 0.0)
        return factor.sum(axis=-1) / np.maximum(use.sum(axis=-1), 1)


@dataclass(frozen=True)
class Paired:
    """The paired comparison of runs with their references (arrays over a leading batch axis)."""

    mean_diff: np.ndarray
    se: np.ndarray
    z: np.ndarray
    n_items: np.ndarray
    reference_runs: np.ndarray  # most reference runs of any item
    reference_mean: np.ndarray


def paired(current: np.ndarray, reference: np.ndarray) -> Paired:
    """``current`` (..., n) against ``reference`` (..., m, n); NaN marks a missing score.

    An item is paired when the current run and at least one reference run scored it.
    """
    current = np.asarray(current, dtype=float)
    reference = np.asarray(reference, dtype=float)
    present = ~np.isnan(reference)
    counts = present.sum(axis=-2)  # (..., n)
    filled = np.where(present, reference, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ref_mean = filled.sum(axis=-2) / counts
        use = (counts > 0) & ~np.isnan(current)
        n = use.sum(axis=-1)
        diff = np.where(use, current - ref_mean, 0.0)
        mean_diff = diff.sum(axis=-1) / n
        # run-to-run variance of an item within the reference runs (items seen twice or more)
        squares = np.where(present, (reference - ref_mean[..., None, :]) ** 2, 0.0).sum(axis=-2)
        several = use & (counts > 1)
        pooled = np.where(several, squares, 0.0).sum(axis=-1) / np.where(several, counts - 1, 0).sum(axis=-1)
        # one reference run: the paired differences carry the variance twice
        spread = np.where(use, (diff - mean_diff[..., None]) ** 2, 0.0).sum(axis=-1) / np.maximum(n - 1, 1) / 2
        within = np.where(np.isfinite(pooled), pooled, spread)
        inflation = np.where(use, 1 + 1 / np.maximum(counts, 1), 0.0).sum(axis=-1) / n
        se = np.sqrt(within * inflation / n)
        se = np.maximum(se, 1.0 / np.maximum(n, 1))  # a one-item change is at most one standard unit
        # skewness of the mean difference (scores near 1 have a long lower tail) from the
        # items' third cumulants within the reference runs (unbiased k3, items seen 3+ times)
        thirds = np.where(present, (reference - ref_mean[..., None, :]) ** 3, 0.0).sum(axis=-2)
        thrice = use & (counts > 2)
        k3 = np.where(thrice, thirds * counts / np.maximum((counts - 1) * (counts - 2), 1), 0.0)
        k3_mean = k3.sum(axis=-1) / np.maximum(thrice.sum(axis=-1), 1)
        skew = np.clip(np.nan_to_num(k3_mean * inflation_3(counts, use) / n**2 / se**3), -MAX_SKEW, MAX_SKEW)
        raw = np.where(n > 0, mean_diff / se, 0.0)
        # Cornish-Fisher: the normal score of a skewed statistic, correction held at |z| >= 4
        z = raw - skew / 6 * (np.minimum(raw**2, 16.0) - 1)
        reference_mean = np.where(use, ref_mean, 0.0).sum(axis=-1) / n
    return Paired(
        mean_diff=mean_diff,
        se=se,
        z=np.nan_to_num(z),
        n_items=n,
        reference_runs=counts.max(axis=-1),
        reference_mean=reference_mean,
    )


@dataclass(frozen=True)
class Step:
    """One run's decision (arrays over the batch axis)."""

    up: np.ndarray  # CUSUM sums after this run (zero after an alarm or restart)
    down: np.ndarray
    up_before_reset: np.ndarray
    down_before_reset: np.ndarray
    verdict: np.ndarray  # -1 regressed, +1 improved, 0 none
    by_limit: np.ndarray  # the single-run limit fired (else the cumulative sum did)
    restart: np.ndarray  # a new reference starts: sums at zero, older runs dropped
    joins: np.ndarray  # this run belongs to the (new) reference


def step(
    z: np.ndarray, up: np.ndarray, down: np.ndarray, design: Design, fingerprint_changed: np.ndarray | bool = False
) -> Step:
    """Advance the two-sided combined Shewhart-CUSUM by one run of standardized differences ``z``.

    After a changed fingerprint only the single-run limit judges (the run is a one-off
    comparison with the old reference); every restart sets both sums to zero.
    """
    z = np.asarray(z, dtype=float)
    changed = np.broadcast_to(np.asarray(fingerprint_changed, dtype=bool), z.shape)
    new_up = np.where(changed, 0.0, np.maximum(0.0, up + z - design.k))
    new_down = np.where(changed, 0.0, np.maximum(0.0, down - z - design.k))
    limit_up, limit_down = z > design.limit, z < -design.limit
    alarm_up = limit_up | (new_up > design.h)
    alarm_down = limit_down | (new_down > design.h)
    verdict = np.where(alarm_down, -1, np.where(alarm_up, 1, 0))
    by_limit = np.where(verdict < 0, limit_down, limit_up) & (verdict != 0)
    restart = (verdict != 0) | changed
    # an alarming run is kept out of the new reference: it was picked for being extreme,
    # and a false alarm's run as the reference would make the next ordinary run alarm back
    joins = (verdict == 0) | changed
    return Step(
        up=np.where(restart, 0.0, new_up),
        down=np.where(restart, 0.0, new_down),
        up_before_reset=new_up,
        down_before_reset=new_down,
        verdict=verdict,
        by_limit=by_limit,
        restart=restart,
        joins=joins,
    )


def detectable_drop(down: float, se: float, design: Design, power: float = POWER) -> float:
    """The smallest drop in mean score the next run would flag with ``power``.

    The next run alarms downwards when ``z < -min(L, h + k - down)``; with ``z`` about
    ``N(-drop / se, 1)`` that happens with ``power`` once ``drop = (c + z_power) * se``.
    """
    cutoff = min(design.limit, design.h + design.k - down)
    return max(cutoff + z_quantile(power), 0.0) * se
