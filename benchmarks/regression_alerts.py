"""Can the regression alerts be trusted? A simulation with the built-in mock model.

Two figures, each over repeated trials:

1. False alarms: 40 scheduled runs of an unchanged model (accuracy 0.90, N=500 items),
   each compared (as a new run is) with the previous run and with the first run as the
   pinned baseline. A run *raises an alert* when either comparison says "regressed".
   The alert rate should be at most the nominal 5%, within its binomial error.
2. Power: the model drops from 0.90 to 0.85; the share of trials in which the first run
   after the drop is flagged "regressed" against the run before it (goal: at least 80%).

The mock model samples (``sampling = true``) with a fresh seed per run, so runs differ
like repeated evaluations of a served model do. ``consistency`` is the share of items a
model answers alike in every run (a model at temperature 0 is consistent on most items):
at 0 every answer is an independent draw, the hardest case for any test at N=500.
Correctness comes from the mock model's own generation (its ``_generate``, without
LangChain's callback layer, which would only add time) and is graded by the exact answer.

Usage: python benchmarks/regression_alerts.py [--trials 10] [--power-trials 100]
"""

from __future__ import annotations

import argparse
import math
import re
import time

import numpy as np
import pandas as pd
from langchain_core.messages import HumanMessage

from ape.tasks.models.mocks import MockChatModel
from ape.tasks.stats.regression import compare

N = 500
RUNS = 40
NOMINAL = 0.05


def problems(n: int) -> list[tuple[str, int]]:
    return [(f"What is {i + 2} + {3 * i + 1}?", 4 * i + 3) for i in range(n)]


def one_run(items: list[tuple[str, int]], accuracy: float, seed: int, consistency: float) -> pd.DataFrame:
    model = MockChatModel(
        behaviour="arithmetic", accuracy=accuracy, sampling=True, seed=seed, consistency=consistency, use_tools=False
    )
    passed = []
    for prompt, answer in items:
        text = model._generate([HumanMessage(prompt)]).generations[0].message.content
        passed.append(int(re.findall(r"-?\d+", text)[-1]) == answer)
    flags = np.array(passed)
    return pd.DataFrame(
        {
            "item_id": [str(i) for i in range(len(items))],
            "score": flags.astype(float),
            "passed": flags,
            "item_hash": "same",
        }
    )


def verdict(current: pd.DataFrame, reference: pd.DataFrame) -> str:
    return compare(current, reference, model_id="m", run_id="b", reference_run_id="a", against="previous").verdict


def false_alarms(trials: int, consistency: float, seed0: int) -> tuple[int, int, int, int, float]:
    """(runs with an alert, runs compared, "regressed" against the previous run, against the
    baseline, standard error of the alert rate across trials).

    The runs of one trial share a baseline (a lucky baseline makes later runs look worse
    together), so the error of the rate is taken across trials, not across runs.
    """
    items = problems(N)
    alerts = runs = vs_previous = vs_baseline = 0
    per_trial = []
    for trial in range(trials):
        alerts_before = alerts
        history = [one_run(items, 0.90, seed0 + trial * 1000, consistency)]
        for r in range(1, RUNS):
            current = one_run(items, 0.90, seed0 + trial * 1000 + r, consistency)
            verdicts = [verdict(current, history[-1]), verdict(current, history[0])]
            vs_previous += verdicts[0] == "regressed"
            vs_baseline += verdicts[1] == "regressed"
            alerts += "regressed" in verdicts
            runs += 1
            history.append(current)
        per_trial.append((alerts - alerts_before) / (RUNS - 1))
    spread = float(np.std(per_trial, ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan
    return alerts, runs, vs_previous, vs_baseline, spread


def power(trials: int, consistency: float, seed0: int) -> tuple[int, int]:
    items = problems(N)
    hits = 0
    for trial in range(trials):
        before = one_run(items, 0.90, seed0 + 2 * trial, consistency)
        after = one_run(items, 0.85, seed0 + 2 * trial + 1, consistency)
        hits += verdict(after, before) == "regressed"
    return hits, trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="trials of 40 runs for the false-alarm rate")
    parser.add_argument("--power-trials", type=int, default=100)
    parser.add_argument("--consistency", type=float, nargs="+", default=[0.0, 0.5, 0.8])
    args = parser.parse_args()
    print(f"N={N} items, {RUNS} runs per trial, accuracy 0.90 (drop to 0.85), alpha 0.05")
    for consistency in args.consistency:
        started = time.perf_counter()
        alerts, runs, vs_previous, vs_baseline, se = false_alarms(args.trials, consistency, seed0=11)
        rate = alerts / runs
        hits, trials = power(args.power_trials, consistency, seed0=7_000_000)
        share = hits / trials
        print(
            f"consistency {consistency:.1f}: unchanged model: alerts in {alerts}/{runs} runs = {rate:.3f} "
            f"+- {1.96 * se:.3f} across trials "
            f"(nominal {NOMINAL:.2f}: {'within its error' if rate - 1.96 * se <= NOMINAL else 'ABOVE'}); "
            f"'regressed' against the previous run {vs_previous / runs:.3f}, against the baseline "
            f"{vs_baseline / runs:.3f} (each test's nominal share: {NOMINAL / 2:.3f})"
        )
        print(
            f"consistency {consistency:.1f}: drop 0.90 -> 0.85 flagged in the first run after it in "
            f"{hits}/{trials} trials = {share:.2f} (goal >= 0.80: {'met' if share >= 0.8 else 'NOT met'}) "
            f"[{time.perf_counter() - started:.0f} s]"
        )


if __name__ == "__main__":
    main()
