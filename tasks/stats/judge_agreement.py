"""How far to trust a model judge: agreement with people, and scores corrected for its bias.

A judge's grades are not the truth. Given a small set of solutions that people graded
(``[checker] args.calibration_file``) and the judge's grades of the same solutions:

- :func:`agreement` - accuracy (share of equal grades), Cohen's kappa (agreement beyond
  chance, Cohen 1960: ``(p_o - p_e) / (1 - p_e)``) and the confusion table (rows: the
  people's grade, columns: the judge's, labels in scale order, as scikit-learn's
  ``confusion_matrix`` lays it out).
- :func:`ppi_mean` - prediction-powered inference for a mean (Angelopoulos, Bates,
  Fannjiang, Jordan & Zrnic, "Prediction-powered inference", Science 382, 2023): the
  judge's mean over all N items, plus the mean of (person - judge) over the n labelled
  solutions (the "rectifier", which removes the judge's bias in expectation). Its
  standard error combines both parts, ``sqrt(var(f)/N + var(y - f)/n)``, and the 95%
  interval is the CLT one (their Section 2, mean estimation) taken on a bounded scale:
  Wilson's score interval with the effective sample size ``theta (1 - theta) / se^2``
  (:func:`ape.tasks.stats.intervals.bounded_interval`), which is the CLT interval to first order
  and stays in [0, 1], where every score lies, by construction. The raw judge mean's own
  interval, ``sqrt(var(f)/N)``, is narrower but centred on the judge's bias, so it misses
  the true score as N grows; ``benchmarks/judge_ppi.py`` shows both.

The labelled solutions must come from the same kind of answers as the graded ones (in
the best case, a random sample of the models' own answers): the rectifier estimates the
judge's bias on them. Rows of the calibration file with a ``model`` key are used for that
model only, when it has at least :data:`MIN_OWN_LABELS` of them; otherwise every row is.

Items are the unit: a model's runs of one item are averaged first (as the leaderboard
does). Sessions the judge never saw (no parsable solution: score 0 without a judge)
are exact, so only the share ``s`` of judged sessions is corrected:
``theta = mean(f) + s * mean(y - f)``, with ``s^2 var(y - f)/n`` in the variance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ape.tasks.stats.intervals import CONFIDENCE_LEVEL, bounded_interval
from ape.tasks.stats.normal import two_sided_z

MIN_OWN_LABELS = 20


@dataclass(frozen=True)
class Agreement:
    """The judge against people on the same solutions."""

    n: int
    accuracy: float | None
    kappa: float | None
    labels: list[str]
    confusion: list[list[int]]  # rows: people, columns: judge


def agreement(human: Sequence[str], judge: Sequence[str], labels: Sequence[str]) -> Agreement:
    """Accuracy, Cohen's kappa and the confusion table of two gradings of the same solutions.

    ``labels`` fixes the order of the table (the scale, lowest first). Kappa is None when
    chance agreement is 1 (both graders gave one and the same grade throughout).
    """
    if len(human) != len(judge):
        raise ValueError(f"{len(human)} human grades but {len(judge)} judge grades")
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({g for g in [*human, *judge] if g not in index})
    if unknown:
        raise ValueError(f"grades {unknown} are not on the scale {list(labels)}")
    k = len(labels)
    table = np.zeros((k, k), dtype=int)
    for h, j in zip(human, judge, strict=True):
        table[index[h], index[j]] += 1
    n = int(table.sum())
    if n == 0:
        return Agreement(0, None, None, list(labels), table.tolist())
    observed = float(np.trace(table)) / n
    expected = float(table.sum(axis=1) @ table.sum(axis=0)) / n**2
    kappa = None if math.isclose(expected, 1.0) else (observed - expected) / (1.0 - expected)
    return Agreement(n, observed, kappa, list(labels), table.tolist())


@dataclass(frozen=True)
class MeanEstimate:
    """A mean with its standard error and confidence interval (None where undefined)."""

    estimate: float | None
    se: float | None
    low: float | None
    high: float | None


def raw_mean(judge_all: Sequence[float] | np.ndarray, level: float = CONFIDENCE_LEVEL) -> MeanEstimate:
    """The judge's own mean and its CLT interval, ignoring the judge's bias."""
    f = np.asarray(judge_all, dtype=float)
    if f.size == 0:
        return MeanEstimate(None, None, None, None)
    mean = float(f.mean())
    if f.size < 2:
        return MeanEstimate(mean, None, None, None)
    se = float(f.std(ddof=1) / math.sqrt(f.size))
    return _bounded(mean, se, level, f.size)


def _bounded(estimate: float, se: float, level: float, n: int) -> MeanEstimate:
    """The estimate with its ``level`` interval for a mean score in [0, 1] (Wilson with the
    effective sample size, :func:`ape.tasks.stats.intervals.bounded_interval`; ``n`` items where
    the estimate sits on 0 or 1)."""
    low, high = bounded_interval(estimate, se, two_sided_z(1 - level), n)
    return MeanEstimate(estimate, se, float(low), float(high))


def ppi_mean(
    judge_all: Sequence[float] | np.ndarray,
    human_labelled: Sequence[float] | np.ndarray,
    judge_labelled: Sequence[float] | np.ndarray,
    *,
    share: float = 1.0,
    level: float = CONFIDENCE_LEVEL,
) -> MeanEstimate:
    """The prediction-powered estimate of a mean score and its CLT interval.

    ``judge_all``: the judge's score of each of the N items; ``human_labelled`` /
    ``judge_labelled``: people's and the judge's scores of the n calibration solutions;
    ``share``: the part of the N items' scores that came from the judge (the rectifier
    applies to it only). Needs n >= 2 and N >= 2 for an interval.
    """
    f = np.asarray(judge_all, dtype=float)
    y = np.asarray(human_labelled, dtype=float)
    g = np.asarray(judge_labelled, dtype=float)
    if y.shape != g.shape:
        raise ValueError(f"{y.size} human scores but {g.size} judge scores in the labelled set")
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within [0, 1], got {share}")
    if f.size == 0 or y.size == 0:
        return MeanEstimate(None, None, None, None)
    rectifier = y - g
    estimate = float(f.mean() + share * rectifier.mean())
    if f.size < 2 or y.size < 2:
        return MeanEstimate(estimate, None, None, None)
    variance = f.var(ddof=1) / f.size + share**2 * rectifier.var(ddof=1) / y.size
    return _bounded(estimate, float(math.sqrt(variance)), level, f.size)
