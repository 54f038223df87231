"""Aggregation over saved sessions: the leaderboard, per-category scores and pairwise comparisons.

Every function takes the sessions table of :func:`ape.tasks.report.load_sessions` (one row
per session; at least ``model_id``, ``item_id``, ``score``, ``correct``) and returns a
plain DataFrame. Items are the unit of statistics: a model's runs of one item are
averaged first, then means, standard errors and bootstrap intervals are taken over
items, so ``runs_per_data > 1`` does not pretend to add independent items.
Bootstraps use a fixed seed, so the same results always give the same report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20240917
CONFIDENCE_LEVEL = 0.95
STANDARD_KS = (1, 2, 5, 10, 20, 50, 100)
EXACT_TEST_BELOW = 25  # discordant pairs under which McNemar uses the exact binomial test
OUTCOME_COLUMNS = {
    "SOLVED": "solved",
    "PARSING_FAILED": "parsing_failed",
    "GAVE_UP": "gave_up",
    "ERROR": "error",
}
REQUIRED_COLUMNS = ("model_id", "item_id", "score", "correct")
_CHUNK_CELLS = 4_000_000  # bootstrap index cells drawn at once (bounds memory)


def _require(sessions: pd.DataFrame, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in sessions.columns]
    if missing:
        raise ValueError(
            f"the sessions table lacks the columns {missing}; build it with "
            "ape.tasks.report.load_sessions"
        )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one item with ``c`` correct among ``n`` samples (HumanEval paper).

    ``1 - C(n - c, k) / C(n, k)``, computed as a product so large ``n`` stays exact enough.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


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


def standard_error(values: Iterable[float]) -> float:
    data = np.asarray(list(values), dtype=float)
    data = data[~np.isnan(data)]
    if data.size < 2:
        return math.nan
    return float(data.std(ddof=1) / math.sqrt(data.size))


def item_table(sessions: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, item): runs ``n``, correct runs ``c``, mean ``score``, ``correct_share``."""
    _require(sessions, REQUIRED_COLUMNS)
    frame = sessions.assign(
        score=pd.to_numeric(sessions["score"], errors="coerce").astype(float),
        correct=sessions["correct"].fillna(False).astype(bool),
    )
    grouped = frame.groupby(["model_id", "item_id"], sort=True)
    items = grouped.agg(
        n=("correct", "size"),
        c=("correct", "sum"),
        score=("score", "mean"),
        correct_share=("correct", "mean"),
    )
    if "category" in frame.columns:
        items["category"] = grouped["category"].first()  # the first non-null category
    return items.reset_index()


def ks_for(runs: pd.Series) -> list[int]:
    """The k of pass@k worth reporting: standard ones up to the fewest runs of any item."""
    if runs.empty or int(runs.max()) <= 1:
        return []
    fewest = int(runs.min())
    return sorted({k for k in STANDARD_KS if k <= fewest} | {fewest})


def _mean(series: pd.Series) -> float:
    values = pd.to_numeric(series, errors="coerce").astype(float)
    return float(values.mean()) if values.notna().any() else math.nan


def _model_row(model_id: str, sessions: pd.DataFrame, items: pd.DataFrame) -> dict[str, object]:
    scores = items["score"].to_numpy(dtype=float)
    low, high = bootstrap_mean_ci(scores)
    row: dict[str, object] = {
        "model_id": model_id,
        "n_items": len(items),
        "n_sessions": len(sessions),
        "runs_per_data": int(items["n"].max()) if len(items) else 0,
        "mean_score": float(np.nanmean(scores)) if np.any(~np.isnan(scores)) else math.nan,
        "score_se": standard_error(scores),
        "ci_low": low,
        "ci_high": high,
        "pass_rate": float(sessions["correct"].fillna(False).astype(bool).mean()),
    }
    for k in ks_for(items["n"]):
        row[f"pass@{k}"] = float(
            np.mean([pass_at_k(int(n), int(c), k) for n, c in zip(items["n"], items["c"])])
        )
    outcomes = sessions["outcome"].astype(str) if "outcome" in sessions.columns else None
    for outcome, column in OUTCOME_COLUMNS.items():
        row[column] = int((outcomes == outcome).sum()) if outcomes is not None else 0
    row["check_errors"] = (
        int((sessions["check_status"].astype(str) == "ERROR").sum())
        if "check_status" in sessions.columns
        else 0
    )
    row["cached"] = (
        int(sessions["cached"].fillna(False).astype(bool).sum()) if "cached" in sessions.columns else 0
    )
    for column, name in (
        ("latency_s", "mean_latency_s"),
        ("input_tokens", "mean_input_tokens"),
        ("output_tokens", "mean_output_tokens"),
    ):
        row[name] = _mean(sessions[column]) if column in sessions.columns else math.nan
    return row


LEADERBOARD_COLUMNS = [
    "rank", "model_id", "n_items", "n_sessions", "runs_per_data", "mean_score", "score_se",
    "ci_low", "ci_high", "pass_rate", *OUTCOME_COLUMNS.values(), "check_errors", "cached",
    "mean_latency_s", "mean_input_tokens", "mean_output_tokens",
]  # fmt: skip


