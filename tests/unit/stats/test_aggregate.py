"""pass@k, the leaderboard, per-category scores and pairwise comparisons."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from ape.tasks.stats.aggregate import (
    LEADERBOARD_COLUMNS,
    PAIRWISE_COLUMNS,
    aggregate,
    category_breakdown,
    pairwise_diffs,
)
from ape.tasks.stats.estimators import pass_at_k, pass_hat_k
from ape.tasks.stats.intervals import bootstrap_mean_ci
from ape.tasks.stats.significance import mcnemar

# --- pass@k ----------------------------------------------------------------------------------


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of n samples (c of them correct) holding at least one correct."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


def test_pass_at_k_matches_direct_enumeration():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_matches_the_binomial_formula_for_large_n():
    for n, c, k in [(200, 10, 100), (200, 1, 1), (150, 37, 10), (1000, 3, 500)]:
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 0)


def brute_force_pass_hat_k(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of n samples (c of them correct) that are all correct."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(all(samples[i] for i in subset) for subset in subsets) / len(subsets)


def test_pass_hat_k_matches_direct_enumeration_and_a_hand_computation():
    assert pass_hat_k(5, 3, 2) == pytest.approx(3 / 10)  # C(3,2)/C(5,2)
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(4, 3, 4) == 0.0
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_hat_k(n, c, k) == pytest.approx(brute_force_pass_hat_k(n, c, k), abs=1e-12)
    with pytest.raises(ValueError, match="k <= n"):
        pass_hat_k(3, 1, 4)


# --- fixtures ---------------------------------------------------------------------------------


def sessions_frame() -> pd.DataFrame:
    """Three runs per item. good: 3/3, 3/3, 2/3, 1/3 correct (+ an item only it answered);
    bad: 0/3, 1/3, 0/3, 0/3. Scores equal correctness."""
    runs = {
        "good": {"i1": [1, 1, 1], "i2": [1, 1, 1], "i3": [1, 1, 0], "i4": [0, 1, 0], "i5": [1, 1, 1]},
        "bad": {"i1": [0, 0, 0], "i2": [0, 1, 0], "i3": [0, 0, 0], "i4": [0, 0, 0]},
    }
    categories = {"i1": "math", "i2": "math", "i3": "text", "i4": "text", "i5": None}
    rows = []
    for model_id, items in runs.items():
        for item_id, results in items.items():
            for run_index, hit in enumerate(results):
                outcome = "SOLVED"
                if model_id == "bad" and item_id == "i4":
                    outcome = ["PARSING_FAILED", "GAVE_UP", "ERROR"][run_index]
                rows.append(
                    {
                        "model_id": model_id,
                        "item_id": item_id,
                        "run_index": run_index,
                        "outcome": outcome,
                        "check_status": "PASSED" if hit else "FAILED",
                        "score": float(hit),
                        "correct": bool(hit),
                        "confidence": None,
                        "latency_s": 0.5 if model_id == "good" else 1.5,
                        "input_tokens": 10,
                        "output_tokens": None if model_id == "bad" else 4,
                        "category": categories[item_id],
                        "cached": run_index == 0,
                    }
                )
    return pd.DataFrame(rows)


# --- the leaderboard --------------------------------------------------------------------------


def test_leaderboard_numbers():
    board = aggregate(sessions_frame()).set_index("model_id")
    good, bad = board.loc["good"], board.loc["bad"]
    assert good["rank"] == 1 and bad["rank"] == 2
    assert good["n_items"] == 5 and good["n_sessions"] == 15 and good["runs_per_data"] == 3
    item_means = [1, 1, 2 / 3, 1 / 3, 1]
    assert good["mean_score"] == pytest.approx(np.mean(item_means))
    assert good["score_se"] == pytest.approx(np.std(item_means, ddof=1) / math.sqrt(5))
    assert good["pass_rate"] == pytest.approx(12 / 15)
    assert good["pass@1"] == pytest.approx(12 / 15)
    assert good["pass@2"] == pytest.approx((4 + 2 / 3) / 5)
    assert good["pass@3"] == pytest.approx(1.0)
    assert bad["pass@3"] == pytest.approx(1 / 4)
    # pass^k by hand: good's items hold 3, 3, 2, 1, 3 of 3 runs correct
    assert good["pass^1"] == pytest.approx(12 / 15)
    assert good["pass^2"] == pytest.approx((1 + 1 + 1 / 3 + 0 + 1) / 5)  # C(2,2)/C(3,2) = 1/3
    assert good["pass^3"] == pytest.approx(3 / 5) and bad["pass^3"] == 0.0
    assert good["pass^2_low"] <= good["pass^2"] <= good["pass^2_high"]
    assert (bad["solved"], bad["parsing_failed"], bad["gave_up"], bad["error"]) == (9, 1, 1, 1)
    assert good["cached"] == 5
    assert good["mean_latency_s"] == pytest.approx(0.5)
    assert good["mean_output_tokens"] == pytest.approx(4.0)
    assert math.isnan(bad["mean_output_tokens"])
    assert good["ci_low"] <= good["mean_score"] <= good["ci_high"]
    assert 0.0 <= bad["ci_low"] <= bad["ci_high"] <= 1.0


def test_leaderboard_columns_and_determinism():
    first, second = aggregate(sessions_frame()), aggregate(sessions_frame())
    pd.testing.assert_frame_equal(first, second)
    hat = [f"pass^{k}{end}" for k in (1, 2, 3) for end in ("", "_high", "_low")]
    expected = LEADERBOARD_COLUMNS[:10] + ["pass@1", "pass@2", "pass@3", *hat] + LEADERBOARD_COLUMNS[10:]
    assert list(first.columns) == expected


def test_single_run_has_no_pass_at_k_and_needs_columns():
    frame = sessions_frame()
    board = aggregate(frame[frame.run_index == 0])
    assert not [c for c in board.columns if c.startswith(("pass@", "pass^"))]
    with pytest.raises(ValueError, match="lacks the columns"):
        aggregate(frame.drop(columns=["correct"]))
    assert aggregate(frame.iloc[0:0]).empty


def test_category_breakdown():
    table = category_breakdown(sessions_frame()).set_index(["model_id", "category"])
    assert table.loc[("good", "math"), "mean_score"] == pytest.approx(1.0)
    assert table.loc[("good", "text"), "mean_score"] == pytest.approx(0.5)
    assert table.loc[("good", "text"), "n_items"] == 2
    assert table.loc[("bad", "math"), "pass_rate"] == pytest.approx(1 / 6)
    assert table.loc[("good", "(none)"), "n_items"] == 1
    no_categories = sessions_frame().assign(category=None)
    assert category_breakdown(no_categories).empty


# --- pairwise ----------------------------------------------------------------------------------


def test_pairwise_over_common_items():
    table = pairwise_diffs(sessions_frame())
    assert list(table.columns) == PAIRWISE_COLUMNS
    assert len(table) == 1
    row = table.iloc[0]
    assert (row.model_a, row.model_b, row.n_items) == ("good", "bad", 4)
    diffs = [1.0, 2 / 3, 2 / 3, 1 / 3]
    assert row.mean_diff == pytest.approx(np.mean(diffs))
    assert row.mean_a == pytest.approx(np.mean([1, 1, 2 / 3, 1 / 3]))
    assert (row.wins, row.ties, row.losses) == (4, 0, 0)
    # majority pass: good passes i1, i2, i3; bad passes none
    assert (row.a_only, row.b_only) == (3, 0)
    assert row.test == "exact" and row.p_value == pytest.approx(0.25)
    assert row.ci_low <= row.mean_diff <= row.ci_high
    assert row.ci_low > 0


def test_pairwise_orders_pairs_by_score_and_counts_ties():
    frame = pd.DataFrame(
        {
            "model_id": ["x", "x", "y", "y", "z", "z"],
            "item_id": ["1", "2", "1", "2", "1", "2"],
            "score": [0.5, 0.0, 0.5, 1.0, 0.0, 0.0],
            "correct": [True, False, True, True, False, False],
        }
    )
    table = pairwise_diffs(frame)
    assert [(r.model_a, r.model_b) for r in table.itertuples()] == [("y", "x"), ("y", "z"), ("x", "z")]
    y_x = table.iloc[0]
    assert (y_x.wins, y_x.ties, y_x.losses) == (1, 1, 0)
    assert (y_x.a_only, y_x.b_only) == (1, 0)


def test_pairwise_with_one_model_is_empty():
    frame = sessions_frame()
    assert pairwise_diffs(frame[frame.model_id == "good"]).empty


# --- statistics --------------------------------------------------------------------------------


def test_mcnemar_exact_and_chi_square():
    assert mcnemar(0, 0) == ("none", None, 1.0)
    test, statistic, p = mcnemar(5, 0)
    assert (test, statistic) == ("exact", None) and p == pytest.approx(2 / 32)
    test, _, p = mcnemar(3, 3)
    assert p == 1.0
    # exact two-sided binomial by hand: n = 10, min = 2
    expected = 2 * sum(math.comb(10, i) for i in range(3)) / 2**10
    assert mcnemar(8, 2)[2] == pytest.approx(expected)
    test, statistic, p = mcnemar(30, 10)
    assert test == "chi2" and statistic == pytest.approx(19**2 / 40)
    assert p == pytest.approx(0.0026631, abs=1e-6)


def test_mcnemar_chi_square_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for a_only, b_only in [(30, 10), (13, 12), (40, 0), (25, 50)]:
        _, statistic, p = mcnemar(a_only, b_only)
        assert p == pytest.approx(stats.chi2.sf(statistic, 1), rel=1e-9)


def test_bootstrap_is_seeded_and_sane():
    values = [0.0, 1.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75]
    assert bootstrap_mean_ci(values) == bootstrap_mean_ci(values)
    continuous = np.random.default_rng(3).random(20)
    assert bootstrap_mean_ci(continuous, seed=1) != bootstrap_mean_ci(continuous, seed=2)
    low, high = bootstrap_mean_ci(values)
    assert low < np.mean(values) < high
    assert bootstrap_mean_ci([0.4] * 5) == (pytest.approx(0.4), pytest.approx(0.4))
    assert all(math.isnan(v) for v in bootstrap_mean_ci([]))
    wide = bootstrap_mean_ci(np.random.default_rng(0).random(5000))
    assert 0.48 < wide[0] < wide[1] < 0.52
