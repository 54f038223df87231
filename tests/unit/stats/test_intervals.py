"""Intervals, Holm's correction, detectable differences, tie-aware ranks, power planning
and cost accounting, checked against independent references and hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ape.schemas.config import ModelConfig
from ape.schemas.results import Outcome, OutputBatch, SessionResult
from ape.tasks.stats.aggregate import aggregate, cost_columns, pairwise_diffs, rank_intervals
from ape.tasks.stats.cost import Budget, estimate, session_cost
from ape.tasks.stats.intervals import (
    bounded_interval,
    clustered_se,
    rate_interval,
    score_interval,
    wilson,
    wilson_bounds,
)
from ape.tasks.stats.power import ASSUMED, items_needed, plan_table, variance_from_sessions
from ape.tasks.stats.significance import holm, minimum_detectable_difference

# --- Wilson ----------------------------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(15, 30), (27, 30), (5, 40), (93, 100), (900, 1000)])
def test_wilson_matches_scipy_away_from_the_edges(k, n):
    reference = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson(k, n) == pytest.approx((reference.low, reference.high), abs=1e-9)


def test_modified_wilson_widens_only_next_to_the_boundary():
    plain = stats.binomtest(29, 30).proportion_ci(method="wilson")
    low, high = wilson(29, 30)
    assert low == pytest.approx(plain.low)
    assert high == pytest.approx(1 - 0.5 * stats.chi2.ppf(0.05, 2) / 30)
    assert high > plain.high
    assert wilson(30, 30, modified=False) == wilson(30, 30)  # no failures: nothing to modify


def test_exact_coverage_is_never_too_narrow_where_the_percentile_bootstrap_is():
    """Coverage over every count (no simulation noise) for the benchmark's independent cells."""
    for p in (0.5, 0.9, 0.95, 0.99):
        for n in (30, 100, 1000):
            pmf = stats.binom.pmf(np.arange(n + 1), n, p)
            bounds = [wilson(k, n) for k in range(n + 1)]
            coverage = sum(pmf[k] for k, (lo, hi) in enumerate(bounds) if lo <= p <= hi)
            assert coverage >= 0.93, (p, n, coverage)
    # the percentile bootstrap of 29/30 correct excludes 0.99 in most resamples: it can only
    # reach 1.0 from above, which is what made the old intervals too short near 1
    means = np.random.default_rng(0).binomial(30, 29 / 30, size=4000) / 30
    assert np.quantile(means, 0.975) == 1.0 and np.quantile(means, 0.025) > 0.86


def test_intervals_of_a_mean_score_stay_in_the_unit_interval_by_construction():
    """``mean +- z se`` of a mean score near 1 crosses 1 (0.975 +- 0.086); Wilson's score
    interval with the effective sample size cannot, for any mean, se or z, and is the normal
    interval to first order inside (0, 1)."""
    low, high = bounded_interval(0.975, 0.025, 3.44, 40)
    assert 0.0 < low < 0.975 < high < 1.0 and high - 0.975 < 0.975 - low
    means = np.r_[0.0, 1e-9, np.linspace(0.001, 0.999, 97), 1 - 1e-9, 1.0]
    for se in (1e-6, 1e-3, 0.02, 0.1, 0.5, 3.0):
        for z in (1.0, 1.96, 3.4, 4.5):
            lows, highs = bounded_interval(means, se, z, 40)
            assert np.all((0.0 <= lows) & (lows <= means) & (means <= highs) & (highs <= 1.0)), (se, z)
    # a plain mean of N scores in [0, 1] has n* >= N - 1: never wider than a pass rate's interval
    scores = np.random.default_rng(1).beta(9.0, 1.0, 30)
    se = scores.std(ddof=1) / math.sqrt(30)
    assert scores.mean() * (1 - scores.mean()) / se**2 >= 29
    # inside, a small se: the normal band to first order (differences of order se^2)
    lows, highs = bounded_interval(np.array([0.3, 0.5, 0.8]), 0.005, 3.0, 1000)
    assert lows == pytest.approx([0.285, 0.485, 0.785], abs=2e-3)
    assert highs == pytest.approx([0.315, 0.515, 0.815], abs=2e-3)
    # the same effective sample size gives Wilson's interval of a proportion (scipy's)
    k, n = 27, 30
    reference = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    se = math.sqrt(0.9 * 0.1 / n)
    assert bounded_interval(0.9, se, stats.norm.ppf(0.975), n) == pytest.approx((reference.low, reference.high))
    # a mean on the bound has no effective n: the observations', as for an all-pass proportion
    assert bounded_interval(1.0, 0.0, stats.norm.ppf(0.975), n) == pytest.approx(
        stats.binomtest(n, n).proportion_ci(method="wilson")[:2]
    )
    assert bounded_interval(0.7, 0.0, 3.0, 10) == pytest.approx((0.7, 0.7))  # no spread inside: the point
    assert np.isnan(bounded_interval(np.nan, 0.1, 3.0, 10)[0]) and np.isnan(bounded_interval(0.5, np.nan, 3.0, 10)[1])
    # a prediction-powered estimate below 0 is taken at 0; its band still starts at 0
    low, high = bounded_interval(-0.02, 0.03, 1.96, 500)
    assert low == 0.0 and 0.0 < high < 0.05


