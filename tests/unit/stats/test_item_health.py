"""The item ledger and the benchmark's signal to noise, on histories with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ape.tasks.stats.item_health import FLAKY_RATE, flagged_count, health_markdown, item_health, signal_to_noise


def history(n_runs: int = 8) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two models over n_runs unchanged runs: 'hard' never passed, 'coin' alternates, 'easy'
    always passes, 'edited' passes but its content changed once."""
    items, runs = [], []
    for r in range(n_runs):
        run_id = f"r{r:02d}"
        for model in ("a", "b"):
            runs.append(
                {
                    "run_id": run_id,
                    "model_id": model,
                    "config_fingerprint": "c",
                    "data_fingerprint": "d",
                    "checker_fingerprint": "k",
                    "mean_score": 0.5 + (0.2 if model == "a" else 0) + 0.01 * (r % 2),
                }
            )
            for item, passed, content in (
                ("hard", False, "h"),
                ("coin", r % 2 == 0, "c"),
                ("easy", True, "e"),
                ("edited", True, "v1" if r < 4 else "v2"),
            ):
                items.append(
                    {
                        "run_id": run_id,
                        "model_id": model,
                        "item_id": item,
                        "item_hash": content,
                        "passed": passed,
                        "score": float(passed),
                    }
                )
    return pd.DataFrame(items), pd.DataFrame(runs)


def test_flags_and_flip_rates():
    items, runs = history()
    ledger = item_health(items, runs).set_index("item_id")
    assert ledger.loc["hard", "flag"] == "never passed" and ledger.loc["hard", "pass_share"] == 0
    assert ledger.loc["coin", "flag"] == "flaky" and ledger.loc["coin", "flip_rate"] == 1.0
    assert ledger.loc["coin", "flip_pairs"] == 2 * 7  # two models, seven consecutive pairs each
    assert ledger.loc["easy", "flag"] == "" and ledger.loc["easy", "flip_rate"] == 0.0
    assert ledger.loc["edited", "flag"] == "changed" and ledger.loc["edited", "versions"] == 2
    # the pair across the content change is not a pair of the same item
    assert ledger.loc["edited", "flip_pairs"] == 2 * 6
    assert list(item_health(items, runs)["item_id"][:2]) == ["hard", "coin"]  # worst first
    assert flagged_count(ledger.reset_index()) == 3
    assert "| `coin` | flaky | 0.50 | 1.00 (14)" in health_markdown(ledger.reset_index())


def test_a_changed_fingerprint_breaks_the_pairs():
    items, runs = history()
    runs.loc[runs["run_id"] >= "r04", "checker_fingerprint"] = "k2"  # a new checker from run 4 on
    ledger = item_health(items, runs).set_index("item_id")
    assert ledger.loc["coin", "flip_pairs"] == 2 * 6
    assert ledger.loc["coin", "flip_rate"] >= FLAKY_RATE


def test_signal_to_noise_against_a_direct_computation():
    items, runs = history()
    table = signal_to_noise(runs).set_index("model_id")
    noise_a = np.std([0.7 + 0.01 * (r % 2) for r in range(8)], ddof=1)
    signal = np.std([0.705, 0.505], ddof=1)
    assert math.isclose(table.loc["a", "noise_sd"], noise_a)
    assert math.isclose(table.loc["a", "signal_sd"], signal)
    assert math.isclose(table.loc["a", "snr"], signal / noise_a)
    assert math.isnan(signal_to_noise(runs[runs["model_id"] == "a"]).loc[0, "snr"])  # one model: no signal


def test_runs_missing_from_the_runs_table_still_pair_among_themselves():
    items, runs = history()
    ledger = item_health(items, runs[runs["run_id"] != "r03"]).set_index("item_id")
    # r02->r03 and r03->r04 cross from known fingerprints to unknown ones: not pairs
    assert ledger.loc["coin", "flip_pairs"] == 2 * 5 and ledger.loc["coin", "flag"] == "flaky"
    assert ledger.loc["hard", "runs"] == 16 and ledger.loc["hard", "flag"] == "never passed"
