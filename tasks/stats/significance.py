"""Tests of a difference, their correction for multiplicity, and the difference they detect.

- :func:`mcnemar`: the paired pass/fail test (exact binomial or chi-square).
- :func:`holm` and :func:`holm_rejected`: Holm's (1979) step-down correction, as adjusted
  p-values and as the tests rejected at ``alpha``; the rejections are read off the adjusted
  p-values, so the two can never disagree.
- :func:`detection_z`, :func:`minimum_detectable_difference` and
  :func:`detectable_difference`: the normal-approximation power formula
  ``(z_{1-alpha/2} + z_power) * sd / sqrt(n)`` for a paired difference of means.
- :func:`item_correlation`: how alike two models' item scores are (what makes pairing pay).

The tables that use them are built in :mod:`ape.tasks.stats.aggregate`,
:mod:`ape.tasks.stats.regression` and :mod:`ape.tasks.stats.power`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ape.tasks.stats.intervals import clustered_se
from ape.tasks.stats.normal import two_sided_z, z_quantile

EXACT_TEST_BELOW = 25  # discordant pairs under which McNemar uses the exact binomial test
ALPHA = 0.05
POWER = 0.8


def mcnemar(a_only: int, b_only: int, *, exact: bool = False) -> tuple[str, float | None, float]:
    """Paired pass/fail test from the discordant counts: (test, statistic, two-sided p).

    Exact binomial test when there are fewer than 25 discordant items (or ``exact``),
    otherwise the chi-square statistic with continuity correction; "none" (p = 1) without any.
    """
    n = a_only + b_only
    if n == 0:
        return "none", None, 1.0
    if n < EXACT_TEST_BELOW or exact:
        tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / 2**n
        return "exact", None, min(1.0, 2.0 * tail)
    statistic = (abs(a_only - b_only) - 1) ** 2 / n
    return "chi2", float(statistic), math.erfc(math.sqrt(statistic / 2.0))


def holm(p_values: Sequence[float | None]) -> list[float]:
    """Holm's step-down adjusted p-values (controls the family-wise error rate).

    Sorted ascending, the i-th (0-based) of m p-values is multiplied by m - i, made
    monotone with a running maximum and capped at 1. NaN (or None) stays NaN and is not
    counted in m.
    """
    values = np.asarray([math.nan if p is None else p for p in p_values], dtype=float)
    adjusted = np.full(values.shape, math.nan)
    valid = np.flatnonzero(~np.isnan(values))
    m = valid.size
    order = valid[np.argsort(values[valid], kind="stable")]
    running = 0.0
    for i, index in enumerate(order):
        running = max(running, min(1.0, (m - i) * values[index]))
        adjusted[index] = running
    return adjusted.tolist()


def holm_rejected(p_values: Sequence[float | None], alpha: float) -> list[bool]:
    """Which of a family's tests Holm's procedure rejects at ``alpha``: those whose adjusted
    p-value (:func:`holm`) is at most ``alpha``. A missing p-value is never rejected."""
    return [not math.isnan(p) and p <= alpha for p in holm(p_values)]


def detection_z(alpha: float, power: float) -> float:
    """``z_{1-alpha/2} + z_power``: how many standard errors a true difference must be for a
    two-sided test at ``alpha`` to find it with ``power``."""
    return two_sided_z(alpha) + z_quantile(power)


def minimum_detectable_difference(sd_diff: float, n: float, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """Smallest true mean difference a two-sided paired test at ``alpha`` detects with ``power``.

    ``(z_{1-alpha/2} + z_power) * sd_diff / sqrt(n)``: the normal-approximation power
    formula for a paired difference of means (``sd_diff`` over items or clusters).
    """
    if n <= 0 or math.isnan(sd_diff):
        return math.nan
    return float(detection_z(alpha, power) * sd_diff / math.sqrt(n))


def detectable_difference(diff: np.ndarray, clusters: np.ndarray | None = None) -> float:
    """Minimum detectable difference (80% power, two-sided 5%) of a paired comparison.

    From the (clustered) standard error of the item differences: ``2.80 * SE``.
    """
    diff = diff[~np.isnan(diff)]
    if diff.size < 2:
        return math.nan
    se, _ = clustered_se(diff, clusters)
    if math.isnan(se) or se == 0.0:
        return math.nan  # every item differs by the same amount: no spread to size a test by
    return minimum_detectable_difference(se * math.sqrt(diff.size), diff.size, power=POWER)


def item_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two models' item scores (NaN when either does not vary).

    High correlation (the models pass and fail the same items) is what makes a paired
    comparison so much more sensitive than two separate intervals.
    """
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if a.size < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])