def test_wilson_bounds_never_leave_the_unit_interval_in_floating_point():
    p = np.r_[0.0, 5e-324, 1e-300, 0.5, 1 - 1e-16, 1.0]
    for n in (1e-3, 1.0, 30.0, 1e12, np.inf):
        low, high = wilson_bounds(p, n, 1.96)
        assert np.all((low >= 0.0) & (high <= 1.0)), n
        assert np.all((low <= p + 1e-15) & (p - 1e-15 <= high)), n  # holds p, to the last bit of 1 - p
    assert wilson_bounds(0.0, 10, 2.0)[0] == 0.0 and wilson_bounds(1.0, 10, 2.0)[1] == 1.0


def test_singleton_clusters_change_nothing():
    values = np.r_[np.ones(40), np.zeros(10)]
    plain = rate_interval(values)
    assert plain.method == "wilson" and plain.n_effective == 50
    assert rate_interval(values, [str(i) for i in range(50)]) == plain


def test_duplicated_observations_count_once():
    """Three copies of each of 40 outcomes carry the information of 40, not 120."""
    base = np.r_[np.ones(30), np.zeros(10)]
    copies = np.repeat(base, 3)
    labels = np.repeat(np.arange(40), 3)
    naive = rate_interval(copies)
    clustered = rate_interval(copies, labels)
    assert clustered.method == "wilson-clustered"
    # p(1-p) / SE^2 is 39 with the G/(G-1) factor; a cluster never counts for less than one
    assert clustered.n_effective == pytest.approx(40)
    assert clustered.high - clustered.low > 1.5 * (naive.high - naive.low)
    assert (clustered.low, clustered.high) == pytest.approx(wilson(0.75 * 40, 40, modified=False))


def test_clustered_se_by_hand():
    values = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    labels = np.array(["a", "a", "b", "b", "c", "c"])
    mean = 0.5
    sums = [2 - 2 * mean, 0 - 2 * mean, 1 - 2 * mean]
    expected = math.sqrt(3 / 2 * sum(s * s for s in sums) / 36)
    assert clustered_se(values, labels) == (pytest.approx(expected), 3)


def test_graded_scores_get_bca_and_clusters_resample_whole_clusters():
    rng = np.random.default_rng(5)
    scores = rng.beta(8, 2, size=60)
    interval = score_interval(scores)
    assert interval.method == "bca"
    reference = stats.bootstrap(
        (scores,), np.mean, method="BCa", n_resamples=2000, random_state=np.random.default_rng(20240917)
    )
    assert (interval.low, interval.high) == pytest.approx(tuple(reference.confidence_interval))
    labels = np.repeat(np.arange(12), 5)
    clustered = score_interval(scores, labels)
    assert clustered.method == "bca-clustered" and clustered.n_effective == 12
    assert clustered.low < interval.estimate < clustered.high
    assert score_interval([0.4] * 5).low == pytest.approx(0.4)


# --- Holm, detectable differences, ranks --------------------------------------------------------


def test_holm_by_hand():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    adjusted = holm([0.01, float("nan")])
    assert adjusted[0] == pytest.approx(0.01) and math.isnan(adjusted[1])


def test_minimum_detectable_difference():
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert minimum_detectable_difference(1.0, 100) == pytest.approx(z / 10)


