"""Sample sizes for a paired comparison of two models (``ape plan --difference D``).

Two models answer the same items; the test is on the mean of the per-item score
differences. Following "Adding Error Bars to Evals" (Miller, 2024), the variance of
one item's difference splits into a part between items and a part within an item
(run-to-run sampling), and only the latter shrinks with ``runs_per_data = k``:

    var_d(k) = var_A + var_B - 2 cov_AB + (within_A + within_B) / k

where ``var`` and ``cov`` are of the items' *expected* scores. Items needed at power
1 - beta, two-sided level alpha: ``n = (z_{1-alpha/2} + z_{1-beta})^2 var_d(k) / D^2``.

Without earlier runs the variances are the worst case for a pass rate (p = 0.5: a
total variance of 0.25 per model, half between items and half within, no correlation); with
earlier runs in the output folder they are measured from the saved sessions of the
two best models (between-item variance, within-item variance from items with several
runs, and their correlation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ape.tasks.stats.significance import detection_z, minimum_detectable_difference

RUNS = (1, 2, 3, 5, 10)


@dataclass(frozen=True)
class VarianceModel:
    """The variance components of a paired comparison and where they came from."""

    between_a: float
    between_b: float
    covariance: float
    within_a: float
    within_b: float
    source: str  # "assumed" or a description of the earlier runs

    @property
    def correlation(self) -> float:
        denominator = math.sqrt(self.between_a * self.between_b)
        return self.covariance / denominator if denominator > 0 else math.nan

    def diff_variance(self, runs: int) -> float:
        return max(
            self.between_a + self.between_b - 2 * self.covariance + (self.within_a + self.within_b) / runs,
            0.0,
        )


ASSUMED = VarianceModel(
    0.125,
    0.125,
    0.0,
    0.125,
    0.125,
    "assumed (no earlier runs): pass rates near 0.5, half the variance between items, uncorrelated models",
)


def items_needed(difference: float, variance: float, *, level: float = 0.95, power: float = 0.8) -> int:
    """Items needed to detect ``difference`` with ``power`` (two-sided test at ``level``)."""
    if difference <= 0:
        raise ValueError(f"the difference must be positive, got {difference}")
    return max(2, math.ceil(detection_z(1 - level, power) ** 2 * variance / difference**2))


def _components(items: pd.DataFrame, model: str) -> tuple[pd.Series, float]:
    """(item mean scores, mean within-item variance of one run) of one model."""
    own = items[items["model_id"] == model].set_index("item_id")
    within = own.loc[own["n"] > 1, "within"]
    return own["score"], float(within.mean()) if len(within) else 0.0


def variance_from_sessions(sessions: pd.DataFrame) -> VarianceModel:
    """Variance components measured from earlier sessions (the two best models).

    A model's item means over k runs carry ``within / k`` of run noise; it is taken out
    of their variance to leave the between-item part. With one model the other is
    assumed to be like it and uncorrelated.
    """
    frame = sessions.assign(score=pd.to_numeric(sessions["score"], errors="coerce").astype(float))
    grouped = frame.groupby(["model_id", "item_id"])["score"]
    items = pd.DataFrame({"score": grouped.mean(), "n": grouped.size(), "within": grouped.var(ddof=1)}).reset_index()
    if items.empty:
        return ASSUMED
    ranking = items.groupby("model_id")["score"].mean().sort_values(ascending=False)
    best = ranking.index.tolist()[:2]
    means_a, within_a = _components(items, best[0])
    runs_a = float(items[items["model_id"] == best[0]]["n"].mean())
    between_a = max(float(means_a.var(ddof=1)) - within_a / runs_a, 0.0) if len(means_a) > 1 else 0.25
    if len(best) == 1:
        return VarianceModel(
            between_a=between_a,
            between_b=between_a,
            covariance=0.0,
            within_a=within_a,
            within_b=within_a,
            source=f"measured: {best[0]} on {len(means_a)} items (one model: the other assumed alike and uncorrelated)",
        )
    means_b, within_b = _components(items, best[1])
    runs_b = float(items[items["model_id"] == best[1]]["n"].mean())
    between_b = max(float(means_b.var(ddof=1)) - within_b / runs_b, 0.0) if len(means_b) > 1 else 0.25
    both = pd.concat([means_a.rename("a"), means_b.rename("b")], axis=1).dropna()
    covariance = float(np.cov(both["a"], both["b"], ddof=1)[0, 1]) if len(both) > 1 else 0.0
    return VarianceModel(
        between_a=between_a,
        between_b=between_b,
        covariance=covariance,
        within_a=within_a,
        within_b=within_b,
        source=f"measured: {best[0]} vs {best[1]} on {len(both)} shared items",
    )


@dataclass(frozen=True)
class PlanRow:
    runs_per_data: int
    items: int
    sessions_per_model: int
    detectable_with_data: float  # with every item of the data file


def plan_table(
    difference: float, variance: VarianceModel, data_items: int, runs: tuple[int, ...] = RUNS
) -> list[PlanRow]:
    """For each runs_per_data: items needed, sessions per model, and what the data detects."""
    rows = []
    for k in runs:
        var = variance.diff_variance(k)
        n = items_needed(difference, var)
        # the same two-sided 5%, 80% power as items_needed
        rows.append(PlanRow(k, n, n * k, minimum_detectable_difference(math.sqrt(var), data_items)))
    return rows
