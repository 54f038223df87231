"""Confidence intervals that keep their coverage, for pass rates and graded scores.

Why not the percentile bootstrap everywhere: for a pass rate near 1 on a small
benchmark (the usual leaderboard case) it covers the true rate far less often than
its nominal 95% (about 78% at p = 0.95, n = 30), because the resampled means cannot
leave the few observed values. So:

- **Pass rates** (every score 0 or 1) get the *modified Wilson* interval of Brown, Cai &
  DasGupta (2001): Wilson's score interval, with the Poisson bound for the one or two
  (three above n = 50) successes or failures next to the boundary, where plain Wilson
  is too short. ``method = "wilson"``.
- **Graded scores** get the BCa bootstrap (``scipy.stats.bootstrap``), which corrects the
  percentile interval's bias and skew. ``method = "bca"``.
- **Related observations** (several runs of one item, several questions on one passage:
  ``[data] cluster_field``) are not independent. Their standard error is the clustered
  one recommended in "Adding Error Bars to Evals" (Miller, 2024):
  ``SE^2 = G/(G-1) * sum_c (sum_{i in c} (x_i - mean))^2 / n^2`` over G clusters. A pass
  rate then uses Wilson with the *effective* sample size ``p(1-p)/SE^2`` (clamped to
  between G and n) (``method = "wilson-clustered"``); a graded score resamples whole clusters
  (``method = "bca-clustered"``).

``benchmarks/coverage.py`` measures the coverage of these intervals by simulation.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ape.tasks.stats.normal import two_sided_z

CONFIDENCE_LEVEL = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240917
_CHUNK_CELLS = 4_000_000  # bootstrap index cells drawn at once (bounds memory)


@dataclass(frozen=True)
class Interval:
    """A point estimate, its interval, standard error and how they were computed."""

    estimate: float
    low: float
    high: float
    se: float
    method: str
    n_effective: float


NAN_INTERVAL = Interval(math.nan, math.nan, math.nan, math.nan, "none", 0.0)


def is_binary(values: np.ndarray) -> bool:
    """True when every (non-NaN) value is 0 or 1: a pass rate, not a graded score."""
    finite = values[~np.isnan(values)]
    return bool(finite.size) and bool(np.all((finite == 0.0) | (finite == 1.0)))


def clustered_se(values: np.ndarray, clusters: np.ndarray | None = None) -> tuple[float, int]:
    """(standard error of the mean, number of clusters); plain SE without clusters.

    With clusters: the cluster-robust SE of a mean (Miller 2024), with the small-sample
    factor G/(G-1) (CR1). Without: the usual ``std(ddof=1) / sqrt(n)``.
    """
    n = values.size
    if n == 0:
        return math.nan, 0
    if clusters is None:
        return (float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan), n
    codes, groups = np.unique(clusters, return_inverse=True)
    g = codes.size
    if g < 2:
        return math.nan, g
    residual_sums = np.bincount(groups, weights=values - values.mean(), minlength=g)
    variance = g / (g - 1) * float(np.sum(residual_sums**2)) / n**2
    return math.sqrt(variance), g


def wilson_bounds(p: np.ndarray | float, n: np.ndarray | float, z: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's (1927, "Probable inference, the law of succession, and statistical inference",
    JASA 22) score interval of a proportion ``p`` out of ``n`` (real, may be infinite) at ``z``
    standard errors, vectorised.

    Its ends are the roots ``x`` of ``(p - x)^2 = z^2 x (1 - x) / n``, which lie in [0, 1] for
    every ``p`` in [0, 1]: that is why proportions get it instead of ``p +- z se``. Computed so
    rounding keeps them there too: each end is the product of the roots divided by the other,
    larger root (for ``x`` and for ``1 - x``), a sum with no cancellation and never negative.
    """
    p, n, z = (np.asarray(v, dtype=float) for v in (p, n, z))
    a = z * z / n  # z^2 / n; 0 for an infinite n (no spread: the interval is the point)

    def far_root(share: np.ndarray) -> np.ndarray:
        return (2 * share + a + np.sqrt(4 * a * share * (1 - share) + a * a)) / (2 * (1 + a))

    with np.errstate(divide="ignore", invalid="ignore"):
        up, down = far_root(p), far_root(1 - p)
        low = np.where(up > 0, p * p / ((1 + a) * up), 0.0)
        high = 1.0 - np.where(down > 0, (1 - p) * (1 - p) / ((1 + a) * down), 0.0)
    return low, high