def _sessions(rates: dict[str, list[int]]) -> pd.DataFrame:
    rows = [
        {"model_id": model, "item_id": f"q{i:03d}", "score": float(v), "correct": bool(v), "outcome": "SOLVED"}
        for model, values in rates.items()
        for i, v in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_tie_groups_and_rank_intervals():
    n = 60
    strong = [1] * n
    middle = [1 if i % 4 else 0 for i in range(n)]  # 45 of 60
    close = list(middle)  # 5 items only middle passes, 3 only close: McNemar p = 0.73
    for i in (1, 5, 9, 13, 17):
        close[i] = 0
    for i in (0, 4, 8):
        close[i] = 1
    sessions = _sessions({"strong": strong, "middle": middle, "close": close})
    board = aggregate(sessions)
    pairs = pairwise_diffs(sessions)
    assert list(pairs["p_holm"] >= pairs["p_value"]) == [True] * 3
    ranked = rank_intervals(board, pairs).set_index("model_id")
    assert (ranked.loc["strong", "rank_low"], ranked.loc["strong", "rank_high"]) == (1, 1)
    assert (ranked.loc["middle", "rank_low"], ranked.loc["middle", "rank_high"]) == (2, 3)
    assert (ranked.loc["close", "rank_low"], ranked.loc["close", "rank_high"]) == (2, 3)
    assert ranked["tie_group"].tolist() == [1, 2, 2]
    row = pairs[(pairs["model_a"] == "middle") & (pairs["model_b"] == "close")].iloc[0]
    a, b = np.array(middle, float), np.array(close, float)
    assert row["correlation"] == pytest.approx(np.corrcoef(a, b)[0, 1])
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert row["mde_80"] == pytest.approx(z * (a - b).std(ddof=1) / math.sqrt(n))
    assert not row["significant"]


# --- power planning -------------------------------------------------------------------------------


def test_items_needed_inverts_the_detectable_difference():
    variance = ASSUMED.diff_variance(1)
    n = items_needed(0.1, variance)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert z * math.sqrt(variance / n) <= 0.1 < z * math.sqrt(variance / (n - 1))
    rows = plan_table(0.1, ASSUMED, 50)
    assert [r.items for r in rows] == sorted((r.items for r in rows), reverse=True)  # runs help


def test_variance_from_sessions_separates_run_noise():
    rng = np.random.default_rng(1)
    difficulty = rng.random(200)
    rows = []
    for model, shift in (("a", 0.1), ("b", 0.0)):
        for i, d in enumerate(difficulty):
            for _run in range(4):
                hit = rng.random() < min(1.0, d + shift)
                rows.append({"model_id": model, "item_id": f"q{i}", "score": float(hit), "correct": hit})
    variance = variance_from_sessions(pd.DataFrame(rows))
    assert variance.correlation > 0.8  # both models find the same items hard
    assert variance.diff_variance(10) < variance.diff_variance(1)
    assert "a vs b" in variance.source


# --- cost -----------------------------------------------------------------------------------------


def test_session_cost_and_budget():
    model = ModelConfig(provider="mock", price_input_per_mtok=3.0, price_output_per_mtok=15.0)
    assert session_cost(model, 1000, 200) == pytest.approx((3000 + 3000) / 1e6)
    assert session_cost(model, None, None) is None
    assert session_cost(ModelConfig(provider="mock"), 1000, 200) is None

    def batch(cost: float, cached: bool = False) -> OutputBatch:
        return OutputBatch(
            item_id="x",
            model_id="m",
            sessions=[
                SessionResult(item_id="x", run_index=0, model_id="m", outcome=Outcome.SOLVED, cost=cost, cached=cached)
            ],
        )

    budget = Budget(0.01)
    assert budget.allow()
    budget.add([batch(0.004), batch(0.5, cached=True)])  # cached sessions cost nothing now
    assert budget.spent == pytest.approx(0.004) and budget.allow()
    budget.add([batch(0.007)])
    assert not budget.allow() and budget.stopped
    assert "max_cost = 0.01" in budget.message("m", 3)
    assert Budget(None, 1e9).allow()

    # items in flight: one wave before any price per item is known, then a projection
    wave = Budget(1.0, first_wave=2)
    assert wave.allow(0) and wave.allow(1) and not wave.allow(2) and not wave.stopped
    wave.add([batch(0.3)])
    assert wave.allow(1)  # 0.3 spent + 2 items x 0.3 = 0.9 <= 1.0
    assert not wave.allow(2) and not wave.stopped  # 1.2 > 1.0: wait for those in flight


def test_cached_sessions_cost_nothing_and_their_price_is_reported_apart():
    """total_cost is what was spent; cached_cost what the cache saved. A cached session saved
    by an older APE carries its price in ``cost``: it counts as saved, not as spent."""
    sessions = pd.DataFrame(
        {
            "cost": [0.2, 0.0, 0.3, 0.1],
            "cached_cost": [None, 0.5, None, None],
            "cached": [False, True, True, False],
            "correct": [True, True, False, True],
            "input_tokens": [10, 10, 10, 10],
            "output_tokens": [5, 5, 5, 5],
        }
    )
    costs = cost_columns(sessions)
    assert costs["total_cost"] == pytest.approx(0.3)
    assert costs["cached_cost"] == pytest.approx(0.8)
    uncached = cost_columns(sessions[~sessions["cached"]])
    assert uncached["total_cost"] == pytest.approx(0.3) and math.isnan(uncached["cached_cost"])


def test_estimate_from_prompt_lengths():
    model = ModelConfig(provider="mock", max_tokens=100, price_input_per_mtok=1.0, price_output_per_mtok=2.0)
    e = estimate(model, [400, 401], runs_per_data=3, max_steps=4)
    assert e.sessions == 6 and e.input_tokens == (100 + 101) * 3 and e.output_tokens == 600
    assert e.cost == pytest.approx((603 * 1.0 + 600 * 2.0) / 1e6) and e.output_bound
