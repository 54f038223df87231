"""The benchmark's own health, from the run history: items that mislead, and whether the
benchmark can tell its models apart at all.

Item health (:func:`item_health`), per item over every recorded run of every model:

- ``flip_rate``: how often the item's grade (passed: at least half its sessions
  correct) changes between consecutive runs of one model whose config, data and checker
  fingerprints did not change, pooled over models. A model that did not change cannot
  have learned or forgotten the item, so a high flip rate is noise: a flaky item or a
  flaky checker. ``flip_pairs`` counts the pairs behind it.
- ``pass_share``: the share of (model, run) rows that passed it, and ``models``, ``runs``.
- ``versions``: the number of distinct contents (``item_hash``) the item had.

Flags (``flag``, the worst first): ``never passed`` when no model passed it in any of at
least :data:`MIN_RUNS` runs (its reference may be wrong), ``flaky`` when its flip rate is
at least :data:`FLAKY_RATE` over at least :data:`MIN_FLIP_PAIRS` pairs, ``changed`` when
its content changed. Thresholds are module constants so a report can quote them.

Signal to noise (:func:`signal_to_noise`), per model: the spread of its mean score across
runs with unchanged fingerprints (the run-to-run noise, a standard deviation), against the
spread of the models' mean scores (the signal, the standard deviation of the per-model
means). This is the signal-to-noise ratio of Heineman et al., "Signal and Noise: A
Framework for Reducing Uncertainty in Language Model Evaluation" (2025): the dispersion of
scores across models over the variability of one model's score, here across its unchanged
runs; near 1 or below, the benchmark's run-to-run noise is as large as the differences it
is meant to show.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ape.tasks.common.inert import md_text

MIN_RUNS = 3  # "never passed" needs at least this many (model, run) rows
FLAKY_RATE = 0.3  # flips per consecutive pair of an unchanged model
MIN_FLIP_PAIRS = 4
FINGERPRINTS = ("config_fingerprint", "data_fingerprint", "checker_fingerprint")
HEALTH_COLUMNS = ["item_id", "models", "runs", "pass_share", "flip_rate", "flip_pairs", "versions", "flag"]


def _distinct_per_item(items: np.ndarray, other: np.ndarray, n_items: int) -> np.ndarray:
    """How many distinct ``other`` codes (>= 0; -1 is missing) each item code has."""
    keep = other >= 0
    width = int(other.max()) + 1 if keep.any() else 1
    pairs = np.unique(items[keep].astype(np.int64) * width + other[keep])
    return np.bincount(pairs // width, minlength=n_items)


def item_health(items: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per item (columns :data:`HEALTH_COLUMNS`), flagged items first, then by flip rate.

    Works on integer codes (a year of nightly runs of three models on 2,000 items is 2.2
    million rows): a pair is two consecutive runs of one (model, item) with the same
    fingerprints and the same content."""
    if items.empty:
        return pd.DataFrame(columns=HEALTH_COLUMNS)
    run = pd.Categorical(items["run_id"].astype(str))
    model = pd.Categorical(items["model_id"].astype(str))
    item = pd.Categorical(items["item_id"].astype(str))
    content = (
        pd.factorize(items["item_hash"])[0] if "item_hash" in items.columns else np.zeros(len(items), dtype=np.int64)
    )
    passed_raw = items["passed"]
    known = passed_raw.notna().to_numpy()
    passed = passed_raw.fillna(False).astype(bool).to_numpy()
    n_models = len(model.categories)
    # the fingerprints of each (run, model): one code per distinct combination, -1 when unknown
    keys = [c for c in FINGERPRINTS if c in runs.columns]
    setups = np.full(len(run.categories) * n_models, -1, dtype=np.int64)
    if keys and not runs.empty:
        table = runs.drop_duplicates(["run_id", "model_id"])
        r = run.categories.get_indexer(table["run_id"].astype(str))
        m = model.categories.get_indexer(table["model_id"].astype(str))
        codes = pd.factorize(table[keys].astype(str).agg("|".join, axis=1))[0]
        ok = (r >= 0) & (m >= 0)
        setups[r[ok] * n_models + m[ok]] = codes[ok]
    setup = setups[run.codes.astype(np.int64) * n_models + model.codes]
    order = np.lexsort((run.codes, item.codes, model.codes))
    m_s, i_s, s_s, h_s = model.codes[order], item.codes[order], setup[order], content[order]
    p_s, k_s = passed[order], known[order]
    pair = (
        (m_s[1:] == m_s[:-1])
        & (i_s[1:] == i_s[:-1])
        & (s_s[1:] == s_s[:-1])
        & ((h_s[1:] == h_s[:-1]) | (h_s[1:] < 0))
        & k_s[:-1]
    )
    pair_items = i_s[1:][pair]
    flipped = (p_s[1:] != p_s[:-1])[pair]
    n_items = len(item.categories)
    flip_pairs = np.bincount(pair_items, minlength=n_items)
    flips = np.bincount(pair_items, weights=flipped, minlength=n_items)
    rows = np.bincount(item.codes, minlength=n_items)
    seen = np.bincount(item.codes, weights=known, minlength=n_items)
    table = pd.DataFrame(
        {
            "models": _distinct_per_item(item.codes, model.codes, n_items),
            "runs": rows,
            "pass_share": np.bincount(item.codes, weights=passed & known, minlength=n_items)
            / np.where(seen > 0, seen, np.nan),
            "versions": _distinct_per_item(item.codes, content, n_items),
            "flip_pairs": flip_pairs.astype(int),
            "flip_rate": np.where(flip_pairs > 0, flips / np.maximum(flip_pairs, 1), np.nan),
        },
        index=pd.Index(item.categories, name="item_id"),
    )
    never = (table["pass_share"] == 0) & (table["runs"] >= MIN_RUNS)
    flaky = (table["flip_rate"] >= FLAKY_RATE) & (table["flip_pairs"] >= MIN_FLIP_PAIRS)
    changed = table["versions"] > 1
    table["flag"] = np.select([never, flaky, changed], ["never passed", "flaky", "changed"], default="")
    order_key = table["flag"].map({"never passed": 0, "flaky": 1, "changed": 2, "": 3})
    table = table.assign(_order=order_key, _flips=table["flip_rate"].fillna(-1.0))
    table = table.sort_values(["_order", "_flips", "pass_share"], ascending=[True, False, True])
    return table.drop(columns=["_order", "_flips"]).reset_index()[HEALTH_COLUMNS]


