"""acc and acc_norm of log-likelihood multiple-choice runs, side by side, as
lm-evaluation-harness reports its ``multiple_choice`` tasks.

A ``[choices]`` session's score follows one rule (``[choices] metric``); its check
metadata holds the grade of both (:class:`ape.tasks.checking.choice.ChoiceChecker`), so
the report can show both without asking the model again. Each is the mean over items of
the item's mean over its sessions, with the modified Wilson interval over items (Brown,
Cai & DasGupta 2001, "Interval estimation for a binomial proportion", Statistical Science
16), the interval the leaderboard gives a binary mean score.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from ape.schemas.report import ChoiceMetricsEntry
from ape.tasks.stats.intervals import wilson

RULES = ("acc", "acc_norm")


def _grades(metadata: Any) -> dict[str, Any] | None:
    """The check metadata of a choice session (acc, acc_norm, metric), or None for another."""
    if not isinstance(metadata, str):
        return None
    try:
        data = json.loads(metadata)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(rule), (int, float)) for rule in RULES):
        return None
    return data


def choice_metrics(sessions: pd.DataFrame) -> dict[str, ChoiceMetricsEntry]:
    """Model id -> its acc and acc_norm, for each model with choice sessions (else empty)."""
    if sessions.empty or "check_metadata" not in sessions:
        return {}
    grades = sessions["check_metadata"].map(_grades).dropna()
    if grades.empty:
        return {}
    # one row per choice session: its model, item, both grades and the rule it was scored by
    chosen = pd.DataFrame(
        {rule: [float(v[rule]) for v in grades] for rule in RULES}
        | {"metric": [str(v.get("metric") or "acc") for v in grades]},
        index=grades.index,
    ).join(sessions[["model_id", "item_id"]])
    result: dict[str, ChoiceMetricsEntry] = {}
    for model_id, frame in chosen.groupby("model_id", sort=False):
        items = frame.groupby("item_id")[list(RULES)].mean()
        n = len(items)
        values: dict[str, float] = {}
        for rule in RULES:
            successes = float(items[rule].sum())
            low, high = wilson(successes, n)
            values |= {rule: successes / n, f"{rule}_low": low, f"{rule}_high": high}
        result[str(model_id)] = ChoiceMetricsEntry(metric=frame["metric"].iloc[-1], n_items=n, **values)
    return result
