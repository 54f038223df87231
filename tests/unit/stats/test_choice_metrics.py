"""acc and acc_norm side by side from the check metadata of [choices] sessions."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ape.tasks.stats.choice_metrics import choice_metrics
from ape.tasks.stats.intervals import wilson


def session(model: str, item: str, acc: float, acc_norm: float, metric: str = "acc_norm") -> dict:
    metadata = {"metric": metric, "gold": 0, "choice": 0, "acc": acc, "acc_norm": acc_norm}
    return {"model_id": model, "item_id": item, "check_metadata": json.dumps(metadata)}


def test_each_rule_is_a_mean_over_items_with_its_wilson_interval():
    rows = [session("m", f"i{k}", acc=float(k < 6), acc_norm=float(k < 3)) for k in range(10)]
    # a second session of one item: the item counts once, at the mean of its sessions
    rows.append(session("m", "i0", acc=0.0, acc_norm=0.0))
    rows.append({"model_id": "generated", "item_id": "i0", "check_metadata": json.dumps({"metric": "exact_match"})})
    rows.append({"model_id": "generated", "item_id": "i1", "check_metadata": None})
    entry = choice_metrics(pd.DataFrame(rows))
    assert set(entry) == {"m"}  # a model without choice sessions has no entry
    m = entry["m"]
    assert m.n_items == 10 and m.metric == "acc_norm"
    assert m.acc == pytest.approx(5.5 / 10) and m.acc_norm == pytest.approx(2.5 / 10)
    assert (m.acc_low, m.acc_high) == pytest.approx(wilson(5.5, 10))
    assert (m.acc_norm_low, m.acc_norm_high) == pytest.approx(wilson(2.5, 10))


def test_no_choice_sessions_no_entries():
    assert choice_metrics(pd.DataFrame(columns=["model_id", "item_id", "check_metadata"])) == {}
    broken = pd.DataFrame([{"model_id": "m", "item_id": "i", "check_metadata": "{not json"}])
    assert choice_metrics(broken) == {}