def flagged_count(table: pd.DataFrame) -> int:
    return int((table["flag"] != "").sum())


def signal_to_noise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model: runs, mean score, run-to-run sd over runs with its latest fingerprints (noise),
    the sd of the models' mean scores (signal) and their ratio (NaN with fewer than two models
    or two runs)."""
    columns = ["model_id", "runs", "mean_score", "noise_sd", "signal_sd", "snr"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    keys = [c for c in FINGERPRINTS if c in runs.columns]
    rows = []
    for model_id, group in runs.sort_values("run_id").groupby("model_id"):
        latest = group.iloc[-1]
        same = group
        for key in keys:
            same = same[same[key].astype(str) == str(latest[key])]
        scores = same["mean_score"].dropna()
        noise = float(scores.std(ddof=1)) if len(scores) >= 2 else math.nan
        rows.append({"model_id": model_id, "runs": len(scores), "mean_score": float(scores.mean()), "noise_sd": noise})
    table = pd.DataFrame(rows, columns=columns[:4])
    signal = float(table["mean_score"].std(ddof=1)) if len(table) >= 2 else math.nan
    table["signal_sd"] = signal
    table["snr"] = signal / table["noise_sd"].where(table["noise_sd"] > 0)
    return table[columns]


def health_markdown(table: pd.DataFrame, top: int = 20) -> str:
    """The worst items with their evidence."""
    flagged = flagged_count(table)
    lines = [
        f"{len(table)} items; {flagged} flagged (never passed by any model in {MIN_RUNS}+ runs, "
        f"flaky: flip rate >= {FLAKY_RATE} over {MIN_FLIP_PAIRS}+ unchanged pairs, or changed content)",
        "",
        "| Item | Flag | Pass share | Flip rate (pairs) | Models | Runs | Versions |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table.head(top).itertuples():
        flips = "-" if pd.isna(row.flip_rate) else f"{row.flip_rate:.2f} ({row.flip_pairs})"
        lines.append(
            f"| {md_text(row.item_id)} | {row.flag or '-'} | {row.pass_share:.2f} | {flips} | {row.models} "
            f"| {row.runs} | {row.versions} |"
        )
    return "\n".join(lines) + "\n"


def snr_markdown(table: pd.DataFrame) -> str:
    lines = [
        "| Model | Runs (unchanged) | Mean score | Run-to-run sd (noise) | Between-model sd (signal) | Signal/noise |",
        "|---|---|---|---|---|---|",
    ]
    for row in table.itertuples():
        cells = [f"{v:.3f}" if not pd.isna(v) else "-" for v in (row.mean_score, row.noise_sd, row.signal_sd)]
        snr = "-" if pd.isna(row.snr) else f"{row.snr:.1f}"
        lines.append(f"| {md_text(row.model_id)} | {row.runs} | {cells[0]} | {cells[1]} | {cells[2]} | {snr} |")
    return "\n".join(lines) + "\n"