def _stats() -> Any:
    """``scipy.stats``, imported on first need: it takes about a second of the interpreter to
    load, which the live view's plain (clustered) Wilson interval, computed while the
    solvers run, never needs."""
    from scipy import stats

    return stats


def wilson(
    successes: float,
    n: float,
    *,
    level: float = CONFIDENCE_LEVEL,
    dof: float | None = None,
    modified: bool = True,
) -> tuple[float, float]:
    """Modified Wilson interval (Brown, Cai & DasGupta 2001) for ``successes`` out of ``n``.

    ``n`` may be an effective (non-integer) sample size; ``dof`` switches z for Student's
    t; ``modified=False`` gives plain Wilson (no Poisson bound at the edges).
    """
    if n <= 0:
        return math.nan, math.nan
    alpha = 1.0 - level
    z = _stats().t.ppf(1 - alpha / 2, dof) if dof else two_sided_z(alpha)
    p = min(max(successes / n, 0.0), 1.0)
    bounds = wilson_bounds(p, n, z)
    low, high = float(bounds[0]), float(bounds[1])
    # next to the boundary Wilson is too short; there the Poisson bound holds its coverage
    edge = 2 if n <= 50 else 3
    x, y = p * n, (1 - p) * n
    if not modified:
        return low, high
    if 0 < x <= edge + 1e-9:
        low = 0.5 * float(_stats().chi2.ppf(alpha, 2 * x)) / n
    if 0 < y <= edge + 1e-9:
        high = 1.0 - 0.5 * float(_stats().chi2.ppf(alpha, 2 * y)) / n
    return low, high


def bounded_interval(
    mean: np.ndarray | float, se: np.ndarray | float, z: np.ndarray | float, n: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray]:
    """The interval ``mean +- z se`` of an estimated mean of scores in [0, 1], kept in [0, 1]
    by construction, vectorised.

    Wilson's score interval (:func:`wilson_bounds`) with the effective sample size
    ``n* = mean (1 - mean) / se^2`` (Kish 1965, "Survey Sampling": the sample size whose
    binomial variance equals the estimate's; Wilson's interval with it: Dean & Pagano 2015,
    "Evaluating confidence interval methods for binomial proportions in clustered surveys",
    J. Survey Statistics and Methodology 3). To first order it is ``mean +- z se``; near 0
    and 1 it leans away from the bound, where the normal interval would cross it. Scores in
    [0, 1] have a variance of at most ``mean (1 - mean)``, so for a plain mean of N of them
    ``n*`` is at least about N: never wider than a pass rate's. A mean of exactly 0 or 1 has
    no ``n*``: there ``n`` (the observations) is used, as for a plain proportion. ``se = 0``
    inside (0, 1) gives the point. A mean outside [0, 1] (a prediction-powered estimate can
    be one) is taken at the nearest end of [0, 1], which is nearer every possible true mean.
    """
    mean, se, z, n = (np.asarray(v, dtype=float) for v in (mean, se, z, n))
    p = np.minimum(np.maximum(mean, 0.0), 1.0)  # NaN stays NaN
    spread = p * (1 - p)
    with np.errstate(divide="ignore", invalid="ignore"):
        effective = np.where(spread > 0, spread / (se * se), n)
    low, high = wilson_bounds(p, effective, z)
    missing = np.isnan(mean) | np.isnan(se) | np.isnan(z) | ((spread == 0) & ~(n > 0))
    return np.where(missing, np.nan, low), np.where(missing, np.nan, high)


