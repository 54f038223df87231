"""Regression detection: one model's run against an earlier run, paired item by item.

Inputs are per-item tables of the two runs (``item_id``, ``score``: mean over the item's
sessions, ``passed``: at least half its sessions correct, ``item_hash``: the item's
content). Only items both runs answered *with unchanged content* are paired; changed,
new and removed items are counted and named in the note. A changed checker makes scores
incomparable, so such a comparison has no verdict.

The verdict is the exact McNemar test on pass/fail (:func:`ape.tasks.stats.significance.mcnemar`),
two-sided at ``alpha``: "regressed" when significantly more items went from pass to fail
than the other way, "improved" for the reverse, else "no detectable change". With an
unchanged model a comparison says "regressed" at most alpha/2 of the time (the exact test
is conservative), which ``benchmarks/regression_alerts.py`` checks by simulation.

The minimum detectable change is the pass-rate difference this comparison would flag
with 80% power: ``(z(1 - alpha/2) + z(0.8)) * sd(paired differences) / sqrt(n)``, and
never less than the fewest one-sided flips the exact test can call significant, over n.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ape.schemas.report import RegressionRow
from ape.tasks.stats.intervals import bootstrap_mean_ci
from ape.tasks.stats.significance import mcnemar, minimum_detectable_difference

ALPHA = 0.05
POWER = 0.8


def fewest_significant_flips(alpha: float = ALPHA) -> int:
    """The smallest k for which k flips in one direction and none back give p < alpha."""
    k = 1
    while mcnemar(k, 0, exact=True)[2] >= alpha:
        k += 1
    return k


def min_detectable_change(differences: np.ndarray, alpha: float = ALPHA, power: float = POWER) -> float | None:
    n = differences.size
    if n == 0:
        return None
    sd = float(differences.std(ddof=1)) if n > 1 else 0.0
    return max(minimum_detectable_difference(sd, n, alpha=alpha, power=power), fewest_significant_flips(alpha) / n)


def compare(
    current: pd.DataFrame,
    reference: pd.DataFrame,
    *,
    model_id: str,
    run_id: str,
    reference_run_id: str,
    against: str,
    alpha: float = ALPHA,
    checker_changed: bool = False,
    config_changed: bool = False,
) -> RegressionRow:
    """``current`` against ``reference`` (both per-item tables of one model)."""
    base = {
        "model_id": model_id,
        "run_id": run_id,
        "against": against,
        "reference_run_id": reference_run_id,
        "alpha": alpha,
    }
    if checker_changed:
        return RegressionRow(
            **base, verdict="not comparable", note="the checker changed between the runs: scores are not comparable"
        )
    cur = current.set_index("item_id")
    ref = reference.set_index("item_id")
    shared = cur.index.intersection(ref.index)
    same = cur.loc[shared, "item_hash"].to_numpy() == ref.loc[shared, "item_hash"].to_numpy()
    paired = shared[same]
    counts = {
        "changed_items": int((~same).sum()),
        "new_items": int(len(cur.index.difference(ref.index))),
        "removed_items": int(len(ref.index.difference(cur.index))),
    }
    notes = []
    if any(counts.values()):
        notes.append(
            f"compared on the {len(paired)} unchanged items both runs answered "
            f"({counts['changed_items']} changed, {counts['new_items']} new, "
            f"{counts['removed_items']} removed)"
        )
    if config_changed:
        notes.append("the prompt or model settings changed between the runs")
    note = "; ".join(notes) or None
    if len(paired) == 0:
        return RegressionRow(**base, **counts, verdict="not comparable", note=note or "no items in common")
    a = cur.loc[paired, "score"].to_numpy(float)
    b = ref.loc[paired, "score"].to_numpy(float)
    pass_a = cur.loc[paired, "passed"].to_numpy(bool)
    pass_b = ref.loc[paired, "passed"].to_numpy(bool)
    current_only, reference_only = int((pass_a & ~pass_b).sum()), int((~pass_a & pass_b).sum())
    _, _, p_value = mcnemar(current_only, reference_only, exact=True)
    low, high = bootstrap_mean_ci(a - b)
    if p_value < alpha and current_only < reference_only:
        verdict = "regressed"
    elif p_value < alpha and current_only > reference_only:
        verdict = "improved"
    else:
        verdict = "no detectable change"
    return RegressionRow(
        **base,
        **counts,
        verdict=verdict,
        n_items=len(paired),
        mean_current=float(np.nanmean(a)),
        mean_reference=float(np.nanmean(b)),
        mean_diff=float(np.nanmean(a - b)),
        ci_low=_finite(low),
        ci_high=_finite(high),
        pass_rate_diff=float(pass_a.mean() - pass_b.mean()),
        current_only=current_only,
        reference_only=reference_only,
        p_value=p_value,
        min_detectable_change=min_detectable_change(pass_a.astype(float) - pass_b.astype(float), alpha),
        note=note,
    )


def _finite(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)