def aggregate(sessions: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard: one row per model, best first (mean score, then pass rate, then id).

    Columns are :data:`LEADERBOARD_COLUMNS` plus one ``pass@K`` column per reported k
    (only when some model ran an item more than once).
    """
    _require(sessions, REQUIRED_COLUMNS)
    items = item_table(sessions)
    rows = [
        _model_row(str(model_id), group, items[items["model_id"] == model_id])
        for model_id, group in sessions.groupby("model_id", sort=True)
    ]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=LEADERBOARD_COLUMNS)
    frame = frame.sort_values(
        ["mean_score", "pass_rate", "model_id"], ascending=[False, False, True], na_position="last"
    ).reset_index(drop=True)
    frame.insert(0, "rank", range(1, len(frame) + 1))
    pass_columns = sorted(
        (c for c in frame.columns if c.startswith("pass@")), key=lambda c: int(c.split("@")[1])
    )
    ordered = LEADERBOARD_COLUMNS[: LEADERBOARD_COLUMNS.index("pass_rate") + 1] + pass_columns
    ordered += LEADERBOARD_COLUMNS[LEADERBOARD_COLUMNS.index("pass_rate") + 1 :]
    return frame[ordered]


CATEGORY_COLUMNS = ["model_id", "category", "n_items", "mean_score", "pass_rate"]
NO_CATEGORY = "(none)"


def category_breakdown(sessions: pd.DataFrame) -> pd.DataFrame:
    """Per model and category: items, mean item score, share of sessions correct.

    Empty when no session has a category; items without one are grouped under "(none)".
    """
    _require(sessions, REQUIRED_COLUMNS)
    if "category" not in sessions.columns or not sessions["category"].notna().any():
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    items = item_table(sessions)
    items["category"] = items["category"].fillna(NO_CATEGORY).astype(str)
    grouped = items.groupby(["model_id", "category"], sort=True)
    frame = grouped.agg(
        n_items=("item_id", "size"),
        mean_score=("score", "mean"),
        runs=("n", "sum"),
        hits=("c", "sum"),
    ).reset_index()
    frame["pass_rate"] = frame["hits"] / frame["runs"]
    return frame[CATEGORY_COLUMNS]


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


PAIRWISE_COLUMNS = [
    "model_a", "model_b", "n_items", "mean_a", "mean_b", "mean_diff", "ci_low", "ci_high",
    "wins", "ties", "losses", "a_only", "b_only", "test", "statistic", "p_value",
]  # fmt: skip
TIE_TOLERANCE = 1e-9


def pairwise_diffs(sessions: pd.DataFrame) -> pd.DataFrame:
    """Every pair of models over the items both answered; differences are A - B.

    Models are ordered by mean item score (best first, then id), and A comes before B.
    Per item: mean score over runs (for the difference, its paired bootstrap interval and
    win/tie/loss) and passed when at least half the runs were correct (for McNemar).
    """
    items = item_table(sessions)
    if items.empty:
        return pd.DataFrame(columns=PAIRWISE_COLUMNS)
    order = (
        items.groupby("model_id")["score"].mean().rename("mean").reset_index()
        .sort_values(["mean", "model_id"], ascending=[False, True], na_position="last")["model_id"]
        .tolist()
    )  # fmt: skip
    scores = items.pivot(index="item_id", columns="model_id", values="score")
    passes = items.pivot(index="item_id", columns="model_id", values="correct_share") >= 0.5
    answered = items.pivot(index="item_id", columns="model_id", values="n").notna()
    rows = []
    for i, model_a in enumerate(order):
        for model_b in order[i + 1 :]:
            both = answered[model_a] & answered[model_b]
            a, b = scores.loc[both, model_a].to_numpy(float), scores.loc[both, model_b].to_numpy(float)
            diff = a - b
            low, high = bootstrap_mean_ci(diff)
            pass_a, pass_b = passes.loc[both, model_a], passes.loc[both, model_b]
            a_only, b_only = int((pass_a & ~pass_b).sum()), int((~pass_a & pass_b).sum())
            test, statistic, p_value = mcnemar(a_only, b_only)
            rows.append({
                "model_a": model_a,
                "model_b": model_b,
                "n_items": int(both.sum()),
                "mean_a": float(np.nanmean(a)) if a.size else math.nan,
                "mean_b": float(np.nanmean(b)) if b.size else math.nan,
                "mean_diff": float(np.nanmean(diff)) if diff.size else math.nan,
                "ci_low": low,
                "ci_high": high,
                "wins": int((diff > TIE_TOLERANCE).sum()),
                "ties": int((np.abs(diff) <= TIE_TOLERANCE).sum()),
                "losses": int((diff < -TIE_TOLERANCE).sum()),
                "a_only": a_only,
                "b_only": b_only,
                "test": test,
                "statistic": statistic if statistic is not None else math.nan,
                "p_value": p_value,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=PAIRWISE_COLUMNS)
