"""Aggregation over saved sessions: the leaderboard, per-category scores and pairwise comparisons.

Every function takes the sessions table of :func:`ape.tasks.report.sessions_table.load_sessions` (one row
per session; at least ``model_id``, ``item_id``, ``score``, ``correct``) and returns a
plain DataFrame. Items are the unit of statistics: a model's runs of one item are
averaged first, then means are taken over items, so ``runs_per_data > 1`` does not
pretend to add independent items. Intervals come from :mod:`ape.tasks.stats.intervals`
(Wilson for pass rates, BCa bootstrap for graded scores, clustered over the runs of an
item and over ``[data] cluster_field`` when set; the ``ci_method`` column names it).
Bootstraps use a fixed seed, so the same results always give the same report. The tests
(McNemar, Holm, the minimum detectable difference) come from
:mod:`ape.tasks.stats.significance` and pass@k from :mod:`ape.tasks.stats.estimators`: this
module only builds the tables.

The leaderboard is tie-aware (:func:`rank_intervals`): pairwise McNemar p-values are
Holm-corrected, and a model's rank interval spans every place it could take among the
models it cannot be told apart from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from ape.tasks.stats.estimators import pass_at_k, pass_hat_k
from ape.tasks.stats.intervals import Interval, rate_interval, score_interval
from ape.tasks.stats.significance import detectable_difference, holm, item_correlation, mcnemar

STANDARD_KS = (1, 2, 5, 10, 20, 50, 100)
OUTCOME_COLUMNS = {
    "SOLVED": "solved",
    "PARSING_FAILED": "parsing_failed",
    "GAVE_UP": "gave_up",
    "TRUNCATED": "truncated",
    "ERROR": "error",
}
REQUIRED_COLUMNS = ("model_id", "item_id", "score", "correct")


def _require(sessions: pd.DataFrame, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in sessions.columns]
    if missing:
        raise ValueError(
            f"the sessions table lacks the columns {missing}; "
            "build it with ape.tasks.report.sessions_table.load_sessions"
        )


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
    if "cluster" in frame.columns:
        items["cluster"] = grouped["cluster"].first()
    return items.reset_index()


def _cluster_labels(frame: pd.DataFrame) -> np.ndarray:
    """Cluster of each row: ``[data] cluster_field`` when recorded, else the item itself."""
    labels = frame["item_id"].astype(str)
    if "cluster" in frame.columns:
        cluster = frame["cluster"]
        labels = ("c:" + cluster.astype(str)).where(cluster.notna(), "i:" + labels)
    return labels.to_numpy(dtype=object)


def score_interval_of(sessions: pd.DataFrame, items: pd.DataFrame) -> Interval:
    """The interval of a model's mean score.

    0/1 scores: Wilson over sessions, clustered by item (several runs) and cluster field.
    Graded scores: BCa over item means, clustered by the cluster field when set.
    """
    values = pd.to_numeric(sessions["score"], errors="coerce").to_numpy(dtype=float)
    finite = values[~np.isnan(values)]
    if finite.size and np.all((finite == 0.0) | (finite == 1.0)):
        return rate_interval(values, _cluster_labels(sessions))
    scores = items["score"].to_numpy(dtype=float)
    clusters = _cluster_labels(items) if "cluster" in items.columns else None
    return score_interval(scores, clusters, binary=False)


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
    interval = score_interval_of(sessions, items)
    correct = sessions["correct"].fillna(False).astype(bool)
    rate = rate_interval(correct.to_numpy(dtype=float), _cluster_labels(sessions))
    row: dict[str, object] = {
        "model_id": model_id,
        "n_items": len(items),
        "n_sessions": len(sessions),
        "runs_per_data": int(items["n"].max()) if len(items) else 0,
        "mean_score": float(np.nanmean(scores)) if np.any(~np.isnan(scores)) else math.nan,
        "score_se": interval.se,
        "ci_low": interval.low,
        "ci_high": interval.high,
        "ci_method": interval.method,
        "n_effective": interval.n_effective,
        "pass_rate": float(correct.mean()),
        "pass_rate_low": rate.low,
        "pass_rate_high": rate.high,
    }
    for k in ks_for(items["n"]):
        row[f"pass@{k}"] = float(np.mean([pass_at_k(int(n), int(c), k) for n, c in zip(items["n"], items["c"])]))
    for k in ks_for(items["n"]):  # every one of k runs passed, with its interval over items
        hat = np.array([pass_hat_k(int(n), int(c), k) for n, c in zip(items["n"], items["c"])], dtype=float)
        spread = score_interval(hat, _cluster_labels(items) if "cluster" in items.columns else None, binary=False)
        row[f"pass^{k}"], row[f"pass^{k}_low"], row[f"pass^{k}_high"] = float(hat.mean()), spread.low, spread.high
    outcomes = sessions["outcome"].astype(str) if "outcome" in sessions.columns else None
    for outcome, column in OUTCOME_COLUMNS.items():
        row[column] = int((outcomes == outcome).sum()) if outcomes is not None else 0
    row.update(truncation_columns(sessions, int(row["truncated"])))  # type: ignore[call-overload]
    row["check_errors"] = (
        int((sessions["check_status"].astype(str) == "ERROR").sum()) if "check_status" in sessions.columns else 0
    )
    row["cached"] = int(sessions["cached"].fillna(False).astype(bool).sum()) if "cached" in sessions.columns else 0
    row["batched"] = int(sessions["batch"].fillna(False).astype(bool).sum()) if "batch" in sessions.columns else 0
    for column, name in (
        ("latency_s", "mean_latency_s"),
        ("input_tokens", "mean_input_tokens"),
        ("output_tokens", "mean_output_tokens"),
        ("reasoning_tokens", "mean_reasoning_tokens"),  # per session that reported them
    ):
        row[name] = _mean(sessions[column]) if column in sessions.columns else math.nan
    row.update(cost_columns(sessions))
    return row


def truncation_columns(sessions: pd.DataFrame, truncated: int) -> dict[str, int]:
    """TRUNCATED sessions in two kinds: cut while still reasoning (the budget spent thinking,
    no answer begun: raise max_tokens or lower reasoning_effort) and answers cut after it."""
    if "reasoning_cut" not in sessions.columns or "outcome" not in sessions.columns:
        return {"truncated_reasoning": 0, "truncated_answer": truncated}
    cut = sessions["outcome"].astype(str) == "TRUNCATED"
    in_reasoning = int((sessions["reasoning_cut"].fillna(False).astype(bool) & cut).sum())
    return {"truncated_reasoning": in_reasoning, "truncated_answer": truncated - in_reasoning}


def cost_columns(sessions: pd.DataFrame) -> dict[str, float | int]:
    """Tokens and cost of a model's sessions; cost is NaN when no session has a price.

    ``total_cost`` is what was spent: a session answered from the cache cost nothing (0, or
    a price that an older APE saved with it, left out here). ``cached_cost`` is what those
    cached sessions would have cost asked again: the money the cache saved."""

    def total(column: str, paid: pd.Series | None = None) -> float:
        if column not in sessions.columns:
            return math.nan
        values = pd.to_numeric(sessions[column], errors="coerce")
        if not values.notna().any():
            return math.nan
        return float((values if paid is None else values.where(paid, 0.0)).sum())

    cached = sessions["cached"].fillna(False).astype(bool) if "cached" in sessions.columns else None
    cost = total("cost", None if cached is None else ~cached)
    correct = int(sessions["correct"].fillna(False).astype(bool).sum())
    return {
        "total_input_tokens": total("input_tokens"),
        "total_output_tokens": total("output_tokens"),  # reasoning tokens included, billed as output
        "total_reasoning_tokens": total("reasoning_tokens"),
        "total_cost": cost,
        "cached_cost": _cached_cost(sessions, cached),
        "cost_per_session": cost / len(sessions) if len(sessions) else math.nan,
        "cost_per_correct": cost / correct if correct else math.nan,
    }


def _cached_cost(sessions: pd.DataFrame, cached: pd.Series | None) -> float:
    """The price of the sessions answered from the cache (NaN: none of them has one). A
    session saved by an older APE carries its price in ``cost`` instead of ``cached_cost``."""
    if cached is None or not cached.any():
        return math.nan

    def column(name: str) -> pd.Series:
        if name not in sessions.columns:
            return pd.Series(math.nan, index=sessions.index)
        return pd.to_numeric(sessions[name], errors="coerce")

    old = column("cost")
    price = column("cached_cost").fillna(old.where(old > 0))[cached]
    return float(price.sum()) if price.notna().any() else math.nan


LEADERBOARD_COLUMNS = [
    "rank",
    "model_id",
    "n_items",
    "n_sessions",
    "runs_per_data",
    "mean_score",
    "score_se",
    "ci_low",
    "ci_high",
    "pass_rate",
    *OUTCOME_COLUMNS.values(),
    "check_errors",
    "cached",
    "batched",
    "mean_latency_s",
    "mean_input_tokens",
    "mean_output_tokens",
    "ci_method",
    "n_effective",
    "pass_rate_low",
    "pass_rate_high",
    "total_input_tokens",
    "total_output_tokens",
    "total_cost",
    "cost_per_session",
    "cost_per_correct",
    "cached_cost",
    "mean_reasoning_tokens",
    "total_reasoning_tokens",
    "truncated_reasoning",
    "truncated_answer",
    "rank_low",
    "rank_high",
    "tie_group",
]
RANK_COLUMNS = ("rank_low", "rank_high", "tie_group")


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
    for column in RANK_COLUMNS:  # filled in by rank_intervals once pairwise tests exist
        frame[column] = frame["rank"]
    pass_columns = sorted((c for c in frame.columns if c.startswith("pass@")), key=lambda c: int(c.split("@")[1]))
    pass_columns += sorted(
        (c for c in frame.columns if c.startswith("pass^")),
        key=lambda c: (int(c[5:].split("_")[0]), c.count("_"), c),
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


PAIRWISE_COLUMNS = [
    "model_a",
    "model_b",
    "n_items",
    "mean_a",
    "mean_b",
    "mean_diff",
    "ci_low",
    "ci_high",
    "wins",
    "ties",
    "losses",
    "a_only",
    "b_only",
    "test",
    "statistic",
    "p_value",
    "ci_method",
    "correlation",
    "mde_80",
    "p_holm",
    "significant",
]
TIE_TOLERANCE = 1e-9
SIGNIFICANCE = 0.05


def pairwise_diffs(sessions: pd.DataFrame) -> pd.DataFrame:
    """Every pair of models over the items both answered; differences are A - B.

    Models are ordered by mean item score (best first, then id), and A comes before B.
    Per item: mean score over runs (for the difference, its paired BCa interval, the
    per-item correlation of the two models and the minimum difference detectable at
    80% power) and passed when at least half the runs were correct (for McNemar, whose
    p-values are then Holm-corrected over all pairs: ``p_holm``, ``significant``).
    """
    items = item_table(sessions)
    if items.empty:
        return pd.DataFrame(columns=PAIRWISE_COLUMNS)
    means = items.groupby("model_id")["score"].mean().rename("mean").reset_index()
    order = means.sort_values(["mean", "model_id"], ascending=[False, True], na_position="last")["model_id"].tolist()
    scores = items.pivot(index="item_id", columns="model_id", values="score")
    passes = items.pivot(index="item_id", columns="model_id", values="correct_share") >= 0.5
    answered = items.pivot(index="item_id", columns="model_id", values="n").notna()
    clusters = None
    if "cluster" in items.columns and items["cluster"].notna().any():
        first = items.drop_duplicates("item_id").set_index("item_id")
        clusters = pd.Series(_cluster_labels(first.reset_index()), index=first.index)
    rows = []
    for i, model_a in enumerate(order):
        for model_b in order[i + 1 :]:
            both = answered[model_a] & answered[model_b]
            a, b = scores.loc[both, model_a].to_numpy(float), scores.loc[both, model_b].to_numpy(float)
            diff = a - b
            labels = clusters.reindex(scores.index[both]).to_numpy(dtype=object) if clusters is not None else None
            interval = score_interval(diff, labels, binary=False)
            pass_a, pass_b = passes.loc[both, model_a], passes.loc[both, model_b]
            a_only, b_only = int((pass_a & ~pass_b).sum()), int((~pass_a & pass_b).sum())
            test, statistic, p_value = mcnemar(a_only, b_only)
            rows.append(
                {
                    "model_a": model_a,
                    "model_b": model_b,
                    "n_items": int(both.sum()),
                    "mean_a": float(np.nanmean(a)) if a.size else math.nan,
                    "mean_b": float(np.nanmean(b)) if b.size else math.nan,
                    "mean_diff": float(np.nanmean(diff)) if diff.size else math.nan,
                    "ci_low": interval.low,
                    "ci_high": interval.high,
                    "wins": int((diff > TIE_TOLERANCE).sum()),
                    "ties": int((np.abs(diff) <= TIE_TOLERANCE).sum()),
                    "losses": int((diff < -TIE_TOLERANCE).sum()),
                    "a_only": a_only,
                    "b_only": b_only,
                    "test": test,
                    "statistic": statistic if statistic is not None else math.nan,
                    "p_value": p_value,
                    "ci_method": interval.method,
                    "correlation": item_correlation(a, b),
                    "mde_80": detectable_difference(diff, labels),
                }
            )
    frame = pd.DataFrame(rows, columns=PAIRWISE_COLUMNS)
    frame["p_holm"] = holm(frame["p_value"].astype(float).tolist()) if len(frame) else []
    frame["significant"] = (frame["p_holm"] < SIGNIFICANCE).astype(bool)
    return frame


def rank_intervals(leaderboard: pd.DataFrame, pairwise: pd.DataFrame) -> pd.DataFrame:
    """Fill ``rank_low``, ``rank_high`` and ``tie_group`` from the Holm-corrected pairwise tests.

    A model's best possible rank is 1 + the models significantly better than it, its
    worst the number of models minus those significantly worse. Tie groups walk down
    the leaderboard: a model joins the current group unless it differs significantly
    from the group's first model. Without pairwise rows every model is its own group.
    """
    frame = leaderboard.copy()
    if frame.empty:
        return frame
    models = frame["model_id"].astype(str).tolist()
    better: dict[str, set[str]] = {m: set() for m in models}  # model -> models significantly above
    worse: dict[str, set[str]] = {m: set() for m in models}
    known: set[tuple[str, str]] = set()
    for row in pairwise.to_dict("records"):
        a, b = str(row["model_a"]), str(row["model_b"])
        if a not in better or b not in better:
            continue
        known.add((a, b))
        known.add((b, a))
        if not bool(row["significant"]):
            continue
        winner, loser = (a, b) if float(row["mean_diff"]) > 0 else (b, a)
        better[loser].add(winner)
        worse[winner].add(loser)
    total = len(models)
    frame["rank_low"] = [1 + len(better[m]) for m in models]
    frame["rank_high"] = [total - len(worse[m]) for m in models]
    groups, group, head = [], 0, None
    for m in models:
        if head is None or (m, head) not in known or m in worse[head]:
            group, head = group + 1, m
        groups.append(group)
    frame["tie_group"] = groups
    return frame