def _observations(
    values: Sequence[float] | np.ndarray, clusters: Sequence[object] | np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The values without NaNs, and their cluster labels (None when there are none, or when
    every cluster is a singleton: then the observations are independent)."""
    data = np.asarray(values, dtype=float)
    keep = ~np.isnan(data)
    labels = None if clusters is None else np.asarray(clusters, dtype=object)[keep]
    data = data[keep]
    if labels is not None and len(set(labels.tolist())) == data.size:
        labels = None
    return data, labels


def rate_interval(
    values: Sequence[float] | np.ndarray,
    clusters: Sequence[object] | np.ndarray | None = None,
    *,
    level: float = CONFIDENCE_LEVEL,
) -> Interval:
    """Interval of the share of 0/1 ``values`` (clustered when ``clusters`` is given)."""
    data, labels = _observations(values, clusters)
    n = data.size
    if n == 0:
        return NAN_INTERVAL
    p = float(data.mean())
    if labels is None:
        low, high = wilson(p * n, n, level=level)
        return Interval(p, low, high, math.sqrt(p * (1 - p) / n), "wilson", float(n))
    se, g = clustered_se(data, labels)
    if p in (0.0, 1.0) or not se or math.isnan(se):
        n_eff = float(g)  # no spread to measure: count only the independent clusters
    else:
        n_eff = min(float(n), max(float(g), p * (1 - p) / se**2))
    # with an estimated effective n the Poisson edge bound over-covers (measured by
    # benchmarks/coverage.py), so clustered rates use plain Wilson
    low, high = wilson(p * n_eff, n_eff, level=level, modified=False)
    se_out = se if se and not math.isnan(se) else math.sqrt(p * (1 - p) / n_eff)
    return Interval(p, low, high, se_out, "wilson-clustered", n_eff)


def score_interval(
    values: Sequence[float] | np.ndarray,
    clusters: Sequence[object] | np.ndarray | None = None,
    *,
    level: float = CONFIDENCE_LEVEL,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    binary: bool | None = None,
) -> Interval:
    """Interval of a mean score: Wilson for 0/1 values, otherwise BCa (over clusters if given).

    ``binary`` forces the choice (None: decided from the values); differences of scores,
    for instance, are never pass rates even when they happen to be 0 or 1.
    """
    if binary or (binary is None and is_binary(np.asarray(values, dtype=float))):
        return rate_interval(values, clusters, level=level)
    data, labels = _observations(values, clusters)
    n = data.size
    if n == 0:
        return NAN_INTERVAL
    mean = float(data.mean())
    if labels is None:
        se = float(data.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        low, high = _bca((data,), _mean, level, resamples, seed)
        return Interval(mean, low, high, se, "bca", float(n))
    se, g = clustered_se(data, labels)
    _, groups = np.unique(labels, return_inverse=True)
    sums = np.bincount(groups, weights=data)
    sizes = np.bincount(groups).astype(float)

    def ratio(s: np.ndarray, m: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.sum(s, axis=axis) / np.sum(m, axis=axis)

    low, high = _bca((sums, sizes), ratio, level, resamples, seed, paired=True)
    return Interval(mean, low, high, se, "bca-clustered", float(g))


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _bca(samples, statistic, level, resamples, seed, paired: bool = False) -> tuple[float, float]:
    stats = _stats()
    first = samples[0]
    if first.size < 2:
        return math.nan, math.nan  # one item (or cluster) says nothing about the spread
    if not paired and np.all(first == first[0]):
        value = float(statistic(*samples))
        return value, value  # no spread: every resample gives the same mean
    options = dict(paired=paired, vectorized=True, confidence_level=level, n_resamples=resamples)
    with warnings.catch_warnings():
        # a degenerate jackknife (e.g. all but one value equal) makes BCa return NaN with a
        # warning; the percentile interval below is the answer then
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(samples, statistic, method="BCa", random_state=np.random.default_rng(seed), **options)
        low, high = result.confidence_interval
        if math.isnan(low) or math.isnan(high):
            result = stats.bootstrap(
                samples, statistic, method="percentile", random_state=np.random.default_rng(seed), **options
            )
            low, high = result.confidence_interval
    return float(low), float(high)


def bootstrap_mean_ci(
    values: Iterable[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = CONFIDENCE_LEVEL,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; (nan, nan) for no values."""
    data = np.asarray(list(values), dtype=float)
    data = data[~np.isnan(data)]
    n = data.size
    if n == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    step = max(1, _CHUNK_CELLS // n)
    for start in range(0, resamples, step):
        stop = min(resamples, start + step)
        means[start:stop] = data[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)
